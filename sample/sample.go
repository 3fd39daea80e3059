package sample

import (
	"sort"
	"time"
)

// Reason says why a read happened.
type Reason string

// Read reasons.
const (
	Start Reason = "start" // baseline, when measurement begins
	Cycle Reason = "cycle" // at a cycle boundary
	End   Reason = "end"   // at job end (or when `persyst run`'s command exited)
	Step  Reason = "step"  // when a step ended (the job's cgroups still exist then)
	// Startup: when the job's start-up is over (properties.Config.StartupSeconds); the
	// interval up to it is not judged.
	Startup Reason = "startup"
	// Suspend and Resume: when the node daemon saw Slurm freeze the job's cgroups, and
	// thaw them (the interval up to a Resume read was suspended).
	Suspend Reason = "suspend"
	Resume  Reason = "resume"
)

// CPUValues are one CPU's values in a Sample or Summary.
type CPUValues struct {
	CPU    int                `json:"cpu"`
	Values map[string]float64 `json:"values"`
}

// GPUValues are one GPU's values of an interval: a GPU the job had alone (device-wide
// values are the job's only then). GPU is NVML's index on the node.
type GPUValues struct {
	GPU    int                `json:"gpu"`
	Values map[string]float64 `json:"values"`
}

// Per-GPU values (Sample.GPU).
const (
	GPUValueBusySeconds     = "busy_seconds"      // seconds a kernel ran
	GPUValueSMActiveSeconds = "sm_active_seconds" // seconds weighted by the share of SMs busy (GPM)
	GPUValueMemoryBytes     = "memory_bytes"      // memory in use, the highest of the interval
)

// Sample is one read of a job.
type Sample struct {
	Time    time.Time `json:"time"`
	Reason  Reason    `json:"reason"`
	Seconds float64   `json:"seconds"` // length of the interval since the previous read
	// Job holds the job's values on this node: counter increases over the interval,
	// gauges at the read, perf events summed over the job's CPUs.
	Job map[string]float64 `json:"job"`
	// CPU holds the perf events per CPU of the job.
	CPU []CPUValues `json:"cpu,omitempty"`
	// GPU are the values of each of the job's GPUs it had alone (gpu source).
	GPU []GPUValues `json:"gpu,omitempty"`
	// LowCoverage lists "event@cpu" whose counter ran for less than half of the time it
	// was enabled (multiplexed): those values are extrapolated.
	LowCoverage []string `json:"low_coverage,omitempty"`
}

// From is when the sample's interval began: Seconds before Time.
func (s Sample) From() time.Time {
	return s.Time.Add(-time.Duration(s.Seconds * float64(time.Second)))
}

// Rate returns a counter's increase per second over the sample's interval.
func (s Sample) Rate(name string) (float64, bool) {
	v, ok := s.Job[name]
	if !ok || s.Seconds <= 0 {
		return 0, false
	}
	return v / s.Seconds, true
}

// CPUsBusy is how many CPUs the interval kept busy: task-clock (perf), else the cgroup's
// user and system CPU time.
func (s Sample) CPUsBusy() (float64, bool) {
	if ns, ok := s.Rate("task-clock"); ok {
		return ns / 1e9, true
	}
	u, ok := s.Rate(CPUUserSeconds)
	if !ok {
		return 0, false
	}
	sys, _ := s.Rate(CPUSystemSeconds)
	return u + sys, true
}

// OpenEvents are the syscall tracepoints whose sum is a job's file opens.
var OpenEvents = []string{"syscalls:sys_enter_openat", "syscalls:sys_enter_open", "syscalls:sys_enter_openat2", "syscalls:sys_enter_creat"}

// FileOpens is the files opened per second over the interval (the OpenEvents measured).
func (s Sample) FileOpens() (float64, bool) {
	sum, any := 0.0, false
	for _, e := range OpenEvents {
		if v, ok := s.Rate(e); ok {
			sum, any = sum+v, true
		}
	}
	return sum, any
}

// Summary is a job's measurement so far.
type Summary struct {
	Started time.Time `json:"started"`
	Last    time.Time `json:"last"`
	Samples int       `json:"samples"`
	// Halved counts how often the samples were merged pairwise to stay in the budget.
	Halved int    `json:"halved,omitempty"`
	CPUs   string `json:"cpus"`
	// Topology gives each CPU's core and socket, to add per-CPU values up per core.
	Topology []CPUTopo          `json:"topology,omitempty"`
	Ended    bool               `json:"ended"`
	Seconds  float64            `json:"seconds"` // measured time: Last - Started
	Totals   map[string]float64 `json:"totals"`
	PerCPU   []CPUValues        `json:"per_cpu,omitempty"`
	// NotMeasured maps metrics (and perf events) that have no value to the reason.
	NotMeasured map[string]string `json:"not_measured,omitempty"`
	// Gaps are stretches between Started and Last that were not measured (the daemon
	// restarted in between).
	Gaps []Gap `json:"gaps,omitempty"`
	// Suspended are the stretches Slurm held the job suspended (from the samples whose
	// SuspendedSeconds cover them): measured, not judged.
	Suspended []Gap `json:"suspended,omitempty"`
	// Methods says how some things were measured where that differs by node: "system
	// calls" → "eBPF (fentry), every call", "perf tracepoints, every call", or counted
	// in samples and scaled (how much of the time is said).
	Methods map[string]string `json:"methods,omitempty"`
}

// GPUModelMethod is the Summary.Methods entry that names the job's GPUs on the node,
// vendor first: "NVIDIA H100 80GB HBM3", "AMD Instinct MI250X", "1 × NVIDIA H100, 2 ×
// AMD Instinct MI210" for a mix.
const GPUModelMethod = "GPUs"

// Suspended says whether Slurm held the job suspended for most of the sample's
// interval: such an interval is not judged.
func (s Sample) Suspended() bool {
	v, ok := s.Job[SuspendedSeconds]
	return ok && s.Seconds > 0 && v >= 0.5*s.Seconds
}

// maxSuspended bounds the stretches of suspension a summary keeps; beyond it, the last
// one grows to cover the rest (a job suspended and resumed every minute for days).
const maxSuspended = 32

// AddSuspended adds the suspended end of s's interval to stretches: its last
// SuspendedSeconds, all of it while the job was frozen, and at a freeze Slurm's grace,
// which may reach back before the interval (Slurm stops a job's tasks a moment before it
// freezes them). It extends the last stretch when s follows or overlaps it, and appends
// one otherwise.
func AddSuspended(stretches []Gap, s Sample) []Gap {
	v := s.Job[SuspendedSeconds]
	if v <= 0 || s.Seconds <= 0 {
		return stretches
	}
	from := s.Time.Add(-time.Duration(v * float64(time.Second)))
	if n := len(stretches); n > 0 && (n >= maxSuspended || !from.After(stretches[n-1].To.Add(time.Millisecond))) {
		stretches[n-1].To = s.Time
		return stretches
	}
	return append(stretches, Gap{From: from, To: s.Time, Why: "suspended by Slurm"})
}

// SortedNames returns the keys of m, sorted (for stable output).
func SortedNames(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Gap is a stretch of a job's life that was not measured, with the reason (a daemon
// restart, a daemon that did not answer at the job's start).
type Gap struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Why  string    `json:"why"`
}

// Seconds is the gap's length.
func (g Gap) Seconds() float64 { return g.To.Sub(g.From).Seconds() }
