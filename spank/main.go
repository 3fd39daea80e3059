// Command spank is the persyst SPANK plugin, built with -buildmode=c-shared into
// spank_persyst.so and loaded by sbatch, srun, salloc, slurmd, slurmstepd and the job
// prolog/epilog through plugstack.conf:
//
//	optional /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_persyst.so default=on socket=/run/persyst/persyst.sock timeout=5
//
// plugin.c owns the SPANK symbols; the functions exported here receive plain values.
// This package holds the plugin's per-process configuration in package variables: a
// plugin is loaded once per process and Slurm gives it no handle to carry state in.
package main

/*
#cgo CFLAGS: -Wall -Wno-unused-function
// The Slurm symbols (spank_*, slurm_*) are resolved when slurmstepd, sbatch, ... load the
// plugin; never link libslurm here (a second copy of Slurm inside slurmstepd). The flag
// also lets `go build ./...` and `go vet` link this package as a throwaway executable.
#cgo LDFLAGS: -Wl,--unresolved-symbols=ignore-all
#include <stdlib.h>
#include "persyst.h"
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/spank/options"
)

func main() {}

// plugin is this process's plugin state.
var plugin struct {
	mu         sync.Mutex
	cfg        options.Config
	configured bool
	failed     bool // the daemon could not be reached once: log only the first time
}

func logf(level C.int, format string, args ...any) {
	msg := C.CString("persyst: " + fmt.Sprintf(format, args...))
	defer C.free(unsafe.Pointer(msg))
	C.persyst_log(level, msg)
}

//export persystConfigure
func persystConfigure(argc C.int, argv **C.char) C.int {
	args := make([]string, 0, int(argc))
	if argc > 0 && argv != nil {
		for _, p := range unsafe.Slice(argv, int(argc)) {
			args = append(args, C.GoString(p))
		}
	}
	cfg, errs := options.ParseArgs(args)
	for _, err := range errs {
		logf(C.PERSYST_LOG_ERROR, "plugstack.conf: %v", err)
	}
	plugin.mu.Lock()
	defer plugin.mu.Unlock()
	plugin.cfg = cfg
	plugin.configured = len(errs) == 0
	if len(errs) > 0 {
		return -1
	}
	return 0
}

//export persystParseValue
func persystParseValue(v *C.char) C.int {
	on, err := options.ParseValue(C.GoString(v))
	if err != nil {
		logf(C.PERSYST_LOG_ERROR, "--persyst: %v", err)
		return -1
	}
	if on {
		return 1
	}
	return 0
}

// stepName renders a Slurm step id the way sacct and the cgroup layout do.
func stepName(id uint32) string {
	switch id {
	case 0xfffffffb:
		return "batch"
	case 0xfffffffc:
		return "extern"
	case 0xfffffffa:
		return "interactive"
	}
	return strconv.FormatUint(uint64(id), 10)
}

// eventFrom converts the C event into a wire event, using cfg for the default option.
func eventFrom(ev *C.struct_persyst_event, cfg options.Config, now time.Time) *wire.Event {
	e := &wire.Event{
		JobID:       uint32(ev.job_id),
		ArrayJobID:  uint32(ev.array_job_id),
		ArrayTaskID: uint32(ev.array_task_id),
		UID:         uint32(ev.uid),
		GID:         uint32(ev.gid),
		NodeID:      uint32(ev.node_id),
		NNodes:      uint32(ev.nnodes),
		LocalTasks:  uint32(ev.local_tasks),
		TotalTasks:  uint32(ev.total_tasks),
		NCPUs:       uint32(ev.ncpus),
		JobMemMB:    uint64(ev.job_mem_mb),
		StepMemMB:   uint64(ev.step_mem_mb),
		Time:        now,
	}
	// Slurm reports array_task_id NO_VAL (0xfffffffe) and array_job_id = job id for
	// jobs that are not array tasks.
	if e.ArrayTaskID >= 0xfffffffe {
		e.ArrayJobID, e.ArrayTaskID = 0, 0
	}
	if ev.has_step != 0 {
		e.StepID = stepName(uint32(ev.step_id))
	}
	if ev.job_cores != nil {
		e.JobCores = C.GoString(ev.job_cores)
	}
	if ev.step_cores != nil {
		e.StepCores = C.GoString(ev.step_cores)
	}
	switch {
	case ev.option == 1:
		e.Persyst = wire.On
	case ev.option == 0:
		e.Persyst = wire.Off
	case cfg.DefaultOn:
		e.Persyst = wire.On
	default:
		e.Persyst = wire.Off
	}
	if ev.has_exit != 0 {
		st := int(ev.exit_status)
		e.ExitStatus = &st
	}
	return e
}

func kindOf(k int) wire.Kind {
	switch k {
	case C.PERSYST_JOB_START:
		return wire.JobStart
	case C.PERSYST_STEP_START:
		return wire.StepStart
	case C.PERSYST_STEP_END:
		return wire.StepEnd
	case C.PERSYST_JOB_END:
		return wire.JobEnd
	}
	return ""
}

// fastTimeout is how long later events wait once the daemon failed to answer: a healthy
// daemon answers in about a millisecond, so this only bounds the cost of a hung one.
const fastTimeout = 200 * time.Millisecond

// downMarker records, for every process on this node, that the daemon did not answer:
// the job prolog, each slurmstepd and the epilog are separate processes, and without it
// each would wait the full timeout and log the same failure. It lives next to the
// socket, in the daemon's root-owned run directory.
func downMarker(socket string) string { return socket + ".unreachable" }

// markerFresh says whether the daemon was found unreachable within the last ttl.
func markerFresh(path string, now time.Time, ttl time.Duration) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode().IsRegular() && now.Sub(st.ModTime()) < ttl
}

//export persystSend
func persystSend(kind C.int, ev *C.struct_persyst_event) C.int {
	plugin.mu.Lock()
	cfg, ok := plugin.cfg, plugin.configured
	plugin.mu.Unlock()
	if !ok {
		return 0
	}
	e := eventFrom(ev, cfg, time.Now())
	k := kindOf(int(kind))
	if k == wire.StepStart {
		// slurmstepd has put itself into the job's cgroups: tell the daemon where they are.
		if cg, err := jobcgroup.Self(hostfs.New("/"), e.JobID); err == nil && len(cg) > 0 {
			e.Cgroups = cg
		}
	}
	sock := cfg.Socket
	marker := downMarker(sock)
	timeout := cfg.Timeout
	known := markerFresh(marker, time.Now(), 10*time.Minute)
	if known && timeout > fastTimeout {
		timeout = fastTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	req := &wire.Request{Kind: k, Event: e}
	var err error
	answered := false
	// The batch step's end waits: the daemon writes the digest into the job's output
	// file before replying, and the job is complete only after this hook returns.
	deliverOnly := k == wire.JobEnd || (k == wire.StepEnd && e.StepID != "batch")
	if deliverOnly {
		// Other end events are delivered, not called: slurmctld releases a step's resources on
		// a node only after slurm_spank_exit returns there, and a next srun that finds
		// them still busy backs off for about a minute (measured: a 200 ms wait here
		// held a 2-node job for 70 s). The daemon reads the event when it can.
		err = wire.Deliver(ctx, sock, req)
	} else {
		// Start events wait for the daemon: it prepares before the tasks start.
		var rep *wire.Reply
		rep, err = wire.Call(ctx, sock, req)
		answered = rep != nil
		if err == nil && k == wire.StepStart {
			setJoin(rep.Cgroup)
		}
	}
	plugin.mu.Lock()
	defer plugin.mu.Unlock()
	if err != nil && answered {
		// The daemon is up and refused the event (a bad field, a version mismatch):
		// say so, and do not mark it unreachable.
		logf(C.PERSYST_LOG_ERROR, "%s: %s event refused by the daemon: %v", jobStep(e), k, err)
		if known || plugin.failed {
			_ = os.Remove(marker)
			plugin.failed = false
		}
		return -1
	}
	if err != nil {
		if !known && !plugin.failed {
			why := err.Error()
			if errors.Is(err, context.DeadlineExceeded) {
				why = fmt.Sprintf("no answer within %v from %s", timeout, sock)
			}
			logf(C.PERSYST_LOG_ERROR, "%s: %s event not recorded: %s (the job is not affected; until the daemon answers again, events wait at most %v and are not logged)",
				jobStep(e), k, why, fastTimeout)
		}
		plugin.failed = true
		// O_NOFOLLOW: never follow a link planted in place of the marker.
		if f, ferr := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600); ferr == nil {
			fmt.Fprintf(f, "%s job %d %s: %v\n", time.Now().Format(time.RFC3339), e.JobID, k, err)
			f.Close()
		}
		return -1
	}
	// Only an answer proves the daemon is back; a delivered request may sit unread.
	if !deliverOnly && (known || plugin.failed) {
		logf(C.PERSYST_LOG_INFO, "job %d: daemon at %s answers again", e.JobID, sock)
		_ = os.Remove(marker)
		plugin.failed = false
	}
	logf(C.PERSYST_LOG_DEBUG, "%s: %s sent in %v", jobStep(e), k, time.Since(start).Round(time.Microsecond))
	return 0
}

// reportWait bounds how long srun waits at the end of an interactive job for its digest.
const reportWait = 5 * time.Second

// persystPrintReport prints the digest of the interactive job srun started, on srun's
// standard error (the user's terminal), with the persyst command plugstack.conf names
// (report=). Nothing is printed when the job opted out, when there is no digest within
// reportWait, or when anything fails: persyst's own faults are logged at debug level.
//
//export persystPrintReport
func persystPrintReport(job C.uint32_t, option C.int) {
	plugin.mu.Lock()
	cfg, ok := plugin.cfg, plugin.configured
	plugin.mu.Unlock()
	if !ok || cfg.Report == "" || job == 0 || option == 0 || (option < 0 && !cfg.DefaultOn) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), reportWait+2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.Report, "report", "--wait", reportWait.String(), strconv.FormatUint(uint64(job), 10))
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		logf(C.PERSYST_LOG_DEBUG, "job %d: no digest to print: %v", uint32(job), err)
		return
	}
	os.Stderr.Write(out.Bytes())
}

// setJoin hands the task hook the cgroup the daemon wants the step's tasks in. Only a
// clean absolute path is accepted; the C side opens <dir>/cgroup.procs with O_NOFOLLOW.
func setJoin(dir string) {
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || len(dir) > 3000 {
		if dir != "" {
			logf(C.PERSYST_LOG_ERROR, "daemon sent an unusable cgroup path %q; tasks not moved", dir)
		}
		C.persyst_set_join(nil)
		return
	}
	cs := C.CString(dir)
	defer C.free(unsafe.Pointer(cs))
	C.persyst_set_join(cs)
}

// jobStep names a job or step the way Slurm's logs do: "job 7" or "step 7.batch".
func jobStep(e *wire.Event) string {
	if e.StepID == "" {
		return fmt.Sprintf("job %d", e.JobID)
	}
	return fmt.Sprintf("step %d.%s", e.JobID, e.StepID)
}
