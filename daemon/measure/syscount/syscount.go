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
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
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

// Values is one cgroup's counts on one CPU: the events' by index, then the file I/O
// counts at FileReadCalls... (files.go).
type Values [MaxEvents + 4]uint64

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

// The file I/O counts in Values: read(2) and pread(2) calls on regular files and the
// bytes they returned, and the same for write(2) and pwrite(2) (the kernel's vfs_read and
// vfs_write, with the file's mode: pipes, sockets, terminals and devices are left out).
const (
	FileReadCalls = MaxEvents + iota
	FileReadBytes
	FileWriteCalls
	FileWriteBytes
)

// Counter is the loaded programs, their links and maps. It is safe for concurrent use.
type Counter struct {
	events []Event // counted, in value order
	counts *ebpf.Map
	levels *ebpf.Map
	window *ebpf.Map // where the raw tracepoint counts: the offset of Counts.Sampled, or 0
	progs  programs  // attached while a cgroup is watched
	ncpu   int
	mode   Mode
	files  bool // calls on regular files counted apart (files.go)
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

// loader loads the programs for New: it holds the kernel's BTF while they load (read
// once for all of them: each load would read it again) and what it loaded, which the
// Counter then takes.
type loader struct {
	cache               *btf.Cache
	counts, levels, all *ebpf.Map // the Counter's, which the programs use
	notices             *ebpf.Map // the Counter's, or nil
	budget              float64   // Sampling.Budget
	// window, while the raw tracepoint's programs are built with a budget, says where
	// they count (Counts); nil: in Whole.
	window *ebpf.Map
	now    func() time.Time

	progs    programs
	events   []Event
	mode     Mode
	files    bool
	filesErr error
	steps    []Step
}

// step records how long a part of the load took, from since.
func (l *loader) step(name string, since time.Time) {
	l.steps = append(l.steps, Step{Name: name, Took: l.now().Sub(since)})
}

// Steps are what New did, and how long each took.
func (c *Counter) Steps() []Step { return slices.Clone(c.steps) }

// load loads the fentry programs, else the raw tracepoint's.
func (l *loader) load(o Options) (Missing, error) {
	t0 := l.now()
	spec, err := l.cache.Kernel()
	if err != nil {
		return nil, fmt.Errorf("syscount: kernel BTF: %w", err)
	}
	l.step("kernel BTF", t0)
	missing := Missing{}
	var ferr error
	if !o.NoFentry {
		ferr = l.attachFentry(spec, o.Events, missing)
	}
	if !o.NoFentry && ferr == nil {
		return missing, nil
	}
	clear(missing)
	if rerr := l.attachRaw(spec, o.Events, missing, o.noFiles); rerr != nil {
		l.progs.close()
		if ferr != nil {
			return missing, fmt.Errorf("syscount: fentry: %w; raw tracepoint: %w", ferr, rerr)
		}
		return missing, fmt.Errorf("syscount: raw tracepoint: %w", rerr)
	}
	return missing, nil
}

// attachFentry loads a program on each event's system call function. An event whose
// function is not in the kernel's BTF is missing; a program the kernel refuses fails
// the whole mode (the kernel or its settings allow no fentry programs). With a budget the
// programs are gated (programs) and count the node's calls in all as the raw tracepoint's
// do (fentryHead).
func (l *loader) attachFentry(spec *btf.Spec, events []Event, missing Missing) error {
	if l.budget > 0 {
		l.window, l.progs.gated = l.progs.window, true
		defer func() { l.window = nil }()
	}
	for _, ev := range events {
		fn, err := syscallFunc(spec, ev.Syscall)
		if err != nil {
			missing[ev.Name] = err.Error()
			continue
		}
		slot := len(l.events)
		insns := append(l.fentryHead(false, "go"), asm.Mov.Imm(asm.R6, int32(8*slot)).WithSymbol("go"))
		insns = append(insns, l.tail(false, "")...)
		if err := l.attach(spec, "persyst_"+trim(ev.Syscall), ebpf.AttachTraceFEntry, fn, insns); err != nil {
			l.progs.close()
			l.progs.gated = false
			l.events = nil
			return fmt.Errorf("program on %s: %w", fn, err)
		}
		l.events = append(l.events, ev)
	}
	if len(l.events) == 0 {
		l.progs.gated = false
		return errors.New("no counted system call has a kernel function to attach to")
	}
	l.mode = Fentry
	l.filesErr = l.attachFiles(spec)
	l.files = l.filesErr == nil
	return nil
}

// fentryHead is a gated fentry or fexit program's start (nothing without a budget): it
// returns at once while the gate is closed, and counts the call in all (countAll) while
// it is open. It goes on at label next, with the context in r1 when keepCtx (kept in r7
// meanwhile).
func (l *loader) fentryHead(keepCtx bool, next string) asm.Instructions {
	if !l.progs.gated {
		return nil
	}
	var head asm.Instructions
	if keepCtx {
		head = append(head, asm.Mov.Reg(asm.R7, asm.R1))
	}
	head = append(head,
		asm.LoadMapValue(asm.R0, l.progs.window.FD(), windowGate),
		asm.LoadMem(asm.R0, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R0, 0, "exit"),
	)
	head = append(head, l.countAll(next)...)
	if keepCtx {
		head = append(head, asm.Mov.Reg(asm.R1, asm.R7).WithSymbol(next))
	}
	return head
}

// Files says whether calls on regular files are counted apart (FileReadCalls...), and
// if not in fentry mode, why.
func (c *Counter) Files() (bool, error) { return c.files, c.filesErr }

// attachRaw loads one program on the raw tracepoint sys_exit that counts the events by
// system call number (the calling thread's registers, ctx[0]) and, unless noFiles, the
// read and write calls on regular files (files.go): one program for both, since each
// program on a raw tracepoint costs every system call of the node its invocation. A
// kernel that refuses the file part gets the program without it (c.filesErr says why).
func (l *loader) attachRaw(spec *btf.Spec, events []Event, missing Missing, noFiles bool) error {
	if exitRegs.nr == "" {
		return errors.New("no system call registers known for " + runtime.GOARCH)
	}
	nrOff, err := memberOffset(spec, "pt_regs", exitRegs.nr)
	if err != nil {
		return err
	}
	head := l.rawHead()
	head = append(head,
		asm.LoadMem(asm.R2, asm.R7, 0, asm.DWord).WithSymbol("nr"),
		asm.LoadMem(asm.R3, asm.R2, int16(nrOff), exitRegs.nrSize),
	)
	var counted []Event
	for _, ev := range events {
		nr, ok := syscallNumbers[ev.Syscall]
		if !ok {
			missing[ev.Name] = "no system call " + ev.Syscall + " on " + runtime.GOARCH
			continue
		}
		head = append(head,
			asm.Mov.Imm(asm.R6, int32(8*len(counted))),
			asm.JEq.Imm(asm.R3, int32(nr), "count"))
		counted = append(counted, ev)
	}
	if len(counted) == 0 {
		return errors.New("none of the system calls exists on " + runtime.GOARCH)
	}
	if l.budget > 0 {
		l.window = l.progs.window
		defer func() { l.window = nil }()
	}
	count := l.tail(false, "count_")
	count[0] = count[0].WithSymbol("count")
	build := func(files asm.Instructions) asm.Instructions {
		insns := slices.Clone(head)
		if files != nil { // it ends in its own return
			return append(append(insns, files...), count...)
		}
		return append(append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return()), count...)
	}
	l.filesErr = errors.New("left out")
	if !noFiles {
		var files asm.Instructions
		if files, l.filesErr = l.rawFiles(spec); l.filesErr == nil {
			if l.filesErr = l.attach(spec, "persyst_sysexit", ebpf.AttachTraceRawTp, "sys_exit", build(files)); l.filesErr == nil {
				l.files = true
				l.events, l.mode = counted, RawTracepoint
				return nil
			}
		}
	}
	if err := l.attach(spec, "persyst_sysexit", ebpf.AttachTraceRawTp, "sys_exit", build(nil)); err != nil {
		return err
	}
	l.events, l.mode = counted, RawTracepoint
	return nil
}

// rawHead is the raw tracepoint program's start: with a budget, every system call is
// counted in all first (countAll); without, nothing but the counted calls is looked at.
// The context is kept in r7; it goes on at "nr".
func (l *loader) rawHead() asm.Instructions {
	head := asm.Instructions{asm.Mov.Reg(asm.R7, asm.R1)}
	if l.budget > 0 {
		head = append(head, l.countAll("nr")...)
	}
	return head
}

// countAll counts the call in all (the sampling's measure of what counting costs the
// node), and every noticeEvery calls of a CPU a notice wakes the sampler; it goes on at
// label next. It uses r0 to r5 and fp-16.
func (l *loader) countAll(next string) asm.Instructions {
	insns := l.addAll(allNode, next)
	if l.notices != nil {
		// Every noticeEvery calls of a CPU, a record (the 4 bytes at fp-16) wakes the
		// sampler.
		insns = append(insns,
			asm.And.Imm(asm.R1, noticeEvery-1),
			asm.JNE.Imm(asm.R1, 0, next),
			asm.LoadMapPtr(asm.R1, l.notices.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -16),
			asm.Mov.Imm(asm.R3, 4),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
		)
	}
	return insns
}

// addAll adds one to entry key of all (the key at fp-16, the new count left in r1), or
// goes on at label skip where the lookup fails. It uses r0 to r5 and fp-16.
func (l *loader) addAll(key uint32, skip string) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, -16, int64(key), asm.Word),
		asm.LoadMapPtr(asm.R1, l.all.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, skip),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	}
}

func (l *loader) attach(spec *btf.Spec, name string, at ebpf.AttachType, to string, insns asm.Instructions) error {
	defer l.step(to, l.now())
	// A collection of one, for its options' BTF cache (NewProgramWithOptions has none).
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{name: {
		Name: name, Type: ebpf.Tracing, AttachType: at, AttachTo: to, Instructions: insns, License: "GPL",
	}}}, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: spec}, Cache: l.cache})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	prog := coll.DetachProgram(name)
	coll.Close()
	l.progs.add(prog, at)
	return nil
}

// programs are the loaded programs and, while attached, their links; they keep the
// time they have counted in all. Their user (Counter) holds its lock around them.
//
// The raw tracepoint counts while attached: the sampler attaches and detaches it (the
// attached program is what costs, every system call of the node). fentry programs built
// with a budget (gated) are attached once, and count while their gate is open: they
// begin by reading it (a word of window's value) and return at once while it is closed,
// so that the sampler opens and closes it instead (attaching and detaching a trampoline
// waits for a grace period of the kernel's and rewrites the kernel's code); a call then
// pays the trampoline alone.
type programs struct {
	progs    []*ebpf.Program
	at       ebpf.AttachType
	links    []link.Link
	now      func() time.Time
	linkedAt time.Time // since when counting, if counting now
	attached Attached  // until linkedAt, if counting now
	// window holds where the programs count (Counts.Sampled's offset while sampled, else
	// 0) and, gated, whether they count at all; sampled and open say which.
	window        *ebpf.Map
	sampled, open bool
	gated         bool
	// turn, if set, is called where the way the programs count changes, with the way
	// they counted until then (Counter.turn).
	turn func(counting, sampled bool)
}

// sampledOffset is where Counts.Sampled begins.
const sampledOffset = uint32(unsafe.Offsetof(Counts{}.Sampled))

// Offsets in window's value: where the programs count, and the gate (gated programs
// count while it is not 0).
const (
	windowOffset = 0
	windowGate   = 4
)

// store writes where the programs count and their gate.
func (p *programs) store(sampled, open bool) error {
	var v [2]uint32
	if sampled {
		v[0] = sampledOffset
	}
	if open {
		v[1] = 1
	}
	return p.window.Update(uint32(0), v, ebpf.UpdateAny)
}

// setSampled makes the programs count into Counts.Sampled (on) or Whole from now, and
// the time counted from now count as such.
func (p *programs) setSampled(on bool) error {
	if on == p.sampled {
		return nil
	}
	p.turned(p.counting(), p.sampled)
	if err := p.store(on, p.open); err != nil {
		return fmt.Errorf("syscount: count in windows %v: %w", on, err)
	}
	p.addAttached()
	p.sampled = on
	return nil
}

// turned calls turn, if set.
func (p *programs) turned(counting, sampled bool) {
	if p.turn != nil {
		p.turn(counting, sampled)
	}
}

// counting says whether the programs count now: attached, and gated ones with their gate
// open.
func (p *programs) counting() bool { return p.linked() && (!p.gated || p.open) }

// resume makes the programs count: attached (the raw tracepoint), or gated ones' gate
// opened (attached first where they are not).
func (p *programs) resume() error {
	if !p.linked() {
		if err := p.link(); err != nil {
			return err
		}
	}
	if !p.gated || p.open {
		return nil
	}
	p.turned(false, p.sampled)
	if err := p.store(p.sampled, true); err != nil {
		return fmt.Errorf("syscount: open the programs' gate: %w", err)
	}
	p.open, p.linkedAt = true, p.now()
	return nil
}

// pause stops the programs counting: detached (the raw tracepoint), or gated ones' gate
// closed (attached, for the trampoline's cost alone). Where the gate cannot be closed they
// are detached.
func (p *programs) pause() {
	if !p.gated {
		p.unlink()
		return
	}
	p.addAttached()
	if !p.open {
		return
	}
	p.turned(true, p.sampled)
	if err := p.store(p.sampled, false); err != nil {
		p.unlink()
		return
	}
	p.open = false
}

// addAttached adds the time counted since linkedAt to its kind, and starts anew.
func (p *programs) addAttached() {
	if !p.counting() {
		return
	}
	now := p.now()
	if p.sampled {
		p.attached.Sampled += now.Sub(p.linkedAt)
	} else {
		p.attached.Whole += now.Sub(p.linkedAt)
	}
	p.linkedAt = now
}

func (p *programs) add(prog *ebpf.Program, at ebpf.AttachType) {
	p.progs = append(p.progs, prog)
	p.at = at
}

// link attaches every program; on failure none stays attached. The programs are
// attached side by side: attaching or detaching a trampoline waits for a grace period
// of the kernel's, which concurrent waits share (one after another, eight fentry
// programs took seconds on an emulated node). Gated programs are attached with their
// gate as it is (closed, after unlink): they count once resumed.
func (p *programs) link() error {
	was := p.counting()
	links := make([]link.Link, len(p.progs))
	errs := make([]error, len(p.progs))
	var wg sync.WaitGroup
	for i, prog := range p.progs {
		wg.Go(func() {
			links[i], errs[i] = link.AttachTracing(link.TracingOptions{Program: prog, AttachType: p.at})
		})
	}
	wg.Wait()
	for i, l := range links {
		if errs[i] == nil {
			p.links = append(p.links, l)
		}
	}
	// The programs count from here (attaching them took a grace period of the kernel's,
	// up to tens of ms under emulation), as the time attached does.
	p.turned(was, p.sampled)
	p.linkedAt = p.now()
	if err := errors.Join(errs...); err != nil {
		p.unlink()
		return fmt.Errorf("syscount: attach: %w", err)
	}
	return nil
}

// unlink detaches every program, side by side; a gated program's gate is closed.
func (p *programs) unlink() {
	p.turned(p.counting(), p.sampled)
	p.addAttached()
	if p.gated && p.open && p.store(p.sampled, false) == nil {
		p.open = false
	}
	var wg sync.WaitGroup
	for _, l := range p.links {
		wg.Go(func() { l.Close() })
	}
	wg.Wait()
	p.links = nil
}

func (p *programs) linked() bool { return len(p.links) > 0 }

// attachedTime returns now and the time counted in all up to it.
func (p *programs) attachedTime() (now time.Time, d Attached) {
	if !p.counting() {
		return p.now(), p.attached
	}
	p.addAttached()
	return p.linkedAt, p.attached
}

// close detaches and closes every program.
func (p *programs) close() error {
	p.unlink()
	var errs []error
	for _, prog := range p.progs {
		errs = append(errs, prog.Close())
	}
	p.progs = nil
	return errors.Join(errs...)
}

// flagNoPrealloc is BPF_F_NO_PREALLOC: entries are allocated when a cgroup is watched,
// not MaxCgroups × CPUs of them at once.
const flagNoPrealloc = 1

func trim(s string) string {
	if len(s) > 6 {
		return s[:6]
	}
	return s
}

// syscallFunc is the kernel function behind system call name on this architecture
// ("__x64_sys_openat"), which must be a function in the kernel's BTF.
func syscallFunc(spec *btf.Spec, name string) (string, error) {
	prefix, ok := archPrefix[runtime.GOARCH]
	if !ok {
		return "", fmt.Errorf("no system call prefix known for %s", runtime.GOARCH)
	}
	fn := prefix + name
	var f *btf.Func
	if err := spec.TypeByName(fn, &f); err != nil {
		return "", fmt.Errorf("kernel function %s not in the kernel's BTF: %w", fn, err)
	}
	return fn, nil
}

// archPrefix is the prefix of system call entry functions (arch/*/include/asm/syscall_wrapper.h).
var archPrefix = map[string]string{
	"amd64": "__x64_sys_", "arm64": "__arm64_sys_", "riscv64": "__riscv_sys_",
	"s390x": "__s390x_sys_",
}

// tail counts one call at byte offset r6 of the value: for each watched level, the
// calling thread's ancestor cgroup at that level is looked up in counts, and the first
// found is incremented; with bytes, r8 is added to the count after r6's. r6 and r8
// survive the helper calls; the key is at fp-8, the levels index at fp-16. With a budget
// a call found is counted in all's allJobs too (r9 and fp-16 used). Its labels begin
// with prefix (two tails in one program).
func (l *loader) tail(bytes bool, prefix string) asm.Instructions {
	levelsFD, countsFD := l.levels.FD(), l.counts.FD()
	var insns asm.Instructions
	for i := 0; i < MaxLevels; i++ {
		insns = append(insns,
			asm.StoreImm(asm.RFP, -16, int64(i), asm.Word),
			asm.LoadMapPtr(asm.R1, levelsFD),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -16),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, prefix+"exit"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
			asm.JEq.Imm(asm.R1, 0, prefix+"exit"),
			asm.FnGetCurrentAncestorCgroupId.Call(),
			asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
			asm.LoadMapPtr(asm.R1, countsFD),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, prefix+"hit"),
		)
	}
	insns = append(insns,
		asm.Ja.Label(prefix+"exit"),
		asm.Add.Reg(asm.R0, asm.R6).WithSymbol(prefix+"hit"),
	)
	if l.budget > 0 {
		// One more for the watched cgroups' calls in all (allJobs), the counts' pointer
		// kept in r9 meanwhile.
		insns = append(insns, asm.Mov.Reg(asm.R9, asm.R0))
		insns = append(insns, l.addAll(allJobs, prefix+"jobs")...)
		insns = append(insns, asm.Mov.Reg(asm.R0, asm.R9).WithSymbol(prefix+"jobs"))
	}
	if l.window != nil {
		// In a sampled window, into Counts.Sampled (the branch keeps the offset known to
		// the verifier).
		insns = append(insns,
			asm.LoadMapValue(asm.R1, l.window.FD(), windowOffset),
			asm.LoadMem(asm.R1, asm.R1, 0, asm.Word),
			asm.JEq.Imm(asm.R1, 0, prefix+"add"),
			asm.Add.Imm(asm.R0, int32(sampledOffset)),
		)
	}
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord).WithSymbol(prefix+"add"),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	)
	if bytes {
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
			asm.Add.Reg(asm.R1, asm.R8),
			asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
		)
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol(prefix+"exit"),
		asm.Return(),
	)
}

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
