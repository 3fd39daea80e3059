// The loader: the eBPF programs, written with cilium/ebpf's assembler, and their
// attachment to the kernel (fentry, or the raw tracepoint sys_exit).

package syscount

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

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

// attachRaw loads one program on the raw tracepoint sys_exit that counts the events by
// system call number (the calling thread's registers, ctx[0]) and, unless noFiles, the
// read and write calls by what they went to (files.go): one program for both, since each
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
