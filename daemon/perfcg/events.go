// Package perfcg counts perf events for one cgroup (a Slurm job) per CPU: one
// perf_event_open(2) fd per (event, CPU) in cgroup mode (pid = fd of the cgroup
// directory, PERF_FLAG_PID_CGROUP, cpu >= 0), always with
// PERF_FORMAT_TOTAL_TIME_ENABLED|PERF_FORMAT_TOTAL_TIME_RUNNING so multiplexed values
// can be scaled and low-coverage values flagged (DESIGN.md §3).
//
// What exists where: hardware events need a PMU; without one (most VMs, our dev/CI
// machines) perf_event_open fails with ENOENT. Probe tries every catalog event once and
// says which exist and, for the others, why not (the errno). Open never turns a
// missing event into a count of 0: its Count is marked not Available, with the reason.
//
// Grouping: events that share Event.Group are opened as one perf group per CPU (the
// first is the leader, disabled until all members are open, then enabled) and read
// with one read(2) in PERF_FORMAT_GROUP|PERF_FORMAT_ID layout, so they are scheduled
// together on the PMU and share time_enabled/time_running. The catalog puts cycles and
// instructions into every hardware group (WithIPC), so an IPC exists for whatever part
// of the run each group was scheduled; an event may therefore appear more than once in
// the event list passed to Open (Counts are indexed by position, not name). The grouped
// hardware path cannot be exercised here (no PMU); software events use the same code
// path and are tested grouped on the real kernel.
//
// In cgroup mode time_enabled only advances while a task of the cgroup runs on that
// CPU, so a CPU the job never ran on legitimately reads value 0, enabled 0.
//
// Tracepoint ids are read from the tracing filesystem under the injected root
// (<root>/sys/kernel/tracing/events/<sys>/<name>/id, else
// <root>/sys/kernel/debug/tracing/...). If tracefs is not mounted the tracepoints are
// reported not available.
//
// github.com/hodgesds/perf-utils is not used: its profilers are one event per
// (pid, cpu) with the fd hidden behind a Profiler, have no PERF_FORMAT_GROUP reading,
// and are built around pid mode (cgroup mode would need passing a directory fd as
// "pid" plus flags through untyped opts). golang.org/x/sys/unix.PerfEventOpen is
// enough and keeps the read path allocation-free.
package perfcg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FS is a view of a filesystem rooted at Root ("/" in production).
type FS struct{ Root string }

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

// TracepointEvents are the file open/close tracepoints. sys_enter_open does not exist
// on architectures without open(2) (arm64); it is then reported not available.
func TracepointEvents() []Event {
	return []Event{
		tp("syscalls:sys_enter_openat"),
		tp("syscalls:sys_enter_open"),
		tp("syscalls:sys_enter_close"),
	}
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
// hardware group that lacks them (DESIGN.md §3: keep cycles+instructions in every
// group), so each group's IPC is measured over exactly the time that group ran.
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

// ErrNoTracefs means no tracing filesystem was found under the root.
var ErrNoTracefs = errors.New("tracing filesystem not mounted")

// tracingDirs are where tracefs is looked for, relative to the root.
var tracingDirs = []string{"sys/kernel/tracing", "sys/kernel/debug/tracing"}

// TracingDir returns the tracefs directory under the root, or ErrNoTracefs.
func (fs FS) TracingDir() (string, error) {
	var tried []string
	for _, d := range tracingDirs {
		p := filepath.Join(fs.Root, d)
		tried = append(tried, p)
		if _, err := os.Stat(filepath.Join(p, "events")); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (tried %s; mount -t tracefs nodev /sys/kernel/tracing)", ErrNoTracefs, strings.Join(tried, ", "))
}

// Resolve fills in the tracepoint id of a tracepoint event from tracefs; other events
// are returned unchanged.
func (fs FS) Resolve(e Event) (Event, error) {
	if e.Kind != Tracepoint || e.Config != 0 {
		return e, nil
	}
	sys, name, ok := strings.Cut(e.Name, ":")
	if !ok || sys == "" || name == "" || strings.ContainsAny(e.Name, "/") {
		return e, fmt.Errorf("tracepoint %q: want subsystem:name", e.Name)
	}
	dir, err := fs.TracingDir()
	if err != nil {
		return e, fmt.Errorf("tracepoint %s: %w", e.Name, err)
	}
	p := filepath.Join(dir, "events", sys, name, "id")
	b, err := os.ReadFile(p)
	if err != nil {
		return e, fmt.Errorf("tracepoint %s: read id: %w", e.Name, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return e, fmt.Errorf("tracepoint %s: parse %s: %w", e.Name, p, err)
	}
	e.Config = id
	return e, nil
}
