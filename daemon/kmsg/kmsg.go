// Package kmsg follows the kernel's log (/dev/kmsg) for the events persyst needs from
// it: OOM kills, with the cgroup of the killed task. The kernel records each kill once,
// whatever cgroup version, nesting or limit caused it, and the record outlives the
// cgroup (Slurm removes a step's and its tasks' cgroups as the step ends, before the
// plugin's step-end event; on cgroup v1 the task's cgroup is the only one that counts
// the kill).
package kmsg

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// OOMKill is one kill by the OOM killer, as the kernel logged it ("oom-kill:" records,
// Linux 4.19 and later).
type OOMKill struct {
	// TaskCgroup is the killed task's memory cgroup (task_memcg), relative to the
	// memory hierarchy's root; OOMCgroup the cgroup whose limit was hit (oom_memcg).
	TaskCgroup, OOMCgroup string
	PID                   int
	Task                  string
}

// ParseOOM reads one /dev/kmsg record ("PRIO,SEQ,USEC,FLAGS;MESSAGE", continuation lines
// ignored); ok is false for anything but an OOM kill with a task cgroup.
func ParseOOM(record string) (OOMKill, bool) {
	_, msg, found := strings.Cut(record, ";")
	if !found {
		msg = record
	}
	msg, _, _ = strings.Cut(msg, "\n")
	rest, ok := strings.CutPrefix(msg, "oom-kill:")
	if !ok {
		return OOMKill{}, false
	}
	var k OOMKill
	for _, kv := range strings.Split(rest, ",") {
		key, v, _ := strings.Cut(kv, "=")
		switch key {
		case "task_memcg":
			k.TaskCgroup = v
		case "oom_memcg":
			k.OOMCgroup = v
		case "pid":
			k.PID, _ = strconv.Atoi(v)
		case "task":
			k.Task = v
		}
	}
	if !strings.HasPrefix(k.TaskCgroup, "/") {
		return OOMKill{}, false
	}
	return k, true
}

// maxRecord is the largest /dev/kmsg record (the kernel's limit is 1 KiB of text plus
// its dictionary).
const maxRecord = 8192

// Watch calls fn for every OOM kill the kernel logs from now on, until ctx is done. It
// reads path (/dev/kmsg under the node's root), starting at its end: kills logged before
// the call are not reported. Records the kernel overwrote before they were read are
// skipped (EPIPE).
func Watch(ctx context.Context, path string, fn func(OOMKill)) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	defer f.Close()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	buf := make([]byte, maxRecord)
	for {
		n, err := f.Read(buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			continue // records lost to the ring buffer's wrap
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if k, ok := ParseOOM(string(buf[:n])); ok {
			fn(k)
		}
	}
}
