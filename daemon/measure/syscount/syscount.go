// Package syscount counts system calls per job with eBPF instead of the syscall
// tracepoints: a small program on the entry of each counted system call's kernel
// function (fentry, a BPF trampoline) adds one to the calling job's counter in a per-CPU
// map keyed by the job's cgroup id.
//
// Why: a perf event on any syscalls:sys_enter_* tracepoint switches every thread of the
// machine to the kernel's slow system call path (the tracepoints are called from it), so
// that every system call of every process pays, counted or not. An fentry program costs
// only the calls of the functions it is attached to, and only a map lookup each. Either
// way a budget (Sampling) bounds what counting costs the node: beyond it the calls are
// counted in sampled windows and the counts scaled.
//
// The programs are written with the assembler of github.com/cilium/ebpf (about fifty
// instructions in all), so building persyst needs no C compiler for BPF. They need the
// kernel's BTF (/sys/kernel/btf/vmlinux), BPF trampolines (Linux 5.5 and newer, x86-64
// and arm64) and CAP_BPF and CAP_PERFMON (root); where any is missing New says why, and
// the tracepoints count instead.
//
// Jobs are told apart by their cgroup on the cgroup v2 hierarchy (the unified one, where
// persyst counts perf events in cgroup mode): the program asks for the calling thread's
// ancestor at each level that a watched cgroup lives at (bpf_get_current_ancestor_cgroup_id)
// and looks it up; at most MaxLevels levels.
package syscount

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// MaxEvents is the most system calls one counter set counts (the map's value holds one
// count per event).
const MaxEvents = 8

// MaxLevels is the most distinct cgroup depths watched cgroups may have.
const MaxLevels = 4

// MaxCgroups is the most cgroups watched at once.
const MaxCgroups = 4096

// Event is a system call counted: the perf(1) name of its tracepoint (what the counts
// are reported as, so that everything downstream is the same whichever way they were
// counted) and the system call's name.
type Event struct {
	Name    string // "syscalls:sys_enter_openat"
	Syscall string // "openat"
}

// Values is one cgroup's counts on one CPU: the events' by index, then the read and
// write counts by what the calls went to, at IOSlot (files.go).
type Values [MaxEvents + int(NumTargets)*ioSlots]uint64

// Counts is one cgroup's counts on one CPU, by how they were counted: Whole while the
// program was attached for whole sampling periods (every call counted), Sampled in the
// sampled windows (Sampling), which stand for the time between them too. Telling them
// apart keeps a burst counted in full from being scaled as if it had been a sample:
// 10,000 opens at a job's start, counted whole, then a second of windows would otherwise
// read as ten times as many.
type Counts struct{ Whole, Sampled Values }

// Attached is how long the programs counted, by how (Counts): every call (Whole) or in
// sampled windows (Sampled).
type Attached struct{ Whole, Sampled time.Duration }

// Sub is a's time less b's.
func (a Attached) Sub(b Attached) Attached {
	return Attached{Whole: a.Whole - b.Whole, Sampled: a.Sampled - b.Sampled}
}

// Total is the time counted either way.
func (a Attached) Total() time.Duration { return a.Whole + a.Sampled }

// Target is what a read or write call went to, by the file's type (its inode's mode).
type Target int

// The targets told apart, in the order of their counts in Values.
const (
	RegularFile Target = iota // S_IFREG
	Pipe                      // S_IFIFO: pipes and FIFOs
	Socket                    // S_IFSOCK: read(2) and write(2) on sockets (not send or recv)
	CharDevice                // S_IFCHR: terminals and character devices (/dev/null)
	NumTargets
)

// targetModes are the targets' file types, in Target order.
var targetModes = [NumTargets]int32{unix.S_IFREG, unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR}

// The read and write counts of a target in Values, from its IOSlot: read(2) and
// pread(2) calls and the bytes they returned, then write(2) and pwrite(2) calls and the
// bytes they wrote (the kernel's vfs_read and vfs_write, with the file's type).
const (
	ReadCalls = iota
	ReadBytes
	WriteCalls
	WriteBytes
	ioSlots
)

// IOSlot is the place in Values of count k (ReadCalls...) of the calls that went to t.
func IOSlot(t Target, k int) int { return MaxEvents + int(t)*ioSlots + k }

// The counts of calls on regular files.
const (
	FileReadCalls  = MaxEvents + ReadCalls
	FileReadBytes  = MaxEvents + ReadBytes
	FileWriteCalls = MaxEvents + WriteCalls
	FileWriteBytes = MaxEvents + WriteBytes
)

// IsBytes says whether slot holds bytes, not calls.
func IsBytes(slot int) bool {
	k := (slot - MaxEvents) % ioSlots
	return slot >= MaxEvents && (k == ReadBytes || k == WriteBytes)
}

// Counter is the loaded programs, their links and maps. It is safe for concurrent use.
type Counter struct {
	events []Event // counted, in value order
	counts *ebpf.Map
	levels *ebpf.Map
	window *ebpf.Map // where the raw tracepoint counts: the offset of Counts.Sampled, or 0
	progs  programs  // attached while a cgroup is watched
	ncpu   int
	mode   Mode
	files  bool // read and write calls counted by target (files.go)
	// filesErr says why files are not counted apart.
	filesErr error

	all *ebpf.Map // raw tracepoint: every system call of the node, per CPU
	// notices, where the kernel has ring buffers, gets a record each time a CPU's count
	// in all grows by noticeEvery: a quiet node's sampler sleeps until then (nil: it
	// looks every checkQuiet).
	notices  *notices
	now      func() time.Time
	sampling Sampling
	// steps time what New did: reading the kernel's BTF and loading each program (an
	// admin's answer to why a daemon took long to start).
	steps []Step

	mu    sync.Mutex
	lv    []uint32      // levels in use, in the levels map's order
	share float64       // of the time the raw tracepoint is attached now (sampling)
	calls []uint64      // the sampler's buffer for each CPU's calls
	cm    costMeter     // what a call costs more attached (0 in fentry mode)
	stop  chan struct{} // ends the sampler (nil: none runs)
	done  chan struct{}
	// watched counts the watched cgroups: the programs are attached only while there
	// are any (and for linger after), so that no system call pays for them on a node
	// without measured jobs.
	watched int
	closed  bool
	linger  time.Duration
	lingers *time.Timer // detaches the programs once the linger is over
	zeros   []Counts    // a cgroup's first counts
	usages  cpuSplits   // the watched cgroups' CPU time split (Usage)
}

// Options configure New.
type Options struct {
	// Events are the system calls to count. Those that cannot be counted here are left
	// out and named in Missing.
	Events []Event
	// NoFentry skips the fentry programs and counts on the raw tracepoint (tests, and
	// the benchmark that compares the two).
	NoFentry bool
	// Sampling configures the sampling within a budget, either mode's (zero: the defaults).
	Sampling Sampling
	// Now is the clock (nil: time.Now); its monotonic readings time the sampling.
	Now func() time.Time
	// Linger keeps the programs attached that long after the last cgroup is unwatched
	// (0: detached at once): jobs that follow each other do not wait for them to be
	// detached and attached again, which takes an RCU grace period each (seconds under
	// software emulation).
	Linger time.Duration
	// Mount is the cgroup v2 hierarchy's mount and Self this process's cgroup directory
	// on it: the calls the sampler times to learn what counting costs take the path of a
	// measured job's, found in the counts map, only when it knows which key they look up
	// (where Self is "", the kernel's 0 for a process above the watched levels).
	Mount, Self string
	// noFiles leaves out the programs that count file I/O (the benchmark's measure of
	// their cost).
	noFiles bool
}

// Step is one part of New and how long it took.
type Step struct {
	Name string
	Took time.Duration
}

// Missing maps the events that are not counted to why.
type Missing map[string]string

// Mode is how the calls are counted.
type Mode string

const (
	// Fentry: a program on each system call's entry function; no other call pays.
	Fentry Mode = "fentry"
	// RawTracepoint: one program on the raw tracepoint raw_syscalls:sys_exit (BTF
	// enabled), where fentry programs cannot be loaded: every system call of the machine
	// takes the kernel's slow path, as with the perf tracepoints, but a counted call costs
	// a map lookup instead of a perf event's record.
	RawTracepoint Mode = "raw tracepoint"
)

// New loads and attaches the programs: one per event on its system call's entry
// function, else one on the raw tracepoint. It fails only when nothing can be counted;
// events that are not counted are in Missing.
func New(o Options) (*Counter, Missing, error) {
	if len(o.Events) > MaxEvents {
		return nil, nil, fmt.Errorf("syscount: %d events, at most %d", len(o.Events), MaxEvents)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, nil, fmt.Errorf("syscount: possible CPUs: %w", err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Counter{ncpu: ncpu, now: o.Now, sampling: o.Sampling.withDefaults(), progs: programs{now: o.Now}, linger: o.Linger,
		calls: make([]uint64, ncpu), zeros: make([]Counts, ncpu), usages: cpuSplits{}}
	c.counts, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "persyst_calls", Type: ebpf.PerCPUHash, KeySize: 8,
		ValueSize: uint32(unsafe.Sizeof(Counts{})), MaxEntries: MaxCgroups, Flags: flagNoPrealloc,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("syscount: per-CPU map: %w", err)
	}
	c.cm = costMeter{counts: c.counts, zeros: c.zeros, mount: o.Mount, self: o.Self}
	c.levels, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "persyst_levels", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: MaxLevels,
	})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("syscount: levels map: %w", err)
	}
	c.all, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "persyst_all", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: allEntries,
	})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("syscount: calls map: %w", err)
	}
	if c.sampling.Budget > 0 {
		c.notices = newNotices()
	}
	// One entry: the programs read it as a value at a fixed address (no helper call).
	c.window, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "persyst_window", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1,
	})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("syscount: window map: %w", err)
	}
	l := &loader{counts: c.counts, levels: c.levels, all: c.all, notices: c.notices.ringMap(), budget: c.sampling.Budget, now: o.Now,
		progs: programs{now: o.Now, window: c.window}, cache: btf.NewCache()}
	missing, err := l.load(o)
	if err != nil {
		c.Close()
		return nil, missing, err
	}
	c.events, c.mode, c.files, c.filesErr, c.steps, c.progs = l.events, l.mode, l.files, l.filesErr, l.steps, l.progs
	c.progs.turn = c.usages.turn
	return c, missing, nil
}

// flagNoPrealloc is BPF_F_NO_PREALLOC: entries are allocated when a cgroup is watched,
// not MaxCgroups × CPUs of them at once.
const flagNoPrealloc = 1

// Files says whether read and write calls are counted by what they went to (IOSlot),
// and if not, why.
func (c *Counter) Files() (bool, error) { return c.files, c.filesErr }

// Mode says how the calls are counted.
func (c *Counter) Mode() Mode { return c.mode }

// Events are the system calls counted, in the order of Values.
func (c *Counter) Events() []Event { return slices.Clone(c.events) }

// Watch starts counting the calls of the threads in cgroup id (and its descendants),
// which lives level levels below the hierarchy's root. Counts start at 0.
func (c *Counter) Watch(id uint64, level int) error {
	if level <= 0 {
		return fmt.Errorf("syscount: cgroup %d at level %d: only cgroups below the root", id, level)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("syscount: closed")
	}
	if !slices.Contains(c.lv, uint32(level)) {
		if len(c.lv) == MaxLevels {
			return fmt.Errorf("syscount: cgroups at more than %d depths", MaxLevels)
		}
		if err := c.levels.Put(uint32(len(c.lv)), uint32(level)); err != nil {
			return fmt.Errorf("syscount: level %d: %w", level, err)
		}
		c.lv = append(c.lv, uint32(level))
	}
	if err := c.counts.Update(id, c.zeros, ebpf.UpdateNoExist); err != nil {
		if errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("syscount: cgroup %d is watched already", id)
		}
		return fmt.Errorf("syscount: watch cgroup %d: %w", id, err)
	}
	if c.watched == 0 {
		if c.lingers != nil {
			c.lingers.Stop()
			c.lingers = nil
		}
		// Sampled: the raw tracepoint, or fentry programs gated, with a budget.
		sampled := c.sampling.Budget > 0 && (c.mode == RawTracepoint || c.progs.gated)
		if !c.progs.counting() {
			resume := c.progs.resume
			if c.progs.gated && !c.progs.linked() {
				// Attached with the gate closed: the calibration's calls before it opens
				// pay the trampolines, which no gate saves.
				if err := c.progs.link(); err != nil {
					c.counts.Delete(id)
					return err
				}
			}
			if sampled && c.cm.cost == 0 {
				// The cost a call pays counted is first timed on both sides of this resume.
				resume = func() error { return c.cm.calibrate(c.lv, c.progs.resume) }
			}
			if err := resume(); err != nil {
				c.counts.Delete(id)
				return err
			}
		}
		c.share = 1
		if err := c.progs.setSampled(false); err != nil {
			c.counts.Delete(id)
			return err
		}
		if sampled {
			c.startSampler()
		}
	}
	c.watched++
	return nil
}

// Read returns cgroup id's counts per possible CPU (index: the CPU's number), into buf
// when it has room.
func (c *Counter) Read(id uint64, buf []Counts) ([]Counts, error) {
	if cap(buf) < c.ncpu {
		buf = make([]Counts, c.ncpu)
	}
	buf = buf[:c.ncpu]
	if err := c.counts.Lookup(id, buf); err != nil {
		return nil, fmt.Errorf("syscount: read cgroup %d: %w", id, err)
	}
	return buf, nil
}

// Unwatch stops counting cgroup id. Levels stay watched (a job of the same layout
// follows).
func (c *Counter) Unwatch(id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usages.drop(id)
	if err := c.counts.Delete(id); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("syscount: unwatch cgroup %d: %w", id, err)
	}
	if c.watched--; c.watched == 0 {
		c.stopSampler()
		if c.linger <= 0 || !c.progs.linked() {
			c.progs.unlink()
			return nil
		}
		if c.progs.gated {
			c.progs.pause() // lingering, gated programs pay their trampoline alone
		}
		// Detached when the linger is over, unless a cgroup was watched since.
		var t *time.Timer
		t = time.AfterFunc(c.linger, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.lingers != t || c.watched > 0 || c.closed {
				return
			}
			c.lingers = nil
			c.progs.unlink()
		})
		c.lingers = t
	}
	return nil
}

// Attached says whether the programs are attached now (a cgroup is watched).
func (c *Counter) Attached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.progs.linked()
}

// Close detaches the programs and frees the maps.
func (c *Counter) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.lingers != nil {
		c.lingers.Stop()
		c.lingers = nil
	}
	c.stopSampler()
	for id := range c.usages {
		c.usages.drop(id)
	}
	errs := []error{c.progs.close()}
	c.mu.Unlock()
	errs = append(errs, c.notices.close())
	for _, m := range []*ebpf.Map{c.counts, c.levels, c.all, c.window} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// CgroupID returns the id of the cgroup v2 directory dir: what the kernel's BPF helpers
// call a cgroup's id (its kernfs node id, from name_to_handle_at(2)).
func CgroupID(dir string) (uint64, error) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", dir, err)
	}
	b := h.Bytes()
	if len(b) != 8 {
		return 0, fmt.Errorf("cgroup id of %s: handle of %d bytes, want 8", dir, len(b))
	}
	return binary.NativeEndian.Uint64(b), nil
}

// Level is how deep the cgroup dir lies below the hierarchy mounted at mount (its root:
// level 0).
func Level(mount, dir string) (int, error) {
	rel, err := filepath.Rel(mount, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return 0, fmt.Errorf("cgroup %s is not under %s", dir, mount)
	}
	if rel == "." {
		return 0, nil
	}
	return strings.Count(rel, "/") + 1, nil
}
