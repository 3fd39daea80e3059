// Package cgstats reads a Slurm job's resource statistics from its cgroups: CPU time and
// throttling, memory current/peak, OOM events, page faults, pids, block I/O and PSI
// pressure, on cgroup v1 and v2 (and hybrid hosts, where both are read and merged).
//
// # Not measured is not zero
//
// Every value in Stats has a bit in Stats.Measured. A field whose bit is clear was not
// measured (controller not mounted or not enabled, file absent, kernel too old, cgroup
// gone) and its value is meaningless; Stats.Missing says which fields and why. We chose a
// bitset over pointer fields so that Stats stays a comparable plain value that is cheap to
// copy every cycle and easy to diff in tests.
//
// # Input
//
// Reader.Read (and Files.Read) take what jobcgroup.Find returns: hierarchy key
// ("memory", "cpu,cpuacct", "unified", ...) → cgroup directory as seen in the mount
// namespace. The directories are resolved under the injected FS root. On v1 the reader
// uses the hierarchical counters (cpuacct usage, memory usage and total_* in
// memory.stat, the *_recursive blkio files), because Slurm puts the tasks into step_*
// children of job_J. A file whose fields the other cgroup version measured already
// (hybrid hosts) is not read.
//
// # Own parsers, kept-open files
//
// Every file is parsed here (parse.go: flat keyed, nested keyed, PSI, single value,
// blkio). A general cgroup library does not fit: it turns an absent file (memory.peak on
// kernels before 5.19, memory.* when the memory controller is not enabled, a missing
// oom_kill line before 4.13) or an empty blkio.throttle.* file into 0, which is exactly
// what this package must not do; it reads files it does not need (limits, failcnt,
// per-CPU usage); and it reads by path, while a daemon that reads every job every
// second keeps the files open (Files: one pread(2) per file and read, no mount table,
// no stat, no poller registration). On v1, user and system time come from cpuacct.stat
// (USER_HZ ticks), throttling from cpu.stat, memory from memory.usage_in_bytes,
// memory.max_usage_in_bytes and memory.stat's total_* keys, OOM kills from
// memory.oom_control, tasks from pids.current.
//
// # Errors
//
// A missing controller, file or cgroup (the job ended mid-read) is an ordinary result:
// the affected fields are not measured and listed in Missing (Stats.Vanished is set when
// a cgroup directory disappeared). Malformed content is an error naming the file and
// line; Read then still returns everything else it measured, with the error.
package cgstats

import (
	"fmt"
	"math/bits"
	"strings"
)

// Field names one measured value of Stats; Fields combine with |.
type Field uint32

const (
	CPUUser          Field = 1 << iota // Stats.CPUUserNs
	CPUSystem                          // Stats.CPUSystemNs
	CPUPeriods                         // Stats.NrPeriods
	CPUThrottled                       // Stats.NrThrottled
	CPUThrottledTime                   // Stats.ThrottledNs
	MemCurrent                         // Stats.MemCurrent
	MemPeak                            // Stats.MemPeak
	MemOOM                             // Stats.OOM
	MemOOMKill                         // Stats.OOMKill
	PgFault                            // Stats.PgFault
	PgMajFault                         // Stats.PgMajFault
	PidsCurrent                        // Stats.Pids
	IOReadBytes                        // Stats.IOReadBytes
	IOWriteBytes                       // Stats.IOWriteBytes
	IOReadOps                          // Stats.IOReadOps
	IOWriteOps                         // Stats.IOWriteOps
	PSICPUSome                         // Stats.CPUSome
	PSICPUFull                         // Stats.CPUFull
	PSIMemSome                         // Stats.MemSome
	PSIMemFull                         // Stats.MemFull
	PSIIOSome                          // Stats.IOSome
	PSIIOFull                          // Stats.IOFull
	MemAnon                            // Stats.MemAnon

	fieldEnd
	// AllFields is every Field.
	AllFields = fieldEnd - 1
)

var fieldNames = [...]string{
	"cpu_user", "cpu_system", "cpu_nr_periods", "cpu_nr_throttled", "cpu_throttled_time",
	"mem_current", "mem_peak", "mem_oom", "mem_oom_kill", "pgfault", "pgmajfault",
	"pids_current", "io_read_bytes", "io_write_bytes", "io_read_ops", "io_write_ops",
	"psi_cpu_some", "psi_cpu_full", "psi_memory_some", "psi_memory_full", "psi_io_some", "psi_io_full",
	"mem_anon",
}

// String lists the set fields' names, joined by "|".
func (f Field) String() string {
	if f == 0 {
		return "none"
	}
	var parts []string
	for f != 0 {
		i := bits.TrailingZeros32(uint32(f))
		if i < len(fieldNames) {
			parts = append(parts, fieldNames[i])
		} else {
			parts = append(parts, fmt.Sprintf("field(%d)", i))
		}
		f &^= 1 << i
	}
	return strings.Join(parts, "|")
}

// Pressure is one PSI line ("some" or "full") of a *.pressure file.
type Pressure struct {
	Avg10   float64 // percent of the last 10 s
	TotalUs uint64  // cumulative stall time, µs
}

// Stats is one read of a job's cgroups. A value counts only if its Field is in Measured.
type Stats struct {
	Measured Field

	CPUUserNs, CPUSystemNs uint64 // cumulative CPU time
	NrPeriods, NrThrottled uint64 // CFS bandwidth periods, and those throttled
	ThrottledNs            uint64 // cumulative throttled time

	MemCurrent, MemPeak uint64 // bytes; peak is max_usage_in_bytes (v1) or memory.peak (v2)
	// MemAnon is anonymous memory (heap, stacks): memory.stat anon (v2) or total_rss
	// (v1). Unlike MemCurrent it leaves out the page cache a job's file I/O fills.
	MemAnon             uint64
	OOM, OOMKill        uint64 // v2 memory.events oom / oom_kill; v1 has only oom_kill
	PgFault, PgMajFault uint64 // cumulative page faults

	Pids uint64 // tasks now

	IOReadBytes, IOWriteBytes uint64 // cumulative, all devices
	IOReadOps, IOWriteOps     uint64

	CPUSome, CPUFull Pressure
	MemSome, MemFull Pressure
	IOSome, IOFull   Pressure

	// Missing explains every field not in Measured.
	Missing []Missing
	// Vanished is set when a job cgroup directory disappeared before or during the read.
	Vanished bool
}

// Missing says why Fields were not measured.
type Missing struct {
	Fields Field
	Path   string // file or directory (under the FS root) that was absent; "" if none applies
	Why    string
}

// Has reports whether all of f were measured.
func (s *Stats) Has(f Field) bool { return s.Measured&f == f }

func (s *Stats) setU(f Field, dst *uint64, v uint64) {
	if !s.Has(f) {
		*dst = v
		s.Measured |= f
	}
}

func (s *Stats) setP(f Field, dst *Pressure, v Pressure) {
	if !s.Has(f) {
		*dst = v
		s.Measured |= f
	}
}

func (s *Stats) miss(f Field, path, why string) {
	f &^= s.Measured
	if f == 0 {
		return
	}
	s.Missing = append(s.Missing, Missing{Fields: f, Path: path, Why: why})
}

// finish drops Missing notes for fields a later source measured, merges notes with the same
// path and reason, and adds one for fields nothing tried to measure.
func (s *Stats) finish() {
	// In place: out is s.Missing[:w], and w never passes the note being read.
	out := s.Missing[:0]
	var covered Field
next:
	for _, m := range s.Missing {
		m.Fields &^= s.Measured
		m.Fields &^= covered // first reason wins
		if m.Fields == 0 {
			continue
		}
		covered |= m.Fields
		for i := range out { // a few notes: a scan is cheaper than a map
			if out[i].Path == m.Path && out[i].Why == m.Why {
				out[i].Fields |= m.Fields
				continue next
			}
		}
		out = append(out, m)
	}
	if rest := AllFields &^ s.Measured &^ covered; rest != 0 {
		out = append(out, Missing{Fields: rest, Why: "no cgroup hierarchy of the job provides it"})
	}
	s.Missing = out
}
