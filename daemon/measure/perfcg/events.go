// Package perfcg counts perf events for one cgroup (a Slurm job) per CPU: one
// perf_event_open(2) fd per (event, CPU) in cgroup mode (pid = fd of the cgroup
// directory, PERF_FLAG_PID_CGROUP, cpu >= 0), always with
// PERF_FORMAT_TOTAL_TIME_ENABLED|PERF_FORMAT_TOTAL_TIME_RUNNING so multiplexed values
// can be scaled and low-coverage values flagged.
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
// path and are tested grouped on the real kernel. In cgroup mode the software events and
// tracepoints the catalog leaves ungrouped form one implicit group per CPU, so a job's
// CPU costs one read(2) for all of them (they are never multiplexed: no value changes).
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
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/perfevents"
)

// ErrNoTracefs means no tracing filesystem was found under the root.
var ErrNoTracefs = errors.New("tracing filesystem not mounted")

// ErrTracefsDenied means tracefs is mounted but this user may not read it (its mode is
// 0700 on most systems: tracepoints are for root).
var ErrTracefsDenied = errors.New("no permission to read the tracing filesystem")

// tracingDirs are where tracefs is looked for, relative to the root.
var tracingDirs = []string{"sys/kernel/tracing", "sys/kernel/debug/tracing"}

// TracingDir returns the tracefs directory under the root, or ErrNoTracefs.
func TracingDir(h hostfs.FS) (string, error) {
	var tried []string
	for _, d := range tracingDirs {
		p := h.Path(d)
		tried = append(tried, p)
		_, err := os.Stat(filepath.Join(p, "events"))
		if err == nil {
			return p, nil
		}
		if errors.Is(err, fs.ErrPermission) {
			return "", fmt.Errorf("%w (%s, as uid %d)", ErrTracefsDenied, p, os.Getuid())
		}
	}
	return "", fmt.Errorf("%w (tried %s; mount -t tracefs nodev /sys/kernel/tracing)", ErrNoTracefs, strings.Join(tried, ", "))
}

// Resolve fills in the tracepoint id of a tracepoint event from tracefs; other events
// are returned unchanged.
func Resolve(h hostfs.FS, e perfevents.Event) (perfevents.Event, error) {
	if e.Kind != perfevents.Tracepoint || e.Config != 0 {
		return e, nil
	}
	sys, name, ok := strings.Cut(e.Name, ":")
	if !ok || sys == "" || name == "" || strings.ContainsAny(e.Name, "/") {
		return e, fmt.Errorf("tracepoint %q: want subsystem:name", e.Name)
	}
	dir, err := TracingDir(h)
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
