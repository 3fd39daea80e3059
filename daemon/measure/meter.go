// Package measure turns the node's raw counters into per-job samples: one Meter per job
// (or per `persyst run` command) reads every enabled metric source (Source; the registry
// is in source.go): perf events in cgroup mode per CPU of the job, the job's cgroup
// statistics, the I/O of its processes, and node counters (network, InfiniBand, energy)
// while the job has the node to itself.
//
// Each Read gives a Sample: per job and per CPU, the increase of every counter over the
// interval since the previous read (Sample.Rate divides by its length), and gauges
// (memory in use, tasks) at the read. The first read is the baseline; reads then happen
// at cycle boundaries and once more at job end, so a job shorter than one cycle still
// has a sample.
//
// Not measured is not zero: a metric that could not be read is absent from a Sample and
// named, with the reason, in NotMeasured (no PMU, tracefs not mounted, controller not
// enabled, node shared with another job, source turned off, ...). A cgroup or process
// that vanishes during a read is an ordinary event.
//
// A Meter's methods are safe for concurrent use; reads are serialized.
package measure

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/daemon/measure/procio"
	"github.com/persyst/persyst/daemon/measure/syscount"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/sample"
)

// Env is what all meters of one daemon (or one `persyst run`) share (NewEnv).
type Env struct {
	Host hostfs.FS
	// Events are the perf events to open for every job: available (probed) and with
	// tracepoints resolved.
	Events []perfevents.Event
	// Unavailable names the catalog events that are not measured on this node, and why.
	Unavailable map[string]string
	Stats       *cgstats.Reader
	// NodeEnergy reads the node's energy counters for every job's share (nil: energy
	// is not measured; its Why says why there are none).
	NodeEnergy *NodeEnergy
	// stopMeter stops reading the node's own power meter (nil: none read).
	stopMeter func()
	// Syscalls counts the syscall tracepoints' system calls with eBPF, for jobs whose
	// perf cgroup lies on the cgroup v2 hierarchy at SyscallsMount (nil: SyscallsWhy
	// says why not, and the tracepoints count them as perf events).
	Syscalls      *syscount.Counter
	SyscallsMount string
	SyscallsWhy   string
	// GPU reads the node's GPUs, NVIDIA's and AMD's (nil: GPUWhy says why not).
	GPU    GPUs
	GPUWhy string
	// GPUErrors counts the NVIDIA driver's hardware error reports per GPU (the daemon's
	// kernel-log reader adds them; nil: not counted).
	GPUErrors *GPUErrors
	// Node reads the node-wide files of the outside source once for all jobs (nil: each
	// job reads them itself).
	Node *NodeView
	// Enable turns sources on or off by name (Registration.Name); the others keep their
	// default.
	Enable map[string]bool
	Log    zerolog.Logger
	Now    func() time.Time
	// Uptime is the time since boot on the clock of processes' start times
	// (CLOCK_BOOTTIME); nil: the kernel's.
	Uptime func() (time.Duration, error)
	// SampleBytes is the memory budget of one job's samples (0: DefaultSampleBytes).
	// Beyond it neighbouring samples are merged pairwise: the whole job is kept at a
	// coarser time resolution (Summary.Halved says how often).
	SampleBytes int
}

// Spec says what to measure for one job.
type Spec struct {
	Name string // for logs: "job 42"
	// CPUs are the job's CPUs on this node: the devices of per-CPU values.
	CPUs []int
	// Topology of CPUs (hostfs.FS.Topology), optional.
	Topology []sample.CPUTopo
	// PerfCgroup is the cgroup directory whose tasks perf counts ("" : no perf events;
	// PerfWhy then says why).
	PerfCgroup string
	PerfWhy    string
	// PerfPID, when PerfCgroup is empty, counts perf events for this process and what
	// it starts (inherit mode; `persyst run` without privileges).
	PerfPID int
	// StatCgroups maps hierarchy keys to the job's cgroup directories (cgstats.Reader).
	StatCgroups map[string]string
	// OwnCgroup, if set, is the one of StatCgroups that persyst made for the job (a cgroup
	// v2 directory to count perf events in, where Slurm's hierarchies are v1): Slurm never
	// freezes it, so it says nothing of a suspension.
	OwnCgroup string
	// ProcCgroup is the directory whose subtree lists the job's processes.
	ProcCgroup string
	// ProcsSince is when the job began: its processes born since count all they did,
	// also before the read that first sees them; those born before (running when a
	// restarted daemon took the job over) count from that read. Zero: every process
	// counts from its birth (procio.TrackerOptions).
	ProcsSince time.Time
	// ExtraPIDs, if set, adds processes that may have left ProcCgroup but belong to the
	// job (`persyst run`: its child, a zombie until reaped).
	ExtraPIDs func() []int
	// Exclusive, if set, says whether the job has the node to itself now; node counters
	// are attributed to it only then (its energy: all of the node's then, a share else).
	Exclusive func() bool
	// CPUShare, if set, is the job's share of the CPUs the node's running jobs hold:
	// its share of an interval's energy in which no job used the CPUs.
	CPUShare func() float64
	// GPUs are the job's GPUs on this node as Slurm or CUDA name them (SLURM_JOB_GPUS,
	// CUDA_VISIBLE_DEVICES): an NVML index, "minor:N" (the device /dev/nvidiaN), a
	// "GPU-…" or "MIG-…" UUID (or a prefix of one), or a PCI bus id. AllGPUs: every GPU of the node (`persyst run` without
	// CUDA_VISIBLE_DEVICES). Neither: the job holds no GPU, and has no GPU metrics.
	GPUs    []string
	AllGPUs bool
}

// Meter measures one job.
type Meter struct {
	env     *Env
	spec    Spec
	sources []Source
	// off are the metrics of sources turned off, with the reason.
	off    map[string]string
	perCPU bool // a source has values per CPU
	kinds  map[string]sample.Kind

	readMu   sync.Mutex // one Read at a time (the cycle and a job's end may overlap)
	prevTime time.Time
	// notes holds a read's not-measured notes, cleared at the next (under readMu);
	// jobLen is how many job values the last sample had (the next map is made that size).
	notes  map[string]string
	jobLen int
	// cgroupGone: the last read found a directory of spec.StatCgroups gone.
	cgroupGone bool
	// procs lists the job's processes at every read, with kept descriptors.
	procs *procio.Lister
	// freezer says whether Slurm froze the job, with kept descriptors (Frozen).
	freezer *Freezer

	mu sync.Mutex
	// kv is the slots of the job values of the sample being accounted (scratch).
	kv          []slotValue
	started     time.Time
	store       *store
	notMeasured map[string]string
	ended       bool
	gaps        []sample.Gap      // stretches not measured (Restore)
	suspended   []sample.Gap      // stretches Slurm held the job suspended (sample.AddSuspended)
	how         map[string]string // the sources' Methods at the last read (under mu)
}

// Open starts measuring: every enabled source is opened and the baseline is read.
func Open(env *Env, spec Spec) (*Meter, error) {
	if len(spec.CPUs) == 0 {
		return nil, fmt.Errorf("measure %s: no CPUs", spec.Name)
	}
	m := &Meter{
		env:         env,
		spec:        spec,
		off:         map[string]string{},
		kinds:       map[string]sample.Kind{},
		notMeasured: map[string]string{},
		procs:       procio.NewLister(env.Host),
		freezer:     NewFreezer(env.Host),
	}
	var cpuMetrics []string
	for _, r := range sources {
		for _, x := range r.Metrics {
			m.kinds[x.Name] = x.Kind
		}
		if !env.enabled(r) {
			why := "not measured: the " + r.Name + " source is turned off"
			for _, x := range r.Metrics {
				m.off[x.Name] = why
			}
			if r.Name == perfRegistration.Name {
				for _, e := range env.Events {
					m.off[e.Name] = why
				}
			}
			continue
		}
		src, err := r.New(env, &m.spec)
		if err != nil {
			env.Log.Warn().Err(err).Str("job", spec.Name).Str("source", r.Name).Msg("metric source not measured")
			for _, x := range r.Metrics {
				m.off[x.Name] = err.Error()
			}
			continue
		}
		if pc, ok := src.(PerCPUSource); ok {
			if names, ok := pc.CPUMetrics(); ok {
				m.perCPU = true
				cpuMetrics = append(cpuMetrics, names...)
			}
		}
		m.sources = append(m.sources, src)
	}
	m.store = newStore(env.SampleBytes, spec.CPUs, cpuMetrics, m.kindOf)
	if _, err := m.Read(sample.Start); err != nil {
		env.Log.Debug().Err(err).Str("job", spec.Name).Msg("baseline read incomplete")
	}
	return m, nil
}

// Recorded returns a meter of samples read earlier (by a daemon that stopped before the
// job ended): it reads nothing, its sources are closed, and its measurement ends with the
// last sample. The samples were measured from started on.
func Recorded(env *Env, spec Spec, started time.Time, samples []sample.Sample) *Meter {
	m := &Meter{
		env: env, spec: spec, off: map[string]string{}, kinds: map[string]sample.Kind{},
		notMeasured: map[string]string{}, started: started, ended: true,
	}
	var cpuMetrics []string
	seen := map[string]bool{}
	for _, r := range sources {
		for _, x := range r.Metrics {
			m.kinds[x.Name] = x.Kind
		}
	}
	for _, s := range samples {
		for _, c := range s.CPU {
			for k := range c.Values {
				if !seen[k] {
					seen[k] = true
					cpuMetrics = append(cpuMetrics, k)
				}
			}
		}
	}
	slices.Sort(cpuMetrics)
	m.perCPU = len(cpuMetrics) > 0
	m.store = newStore(env.SampleBytes, spec.CPUs, cpuMetrics, m.kindOf)
	last := started
	for _, s := range samples {
		if !s.Time.After(last) {
			continue
		}
		if !sameCPUs(s.CPU, spec.CPUs) {
			s.CPU = nil
		}
		m.account(s)
		last = s.Time
	}
	return m
}

// kindOf is how a metric combines over time: as its source defines it, else as the
// vocabulary does (perf events are counters).
func (m *Meter) kindOf(name string) sample.Kind {
	if k, ok := m.kinds[name]; ok {
		return k
	}
	return sample.KindOf(name)
}

// Spec returns what the meter measures.
func (m *Meter) Spec() Spec {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	return m.spec
}

// SetStatCgroups sets the cgroup directories read for statistics, as the job's cgroups
// were found again (some appear after measuring began, some go). A counter that a new
// directory provides for the first time starts from its next read. Statistics files found
// absent before are looked for again; the files of directories no longer listed are
// closed at the next read.
func (m *Meter) SetStatCgroups(cg map[string]string) {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	m.spec.StatCgroups = cg
	for _, src := range m.sources {
		if r, ok := src.(interface{ Recheck() }); ok {
			r.Recheck()
		}
	}
}

// StatCgroupsGone says whether the last read found a directory of the job's statistics
// cgroups gone: the job's cgroups should be looked for again.
func (m *Meter) StatCgroupsGone() bool {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	return m.cgroupGone
}

// OpenFiles returns how many files the meter keeps open between reads (cgroup statistics,
// the job's process list and its processes' files; not perf counters).
func (m *Meter) OpenFiles() int {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	n := m.freezer.OpenFiles()
	if m.procs != nil {
		n += m.procs.OpenFiles()
	}
	for _, src := range m.sources {
		if c, ok := src.(interface{ OpenFiles() int }); ok {
			n += c.OpenFiles()
		}
	}
	return n
}

// Read reads every source and, except for the baseline (Start), records a Sample of the
// increases since the previous read. The error reports sources that failed (the sample
// holds everything else); a vanished cgroup or process is not an error.
func (m *Meter) Read(reason sample.Reason) (sample.Sample, error) {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	now := m.env.Now()
	s := sample.Sample{Time: now, Reason: reason, Job: make(map[string]float64, m.jobLen)}
	if !m.prevTime.IsZero() {
		s.Seconds = now.Sub(m.prevTime).Seconds()
	}
	if m.notes == nil {
		m.notes = make(map[string]string, len(m.off))
	}
	clear(m.notes)
	maps.Copy(m.notes, m.off)
	r := &Read{Reason: reason, Sample: &s, Spec: &m.spec, env: m.env, notes: m.notes, lister: m.procs, freezer: m.freezer}
	var errs []error
	for _, src := range m.sources {
		if err := src.Read(r); err != nil {
			errs = append(errs, err)
		}
	}
	m.prevTime = now
	m.cgroupGone = r.cgroupGone
	m.jobLen = len(s.Job)
	methods := m.methods()

	m.mu.Lock()
	defer m.mu.Unlock()
	if methods != nil {
		m.how = methods
	}
	// A metric measured once keeps no note: at job end Slurm may already have removed
	// the cgroups, and "file absent" would wrongly say it was never measured.
	m.kv = m.store.index(s.Job, m.kv[:0], m.measuredFirst)
	for k, why := range r.notes {
		if !m.store.measured(k) {
			m.notMeasured[k] = why
		}
	}
	if reason == sample.Start && m.started.IsZero() {
		m.started = now
		return s, errors.Join(errs...)
	}
	if reason == sample.End {
		m.ended = true
	}
	m.store.add(s, m.kv)
	m.suspended = sample.AddSuspended(m.suspended, s)
	return s, errors.Join(errs...)
}

// measuredFirst drops the note of a metric measured for the first time. m.mu is held.
func (m *Meter) measuredFirst(name string) { delete(m.notMeasured, name) }

// account adds a sample read earlier to the totals and the store. m.mu is held.
func (m *Meter) account(s sample.Sample) {
	m.kv = m.store.index(s.Job, m.kv[:0], m.measuredFirst)
	m.store.add(s, m.kv)
	m.suspended = sample.AddSuspended(m.suspended, s)
}

// Restore puts back what an earlier meter of the same job measured before this one
// opened (the daemon restarted): the samples prev, taken from started on. The stretch
// from the last of them to this meter's baseline was not measured; it is recorded as a
// gap, with why. Per-CPU values are kept only where the CPUs are the same. Restore must
// come before any read after Open; it returns how many samples it restored.
func (m *Meter) Restore(prev []sample.Sample, started time.Time, why string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	base := m.started
	switch {
	case len(m.store.samples) > 0:
		return 0, fmt.Errorf("restore %s: the meter has read samples already", m.spec.Name)
	case started.IsZero() || !started.Before(base):
		return 0, nil
	}
	last, n := started, 0
	for _, s := range prev {
		if !s.Time.After(last) || s.Time.After(base) {
			continue // out of order, or not before this meter: not this job's past
		}
		if !sameCPUs(s.CPU, m.spec.CPUs) {
			s.CPU = nil
		}
		m.account(s)
		last = s.Time
		n++
	}
	m.started = started
	if base.Sub(last) > 0 {
		m.gaps = append(m.gaps, sample.Gap{From: last, To: base, Why: why})
	}
	return n, nil
}

func sameCPUs(vals []sample.CPUValues, cpus []int) bool {
	if len(vals) != len(cpus) {
		return false
	}
	for i, v := range vals {
		if v.CPU != cpus[i] {
			return false
		}
	}
	return true
}

// Samples returns a copy of the samples so far (the baseline is not a sample).
func (m *Meter) Samples() []sample.Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.store.all()
}

// Started is when the job's measurement began (its baseline, or the start an earlier
// meter's restored samples go back to).
func (m *Meter) Started() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started
}

// methoder is a source whose way of measuring differs from node to node: Method says
// how it measured what (for the summary's Methods; "" : nothing to say).
type methoder interface {
	Method() (what, how string)
}

// methods asks the sources how they measured (under readMu).
func (m *Meter) methods() map[string]string {
	var out map[string]string
	for _, src := range m.sources {
		if x, ok := src.(methoder); ok {
			if what, how := x.Method(); how != "" {
				if out == nil {
					out = map[string]string{}
				}
				out[what] = how
			}
		}
	}
	return out
}

// Summary returns the totals so far.
func (m *Meter) Summary() sample.Summary {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := sample.Summary{
		Started:     m.started,
		Samples:     len(m.store.samples),
		Halved:      m.store.halved,
		CPUs:        sample.FormatCPUList(m.spec.CPUs),
		Topology:    m.spec.Topology,
		Ended:       m.ended,
		Totals:      m.store.totalsMap(),
		NotMeasured: maps.Clone(m.notMeasured),
		Gaps:        slices.Clone(m.gaps),
		Suspended:   slices.Clone(m.suspended),
		Methods:     maps.Clone(m.how),
	}
	if n := len(m.store.samples); n > 0 {
		s.Last = m.store.samples[n-1].time
		s.Seconds = s.Last.Sub(s.Started).Seconds()
	}
	if m.perCPU {
		for i, cpu := range m.spec.CPUs {
			s.PerCPU = append(s.PerCPU, sample.CPUValues{CPU: cpu, Values: m.store.cpuTotalsMap(i)})
		}
	}
	return s
}

// Energy returns the job's energy so far (its totals of sample.EnergyMetrics, and how
// they were measured), without the rest of its Summary.
func (m *Meter) Energy() sample.Energy {
	m.mu.Lock()
	defer m.mu.Unlock()
	var totals map[string]float64
	for _, k := range sample.EnergyMetrics() {
		if v, ok := m.store.total(k); ok {
			if totals == nil {
				totals = map[string]float64{}
			}
			totals[k] = v
		}
	}
	return sample.Energy{Totals: totals, How: m.how[sample.MethodEnergy]}
}

// Counters returns how many perf counters the meter holds open (without waiting for a
// read in progress).
func (m *Meter) Counters() int {
	n := 0
	for _, src := range m.sources {
		if c, ok := src.(interface{ Counters() int }); ok {
			n += c.Counters()
		}
	}
	return n
}

// Close closes every source (perf counters, kept files). It does not read: call Read(End)
// first.
func (m *Meter) Close() error {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	var errs []error
	for _, src := range m.sources {
		if err := src.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.procs != nil {
		errs = append(errs, m.procs.Close())
	}
	errs = append(errs, m.freezer.Close())
	return errors.Join(errs...)
}

// Frozen says whether Slurm has frozen one of the job's steps now; known is false when
// the job has no cgroup that could say (Freezer).
func (m *Meter) Frozen() (frozen, known bool) {
	spec := m.Spec()
	return m.freezer.Frozen(spec.StatCgroups, spec.OwnCgroup)
}
