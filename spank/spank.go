// Package spank holds the persyst SPANK plugin, spank_persyst.so, loaded by sbatch, srun,
// salloc, slurmd, slurmstepd and the job prolog/epilog through plugstack.conf:
//
//	optional /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_persyst.so default=on socket=/run/persyst/persyst.sock timeout=5
//
// The plugin is written in C and built by make with the C compiler alone, so that a Slurm
// process that loads it starts no language runtime: plugin.c owns the SPANK symbols,
// options.c parses the plugstack.conf arguments and --persyst, client.c speaks the wire
// protocol (daemon/wire) to the node daemon.
//
// The Go in this package only hands the C parts to Go tests, which check them against
// the Go reference: spank/options for the arguments, daemon/wire for the protocol.
package spank

/*
#cgo CFLAGS: -Wall -Wextra -Wno-unused-parameter
// plugin.c is compiled into the test binary too; its Slurm symbols (spank_*, slurm_*) are
// resolved only where Slurm loads the plugin, and are never called by the tests.
#cgo LDFLAGS: -Wl,--unresolved-symbols=ignore-all
#include <stdlib.h>
#include <string.h>
#include "persyst.h"

struct errs { char buf[1 << 16]; size_t len; int n; };

static void collect(void *arg, const char *msg)
{
	struct errs *e = arg;
	size_t l = strlen(msg);

	if (e->len + l + 1 < sizeof(e->buf)) {
		memcpy(e->buf + e->len, msg, l);
		e->buf[e->len + l] = '\n';
		e->len += l + 1;
	}
	e->n++;
}

static int parse_args(int ac, char **av, struct persyst_config *c, struct errs *e)
{
	return persyst_parse_args(ac, av, c, collect, e);
}
*/
import "C"

import (
	"strings"
	"time"
	"unsafe"

	"github.com/persyst/persyst/spank/options"
)

// parseArgs runs the C argument parser: the configuration and one message per error.
func parseArgs(args []string) (options.Config, []string) {
	av := make([]*C.char, len(args)+1)
	for i, a := range args {
		av[i] = C.CString(a)
		defer C.free(unsafe.Pointer(av[i]))
	}
	var cfg C.struct_persyst_config
	e := (*C.struct_errs)(C.calloc(1, C.sizeof_struct_errs))
	defer C.free(unsafe.Pointer(e))
	n := C.parse_args(C.int(len(args)), &av[0], &cfg, e)
	var msgs []string
	if e.len > 0 {
		msgs = strings.Split(strings.TrimSuffix(C.GoStringN(&e.buf[0], C.int(e.len)), "\n"), "\n")
	}
	if int(n) != len(msgs) || int(e.n) != len(msgs) {
		msgs = append(msgs, "(error count and messages disagree)")
	}
	return options.Config{
		DefaultOn: cfg.default_on != 0,
		Socket:    C.GoString(&cfg.socket[0]),
		Timeout:   time.Duration(cfg.timeout_ns),
		Report:    C.GoString(&cfg.report[0]),
	}, msgs
}

// markUnreachable runs the C marker of an unreachable daemon: whether this caller is the
// first to mark it.
func markUnreachable(path, note string) bool {
	cp, cn := C.CString(path), C.CString(note)
	defer C.free(unsafe.Pointer(cp))
	defer C.free(unsafe.Pointer(cn))
	return C.persyst_mark_unreachable(cp, cn) == 1
}

// parseValue runs the C --persyst parser: 1 on, 0 off, -1 invalid.
func parseValue(v string) int {
	cv := C.CString(v)
	defer C.free(unsafe.Pointer(cv))
	return int(C.persyst_parse_value(cv))
}

// event is the C event's fields, as SPANK hands them to the plugin.
type event struct {
	JobID, StepID           uint32
	HasStep                 bool
	ArrayJobID, ArrayTaskID uint32
	UID, GID                uint32
	NodeID, NNodes          uint32
	LocalTasks, TotalTasks  uint32
	NCPUs                   uint32
	JobMemMB, StepMemMB     uint64
	JobCores, StepCores     *string
	GPUs                    *string
	Option                  int
	HasExit                 bool
	ExitStatus              int
}

// Event kinds, as the C side numbers them.
const (
	kindJobStart  = int(C.PERSYST_JOB_START)
	kindStepStart = int(C.PERSYST_STEP_START)
	kindStepEnd   = int(C.PERSYST_STEP_END)
	kindJobEnd    = int(C.PERSYST_JOB_END)
)

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// encode runs the C encoder; ok is false when the message does not fit.
func encode(kind int, e event, defaultOn bool, now time.Time) (string, bool) {
	ev := C.struct_persyst_event{
		job_id: C.uint32_t(e.JobID), step_id: C.uint32_t(e.StepID), has_step: cbool(e.HasStep),
		array_job_id: C.uint32_t(e.ArrayJobID), array_task_id: C.uint32_t(e.ArrayTaskID),
		uid: C.uint32_t(e.UID), gid: C.uint32_t(e.GID), node_id: C.uint32_t(e.NodeID), nnodes: C.uint32_t(e.NNodes),
		local_tasks: C.uint32_t(e.LocalTasks), total_tasks: C.uint32_t(e.TotalTasks), ncpus: C.uint32_t(e.NCPUs),
		job_mem_mb: C.uint64_t(e.JobMemMB), step_mem_mb: C.uint64_t(e.StepMemMB),
		option: C.int(e.Option), has_exit: cbool(e.HasExit), exit_status: C.int(e.ExitStatus),
	}
	if e.JobCores != nil {
		ev.job_cores = C.CString(*e.JobCores)
		defer C.free(unsafe.Pointer(ev.job_cores))
	}
	if e.StepCores != nil {
		ev.step_cores = C.CString(*e.StepCores)
		defer C.free(unsafe.Pointer(ev.step_cores))
	}
	if e.GPUs != nil {
		ev.gpus = C.CString(*e.GPUs)
		defer C.free(unsafe.Pointer(ev.gpus))
	}
	const size = C.PERSYST_MAX_MESSAGE + 2
	buf := (*C.char)(C.malloc(size))
	defer C.free(unsafe.Pointer(buf))
	ts := C.struct_timespec{tv_sec: C.long(now.Unix()), tv_nsec: C.long(now.Nanosecond())}
	n := C.persyst_encode(buf, size, C.int(kind), &ev, cbool(defaultOn), &ts)
	if n < 0 {
		return "", false
	}
	return C.GoStringN(buf, n), true
}

// reply is what the C side read from a daemon's reply.
type reply struct {
	OK     bool
	Error  string
	Cgroup string
}

func replyOf(r *C.struct_persyst_reply) reply {
	return reply{OK: r.ok != 0, Error: C.GoString(&r.error[0]), Cgroup: C.GoString(&r.cgroup[0])}
}

// parseReply runs the C reply parser; why is set when the line is not a reply.
func parseReply(line string) (r reply, why string) {
	cl := C.CString(line)
	defer C.free(unsafe.Pointer(cl))
	var cr C.struct_persyst_reply
	var w [256]C.char
	if C.persyst_parse_reply(cl, C.size_t(len(line)), &cr, &w[0], C.size_t(len(w))) < 0 {
		return reply{}, C.GoString(&w[0])
	}
	return replyOf(&cr), ""
}

// Results of an exchange.
const (
	sent     = int(C.PERSYST_SENT)
	refused  = int(C.PERSYST_REFUSED)
	failed   = int(C.PERSYST_FAILED)
	timedOut = int(C.PERSYST_TIMEDOUT)
)

// deliver and call run the C exchanges with the daemon at socket.
func deliver(socket, msg string, timeout time.Duration) (int, string) {
	cs, cm := C.CString(socket), C.CString(msg)
	defer C.free(unsafe.Pointer(cs))
	defer C.free(unsafe.Pointer(cm))
	var w [700]C.char
	rc := C.persyst_deliver(cs, cm, C.size_t(len(msg)), C.int64_t(timeout), &w[0], C.size_t(len(w)))
	return int(rc), C.GoString(&w[0])
}

func call(socket, msg string, timeout time.Duration) (int, reply, string) {
	cs, cm := C.CString(socket), C.CString(msg)
	defer C.free(unsafe.Pointer(cs))
	defer C.free(unsafe.Pointer(cm))
	var w [700]C.char
	r := (*C.struct_persyst_reply)(C.calloc(1, C.sizeof_struct_persyst_reply))
	defer C.free(unsafe.Pointer(r))
	rc := C.persyst_call(cs, cm, C.size_t(len(msg)), C.int64_t(timeout), r, &w[0], C.size_t(len(w)))
	return int(rc), replyOf(r), C.GoString(&w[0])
}
