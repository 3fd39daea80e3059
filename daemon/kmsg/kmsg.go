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
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
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
// ignored); ok is false for anything but an OOM kill with a task cgroup that the kernel
// logged (facility 0: a record root wrote into /dev/kmsg has another facility).
func ParseOOM(record string) (OOMKill, bool) {
	hdr, msg, found := strings.Cut(record, ";")
	if !found {
		return OOMKill{}, false
	}
	prio, _, _ := strings.Cut(hdr, ",")
	if p, err := strconv.Atoi(prio); err != nil || p < 0 || p >= 8 {
		return OOMKill{}, false
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

// Log is the kernel's log, read from its end for OOM kills: Follow reports them as they
// are logged, and CatchUp at once, so that what is known of a job at its end includes
// every kill logged before it, however late Follow is.
type Log struct {
	f  *os.File
	rc syscall.RawConn
	fn func(OOMKill)

	mu  sync.Mutex // one reader at a time: each record is reported once, in order
	buf []byte
}

// Open opens the kernel's log at path (/dev/kmsg under the node's root) at its end: kills
// logged before are not reported. fn is called for each kill, one call at a time.
func Open(path string, fn func(OOMKill)) (*Log, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil && !errors.Is(err, syscall.ESPIPE) {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Log{f: f, rc: rc, fn: fn, buf: make([]byte, maxRecord)}, nil
}

// Follow reports the kills as they are logged until ctx is done, and then closes the log.
// Records the kernel overwrote before they were read are skipped (EPIPE).
func (l *Log) Follow(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { l.f.Close() })
	defer stop()
	defer l.f.Close()
	var rerr error
	err := l.rc.Read(func(fd uintptr) bool {
		rerr = l.drain(int(fd))
		return rerr != nil // else wait until there is more
	})
	if ctx.Err() != nil {
		return nil
	}
	if rerr != nil {
		return rerr
	}
	return err
}

// CatchUp reports now the kills logged before the call that Follow has not reported.
func (l *Log) CatchUp() error {
	var rerr error
	if err := l.rc.Control(func(fd uintptr) { rerr = l.drain(int(fd)) }); err != nil {
		return err
	}
	return rerr
}

// drain reads and reports the records there are, until none is left.
func (l *Log) drain(fd int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		n, err := unix.Read(fd, l.buf)
		switch {
		case err == unix.EAGAIN || (err == nil && n == 0):
			return nil
		case err == unix.EPIPE || err == unix.EINTR:
			continue // records lost to the ring buffer's wrap
		case err != nil:
			return err
		}
		if k, ok := ParseOOM(string(l.buf[:n])); ok {
			l.fn(k)
		}
	}
}
