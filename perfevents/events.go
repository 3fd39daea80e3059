// Package perfevents is the catalog of the perf events persyst counts: their perf(1)
// names, what each needs from the kernel (Kind), their perf_event_attr type and config,
// the groups they are scheduled in, and the raw floating-point and memory events of the
// processors that have a table (RawEvents). It is data only: the reader that opens and
// reads them is daemon/measure/perfcg; the property engine uses the names.
package perfevents

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind classifies events by what they need from the kernel.
type Kind int

const (
	Software   Kind = iota // PERF_TYPE_SOFTWARE: always present
	Tracepoint             // PERF_TYPE_TRACEPOINT: needs tracefs for the id and the tracepoint
	Hardware               // PERF_TYPE_HARDWARE: needs a PMU
)

func (k Kind) String() string {
	switch k {
	case Software:
		return "software"
	case Tracepoint:
		return "tracepoint"
	case Hardware:
		return "hardware"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one perf event. For tracepoints Config is the tracepoint id, filled in by
// FS.Resolve (0 means unresolved).
type Event struct {
	Name   string // perf(1) spelling: "task-clock", "syscalls:sys_enter_openat", "cycles"
	Kind   Kind
	Type   uint32 // PERF_TYPE_*
	Config uint64
	// Group: events with the same non-empty Group are opened as one perf group per CPU.
	Group string
	// Filter, for a tracepoint, is the kernel's event filter (PERF_EVENT_IOC_SET_FILTER,
	// the ftrace filter syntax): only the events it matches are counted. An event whose
	// filter the kernel refuses is not available.
	Filter string
}

func sw(name string, config uint64) Event {
	return Event{Name: name, Kind: Software, Type: unix.PERF_TYPE_SOFTWARE, Config: config}
}

func hw(name string, config uint64, group string) Event {
	return Event{Name: name, Kind: Hardware, Type: unix.PERF_TYPE_HARDWARE, Config: config, Group: group}
}

func tp(name string) Event {
	return Event{Name: name, Kind: Tracepoint, Type: unix.PERF_TYPE_TRACEPOINT}
}

// KernelOnly says whether an event happens only in the kernel (a context switch, a
// migration): counting user space only, as perf lets an unprivileged user, it is always
// 0, so it is not measured then.
func KernelOnly(name string) bool {
	return name == "context-switches" || name == "cpu-migrations" || strings.HasPrefix(name, "sched:") || strings.HasPrefix(name, "task:")
}

// SoftwareEvents are the generic software events; they exist on every kernel with
// perf events.
func SoftwareEvents() []Event {
	return []Event{
		sw("task-clock", unix.PERF_COUNT_SW_TASK_CLOCK),
		sw("context-switches", unix.PERF_COUNT_SW_CONTEXT_SWITCHES),
		sw("cpu-migrations", unix.PERF_COUNT_SW_CPU_MIGRATIONS),
		sw("page-faults", unix.PERF_COUNT_SW_PAGE_FAULTS),
		sw("major-faults", unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ),
		sw("minor-faults", unix.PERF_COUNT_SW_PAGE_FAULTS_MIN),
	}
}

// OpenTracepoints are the system calls that open files: a file open rate counts them
// all. sys_enter_open and sys_enter_creat do not exist on architectures without open(2)
// and creat(2) (arm64), sys_enter_openat2 before Linux 5.6; those are then reported not
// available.
var OpenTracepoints = []string{"syscalls:sys_enter_openat", "syscalls:sys_enter_open", "syscalls:sys_enter_openat2", "syscalls:sys_enter_creat"}

// FutexTracepoint counts futex(2) calls: how threads sleep on a contended lock, condition
// variable or barrier, and wake each other.
const FutexTracepoint = "syscalls:sys_enter_futex"

// SyscallPrefix begins the name of every system call entry tracepoint.
const SyscallPrefix = "syscalls:sys_enter_"

// ProcessTracepoints count the job's new processes and threads (fork, clone) and the
// programs it started (exec).
var ProcessTracepoints = []string{"sched:sched_process_fork", "sched:sched_process_exec"}

// NewProcessTracepoint counts the processes the job created (fork, vfork, a clone
// without CLONE_THREAD), not its threads: the task_newtask tracepoint, filtered on its
// clone flags (sched_process_fork counts both). With the execs it tells a fork storm
// (processes created that start no program: subshells, a process forked per item) from
// programs started.
const NewProcessTracepoint = "task:task_newtask"

// newProcessFilter keeps the clones that make a process: CLONE_THREAD (0x10000) unset.
const newProcessFilter = "!(clone_flags & 0x10000)"

// TracepointEvents are the file open/close and process creation tracepoints.
func TracepointEvents() []Event {
	var out []Event
	for _, n := range OpenTracepoints {
		out = append(out, tp(n))
	}
	out = append(out, tp("syscalls:sys_enter_close"), tp(FutexTracepoint))
	for _, n := range ProcessTracepoints {
		out = append(out, tp(n))
	}
	newProcess := tp(NewProcessTracepoint)
	newProcess.Filter = newProcessFilter
	return append(out, newProcess)
}

// HardwareEvents are the generic hardware events, grouped so that related events are
// scheduled together: cycles+instructions ("ipc"), branches ("branch", with
// cycles+instructions added by WithIPC), cache ("cache", likewise).
func HardwareEvents() []Event {
	return []Event{
		hw("cycles", unix.PERF_COUNT_HW_CPU_CYCLES, "ipc"),
		hw("instructions", unix.PERF_COUNT_HW_INSTRUCTIONS, "ipc"),
		hw("ref-cycles", unix.PERF_COUNT_HW_REF_CPU_CYCLES, "ipc"),
		hw("branches", unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS, "branch"),
		hw("branch-misses", unix.PERF_COUNT_HW_BRANCH_MISSES, "branch"),
		hw("cache-references", unix.PERF_COUNT_HW_CACHE_REFERENCES, "cache"),
		hw("cache-misses", unix.PERF_COUNT_HW_CACHE_MISSES, "cache"),
	}
}

// Catalog is every event Probe tries: software, tracepoints, hardware.
func Catalog() []Event {
	var out []Event
	out = append(out, SoftwareEvents()...)
	out = append(out, TracepointEvents()...)
	out = append(out, HardwareEvents()...)
	return out
}

// WithIPC returns events with cycles and instructions put at the front of every
// hardware group that lacks them (keep cycles+instructions in every group), so each group's IPC is measured over exactly the time that group ran.
// Group order is kept; the input is not modified.
func WithIPC(events []Event) []Event {
	cycles, instr := HardwareEvents()[0], HardwareEvents()[1]
	type grp struct{ hasC, hasI bool }
	groups := map[string]*grp{}
	var order []string
	for _, e := range events {
		if e.Kind != Hardware || e.Group == "" {
			continue
		}
		g := groups[e.Group]
		if g == nil {
			g = &grp{}
			groups[e.Group] = g
			order = append(order, e.Group)
		}
		g.hasC = g.hasC || (e.Type == cycles.Type && e.Config == cycles.Config)
		g.hasI = g.hasI || (e.Type == instr.Type && e.Config == instr.Config)
	}
	out := make([]Event, 0, len(events)+2*len(order))
	done := map[string]bool{}
	for _, e := range events {
		if g := groups[e.Group]; e.Kind == Hardware && g != nil && !done[e.Group] {
			done[e.Group] = true
			if !g.hasC {
				c := cycles
				c.Group = e.Group
				out = append(out, c)
			}
			if !g.hasI {
				i := instr
				i.Group = e.Group
				out = append(out, i)
			}
		}
		out = append(out, e)
	}
	return out
}
