// Package kmsg follows the kernel's log (/dev/kmsg) for the events persyst needs from
// it: OOM kills, with the cgroup of the killed task, and the NVIDIA driver's error
// reports (Xid), with the GPU's PCI address. The kernel records each kill once,
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

// Xid is an NVIDIA driver error report: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234,
// name=python, GPU has fallen off the bus."
type Xid struct {
	Bus  string // the GPU's PCI address as the driver gives it ("0000:3b:00")
	Code int
	Text string // what follows the code
}

// hardwareXids are the Xid codes that report the GPU, its memory or its links failing
// (NVIDIA's Xid catalog): not the job's doing. Others (13, 31, 43, 45: a program's
// fault, an exception, a reset of its channel) are the job's own and show in its output.
var hardwareXids = map[int]bool{48: true, 61: true, 62: true, 63: true, 64: true, 74: true, 79: true,
	92: true, 94: true, 95: true, 119: true, 120: true, 121: true, 122: true, 123: true, 140: true}

// Hardware says whether the Xid reports the hardware failing.
func (x Xid) Hardware() bool { return hardwareXids[x.Code] }

// ParseXid reads one /dev/kmsg record; ok is false for anything but an Xid report the
// kernel logged (facility 0).
func ParseXid(record string) (Xid, bool) {
	hdr, msg, found := strings.Cut(record, ";")
	if !found {
		return Xid{}, false
	}
	prio, _, _ := strings.Cut(hdr, ",")
	if p, err := strconv.Atoi(prio); err != nil || p < 0 || p >= 8 {
		return Xid{}, false
	}
	msg, _, _ = strings.Cut(msg, "\n")
	rest, ok := strings.CutPrefix(msg, "NVRM: Xid (PCI:")
	if !ok {
		return Xid{}, false
	}
	bus, rest, ok := strings.Cut(rest, "): ")
	if !ok || !pciAddress(bus) {
		return Xid{}, false
	}
	code, text, _ := strings.Cut(rest, ",")
	n, err := strconv.Atoi(strings.TrimSpace(code))
	if err != nil || n < 0 {
		return Xid{}, false
	}
	return Xid{Bus: bus, Code: n, Text: strings.TrimSpace(text)}, true
}

// pciAddress says whether s can be a PCI address as the driver prints it
// ("0000:3b:00", "0000:3b:00.0"): hex digits, colons and dots, at most 32 bytes.
func pciAddress(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF:.", c) {
			return false
		}
	}
	return true
}

// Handlers are what a Log reports: each is called one call at a time; nil: not wanted.
type Handlers struct {
	OOM func(OOMKill)
	Xid func(Xid)
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
	h  Handlers

	mu  sync.Mutex // one reader at a time: each record is reported once, in order
	buf []byte
}

// Open opens the kernel's log at path (/dev/kmsg under the node's root) at its end: events
// logged before are not reported.
func Open(path string, h Handlers) (*Log, error) {
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
	return &Log{f: f, rc: rc, h: h, buf: make([]byte, maxRecord)}, nil
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
		rec := string(l.buf[:n])
		if k, ok := ParseOOM(rec); ok {
			if l.h.OOM != nil {
				l.h.OOM(k)
			}
		} else if x, ok := ParseXid(rec); ok && l.h.Xid != nil {
			l.h.Xid(x)
		}
	}
}
