// Package measure turns the node's raw counters into per-job samples: one Meter per job
// (or per `persyst run` command) combines
//
//   - perf events in cgroup mode, one counter per event and CPU of the job (perfcg),
//   - the job's cgroup statistics (cgstats),
//   - the I/O of the job's processes from /proc/PID/io (procio),
//   - node network counters (netstat), attributed only while the job has the node
//     to itself,
//
// and each Read gives a Sample: per job and per CPU, the increase of every counter over
// the interval since the previous read (Sample.Rate divides by its length), and gauges
// (memory in use, tasks) at the read. The first read is the baseline; reads then happen
// at cycle boundaries (NextTick) and once more at job end, so a job shorter than one cycle
// still has a sample.
//
// Not measured is not zero: a metric that could not be read is absent from a Sample and
// named, with the reason, in NotMeasured (no PMU, tracefs not mounted, controller not
// enabled, node shared with another job, ...). A cgroup or process that vanishes during a
// read is an ordinary event.
//
// A Meter's methods are safe for concurrent use; reads are serialized.
package measure

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/cgstats"
	"github.com/persyst/persyst/daemon/netstat"
	"github.com/persyst/persyst/daemon/perfcg"
	"github.com/persyst/persyst/daemon/procio"
)

// Reason says why a read happened.
type Reason string

// Read reasons.
const (
	Start Reason = "start" // baseline, when measurement begins
	Cycle Reason = "cycle" // at a cycle boundary
	End   Reason = "end"   // at job end (or when `persyst run`'s command exited)
	Step  Reason = "step"  // when a step ended (the job's cgroups still exist then)
)

// Env is what all meters of one daemon (or one `persyst run`) share.
type Env struct {
	// Events are the perf events to open for every job: available (probed) and with
	// tracepoints resolved.
	Events []perfcg.Event
	// Unavailable names the catalog events that are not measured on this node, and why.
	Unavailable map[string]string
	Stats       *cgstats.Reader
	// Energy reads the node's RAPL counters (nil: EnergyWhy says why not).
	Energy    *perfcg.Energy
	EnergyWhy string
	Proc      procio.FS
	Net       netstat.FS
	Log       zerolog.Logger
	Now       func() time.Time
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
	// Topology of CPUs (FS.Topology), optional.
	Topology []CPUTopo
	// PerfCgroup is the cgroup directory whose tasks perf counts ("" : no perf events;
	// PerfWhy then says why).
	PerfCgroup string
	PerfWhy    string
	// PerfPID, when PerfCgroup is empty, counts perf events for this process and what
	// it starts (inherit mode; `persyst run` without privileges).
	PerfPID int
	// StatCgroups maps hierarchy keys to the job's cgroup directories (cgstats.Reader).
	StatCgroups map[string]string
	// ProcCgroup is the directory whose subtree lists the job's processes.
	ProcCgroup string
	// ExtraPIDs, if set, adds processes that may have left ProcCgroup but belong to the
	// job (`persyst run`: its child, a zombie until reaped).
	ExtraPIDs func() []int
	// Exclusive, if set, says whether the job has the node to itself now; node network
	// counters are attributed to it only then.
	Exclusive func() bool
}

// CPUValues are one CPU's values in a Sample or Summary.
type CPUValues struct {
	CPU    int                `json:"cpu"`
	Values map[string]float64 `json:"values"`
}

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
	// LowCoverage lists "event@cpu" whose counter ran for less than half of the time it
	// was enabled (multiplexed): those values are extrapolated.
	LowCoverage []string `json:"low_coverage,omitempty"`
}

// Rate returns a counter's increase per second over the sample's interval.
func (s Sample) Rate(name string) (float64, bool) {
	v, ok := s.Job[name]
	if !ok || s.Seconds <= 0 {
		return 0, false
	}
	return v / s.Seconds, true
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
}

// Meter measures one job.
type Meter struct {
	env  *Env
	spec Spec
	perf *perfcg.Group
	// name → index of the first event with that name in perf.Events().
	perfIdx  []int
	perfName []string
	tracker  *procio.Tracker

	readMu    sync.Mutex // one Read at a time (the cycle and a job's end may overlap)
	prevTime  time.Time
	prevPerf  perfcg.Counts
	havePerf  bool
	prevCG    map[string]float64 // cumulative cgroup counters
	prevProc  procio.IO
	haveProc  bool
	prevNet   map[string]float64
	exclusive bool // previous read had the node to itself

	mu          sync.Mutex
	started     time.Time
	store       *store
	totals      map[string]float64
	perCPU      []map[string]float64
	notMeasured map[string]string
	measured    map[string]bool
	ended       bool
}

// Open starts measuring: perf counters are opened and the baseline is read.
func Open(env *Env, spec Spec) (*Meter, error) {
	if len(spec.CPUs) == 0 {
		return nil, fmt.Errorf("measure %s: no CPUs", spec.Name)
	}
	m := &Meter{
		env:         env,
		spec:        spec,
		tracker:     procio.NewTracker(env.Proc),
		totals:      map[string]float64{},
		notMeasured: map[string]string{},
		measured:    map[string]bool{},
		perCPU:      make([]map[string]float64, len(spec.CPUs)),
	}
	for i := range m.perCPU {
		m.perCPU[i] = map[string]float64{}
	}
	for name, why := range env.Unavailable {
		m.notMeasured[name] = why
	}
	switch {
	case spec.PerfCgroup == "" && spec.PerfPID <= 0:
		why := spec.PerfWhy
		if why == "" {
			why = "no cgroup to count perf events in"
		}
		for _, e := range env.Events {
			m.notMeasured[e.Name] = why
		}
	case len(env.Events) > 0:
		var g *perfcg.Group
		var err error
		if spec.PerfCgroup != "" {
			g, err = perfcg.Open(spec.PerfCgroup, spec.CPUs, env.Events)
		} else {
			g, err = perfcg.OpenProcess(spec.PerfPID, spec.CPUs, env.Events)
		}
		if err != nil {
			// The job goes on being measured by everything else.
			env.Log.Warn().Err(err).Str("job", spec.Name).Msg("perf events not measured")
			for _, e := range env.Events {
				m.notMeasured[e.Name] = err.Error()
			}
			break
		}
		m.perf = g
		byName := map[string]perfcg.Event{}
		for _, e := range g.Events() {
			byName[e.Name] = e
		}
		unavailable := g.Unavailable()
		for name, err := range unavailable {
			m.notMeasured[name] = "not available: " + perfcg.Reason(byName[name], err)
		}
		seen := map[string]bool{}
		for name := range unavailable {
			seen[name] = true // never read: no values to keep
		}
		for j, e := range g.Events() {
			if !seen[e.Name] {
				seen[e.Name] = true
				m.perfIdx = append(m.perfIdx, j)
				m.perfName = append(m.perfName, e.Name)
			}
		}
	}
	m.store = newStore(env.SampleBytes, spec.CPUs, m.perfName)
	if _, err := m.Read(Start); err != nil {
		env.Log.Debug().Err(err).Str("job", spec.Name).Msg("baseline read incomplete")
	}
	return m, nil
}

// Spec returns what the meter measures.
func (m *Meter) Spec() Spec {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	return m.spec
}

// SetStatCgroups changes the cgroup directories read for statistics (a job's cgroups
// that appeared after measuring began). A counter that a new directory provides for the
// first time starts from its next read.
func (m *Meter) SetStatCgroups(cg map[string]string) {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	m.spec.StatCgroups = cg
}

// Read reads every source and, except for the baseline (Start), records a Sample of the
// increases since the previous read. The error reports sources that failed (the sample
// holds everything else); a vanished cgroup or process is not an error.
func (m *Meter) Read(reason Reason) (Sample, error) {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	now := m.env.Now()
	s := Sample{Time: now, Reason: reason, Job: map[string]float64{}}
	if !m.prevTime.IsZero() {
		s.Seconds = now.Sub(m.prevTime).Seconds()
	}
	notes := map[string]string{}
	var errs []error
	if err := m.readPerf(&s, notes); err != nil {
		errs = append(errs, err)
	}
	if err := m.readCgroups(&s, notes); err != nil {
		errs = append(errs, err)
	}
	if err := m.readProcs(&s, notes); err != nil {
		errs = append(errs, err)
	}
	if err := m.readNet(&s, notes); err != nil {
		errs = append(errs, err)
	}
	m.prevTime = now

	m.mu.Lock()
	defer m.mu.Unlock()
	// A metric measured once keeps no note: at job end Slurm may already have removed
	// the cgroups, and "file absent" would wrongly say it was never measured.
	for k := range s.Job {
		m.measured[k] = true
		delete(m.notMeasured, k)
	}
	for k, why := range notes {
		if !m.measured[k] {
			m.notMeasured[k] = why
		}
	}
	if reason == Start && m.started.IsZero() {
		m.started = now
		return s, errors.Join(errs...)
	}
	if reason == End {
		m.ended = true
	}
	for k, v := range s.Job {
		switch KindOf(k) {
		case Counter:
			m.totals[k] += v
		case Gauge:
			m.totals[k] = v
		case Peak:
			m.totals[k] = max(m.totals[k], v)
		}
	}
	for i, c := range s.CPU {
		for k, v := range c.Values {
			m.perCPU[i][k] += v
		}
	}
	m.store.add(s)
	return s, errors.Join(errs...)
}

func (m *Meter) readPerf(s *Sample, notes map[string]string) error {
	if m.perf == nil {
		return nil
	}
	cur, err := m.perf.Read()
	if err != nil {
		for _, n := range m.perfName {
			notes[n] = "perf read failed: " + err.Error()
		}
		return fmt.Errorf("%s: %w", m.spec.Name, err)
	}
	if !m.havePerf {
		m.prevPerf, m.havePerf = cur, true
		return nil
	}
	s.CPU = make([]CPUValues, len(cur.CPUs))
	for i, cpu := range cur.CPUs {
		s.CPU[i] = CPUValues{CPU: cpu, Values: make(map[string]float64, len(m.perfIdx))}
	}
	for k, j := range m.perfIdx {
		name := m.perfName[k]
		var sum float64
		ok := true
		for i := range cur.CPUs {
			c, p := cur.PerCPU[i][j], m.prevPerf.PerCPU[i][j]
			if !c.Available || !p.Available {
				ok = false
				continue
			}
			v, low := delta(c, p, m.perf.LowCoverage)
			if ev := cur.Events[j]; ev.Kind != perfcg.Hardware {
				// Software events and tracepoints take no PMU counter and are never
				// multiplexed; in per-process mode running < enabled only means the
				// process ran on other CPUs too. Their raw counts are exact.
				v, low = float64(sub(c.Raw, p.Raw)), false
			}
			s.CPU[i].Values[name] = v
			sum += v
			if low {
				s.LowCoverage = append(s.LowCoverage, fmt.Sprintf("%s@%d", name, cur.CPUs[i]))
			}
		}
		if ok {
			s.Job[name] = sum
		}
	}
	m.prevPerf = cur
	return nil
}

// delta returns the scaled increase of a counter between two reads: the raw increase
// extrapolated by the share of the interval the counter was on the PMU.
func delta(cur, prev perfcg.Count, lowThreshold float64) (v float64, low bool) {
	raw := sub(cur.Raw, prev.Raw)
	en := sub(cur.Enabled, prev.Enabled)
	run := sub(cur.Running, prev.Running)
	if run == 0 || run >= en {
		return float64(raw), en > 0 && run == 0
	}
	cov := float64(run) / float64(en)
	return float64(raw) / cov, cov < lowThreshold
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

func (m *Meter) readCgroups(s *Sample, notes map[string]string) error {
	if m.env.Stats == nil || len(m.spec.StatCgroups) == 0 {
		for _, f := range cgFields {
			notes[f.name] = "no cgroup found for the job"
		}
		return nil
	}
	st, err := m.env.Stats.Read(m.spec.StatCgroups)
	for _, miss := range st.Missing {
		why := miss.Why
		if miss.Path != "" {
			why += " (" + miss.Path + ")"
		}
		for _, f := range cgFields {
			if miss.Fields&f.field != 0 {
				notes[f.name] = why
			}
		}
	}
	cur := make(map[string]float64, len(cgFields))
	for _, f := range cgFields {
		if !st.Has(f.field) {
			continue
		}
		v := float64(f.get(&st)) * f.scale
		if KindOf(f.name) != Counter {
			s.Job[f.name] = v
			continue
		}
		cur[f.name] = v
		if p, ok := m.prevCG[f.name]; ok {
			s.Job[f.name] = max(v-p, 0)
		}
	}
	if st.Vanished {
		// Keep the previous cumulative values: a counter that comes back (cgroup
		// recreated) starts from its own zero, and max(v-p, 0) hides the reset.
		for k, v := range m.prevCG {
			if _, ok := cur[k]; !ok {
				cur[k] = v
			}
		}
	}
	m.prevCG = cur
	if err != nil {
		return fmt.Errorf("%s: %w", m.spec.Name, err)
	}
	return nil
}

var procNames = []string{ReadChars, WriteChars, ReadSyscalls, WriteSyscalls, StorageReadBytes, StorageWriteBytes, CancelledWrites, Processes}

func (m *Meter) readProcs(s *Sample, notes map[string]string) error {
	if m.spec.ProcCgroup == "" && m.spec.ExtraPIDs == nil {
		for _, n := range procNames {
			notes[n] = "no cgroup to list the job's processes"
		}
		return nil
	}
	var pids []int
	var listErr error
	if m.spec.ProcCgroup != "" {
		pids, listErr = m.env.Proc.ListProcs(m.spec.ProcCgroup)
		if listErr != nil && errors.Is(listErr, errNotExist) {
			listErr = nil // the job's cgroup is gone: its processes are too
		}
	}
	if m.spec.ExtraPIDs != nil {
		pids = append(pids, m.spec.ExtraPIDs()...)
	}
	total, n, err := m.tracker.Update(pids)
	err = errors.Join(listErr, err)
	s.Job[Processes] = float64(n)
	if m.haveProc {
		d := total.Sub(m.prevProc)
		s.Job[ReadChars] = float64(d.RChar)
		s.Job[WriteChars] = float64(d.WChar)
		s.Job[ReadSyscalls] = float64(d.SyscR)
		s.Job[WriteSyscalls] = float64(d.SyscW)
		s.Job[StorageReadBytes] = float64(d.ReadBytes)
		s.Job[StorageWriteBytes] = float64(d.WriteBytes)
		s.Job[CancelledWrites] = float64(d.CancelledWriteBytes)
	}
	m.prevProc, m.haveProc = total, true
	if err != nil {
		return fmt.Errorf("%s: process I/O: %w", m.spec.Name, err)
	}
	return nil
}

var netNames = []string{NetRxBytes, NetTxBytes, NetRxPackets, NetTxPackets, IBRxBytes, IBTxBytes, IBRxPackets, IBTxPackets}

func (m *Meter) readNet(s *Sample, notes map[string]string) error {
	excl := m.spec.Exclusive != nil && m.spec.Exclusive()
	if !excl {
		why := "the node is shared with other jobs"
		if m.spec.Exclusive == nil {
			why = "node counters are not attributed to this job"
		}
		for _, n := range netNames {
			notes[n] = why
		}
		notes[EnergyPkgJoules], notes[EnergyRAMJoules] = why, why
		m.prevNet, m.exclusive = nil, false
		return nil
	}
	cur := map[string]float64{}
	var errs []error
	c, err := m.env.Net.ReadNet(nil)
	if err != nil {
		errs = append(errs, err)
		for _, n := range netNames[:4] {
			notes[n] = err.Error()
		}
	} else {
		cur[NetRxBytes], cur[NetTxBytes] = float64(c.RxBytes), float64(c.TxBytes)
		cur[NetRxPackets], cur[NetTxPackets] = float64(c.RxPackets), float64(c.TxPackets)
	}
	ports, err := m.env.Net.ReadInfiniBand()
	switch {
	case err != nil:
		errs = append(errs, err)
		for _, n := range netNames[4:] {
			notes[n] = err.Error()
		}
	case len(ports) == 0:
		for _, n := range netNames[4:] {
			notes[n] = "no InfiniBand ports on this node"
		}
	default:
		saturated := false
		for _, p := range ports {
			saturated = saturated || p.Saturated
			cur[IBRxBytes] += float64(p.RcvBytes)
			cur[IBTxBytes] += float64(p.XmitBytes)
			cur[IBRxPackets] += float64(p.RcvPackets)
			cur[IBTxPackets] += float64(p.XmitPackets)
		}
		if saturated {
			for _, n := range netNames[4:] {
				delete(cur, n)
				notes[n] = "InfiniBand 32-bit counters saturated"
			}
		}
	}
	if m.env.Energy != nil {
		if joules, err := m.env.Energy.Read(); err != nil {
			errs = append(errs, err)
		} else {
			if v, ok := joules["energy-pkg"]; ok {
				cur[EnergyPkgJoules] = v
			}
			if v, ok := joules["energy-ram"]; ok {
				cur[EnergyRAMJoules] = v
			}
		}
	}
	for _, n := range []string{EnergyPkgJoules, EnergyRAMJoules} {
		if _, ok := cur[n]; !ok {
			why := m.env.EnergyWhy
			if why == "" {
				why = "no such RAPL counter on this node"
			}
			notes[n] = why
		}
	}
	if m.exclusive && m.prevNet != nil {
		for k, v := range cur {
			if p, ok := m.prevNet[k]; ok {
				s.Job[k] = max(v-p, 0)
			}
		}
	} else {
		for _, n := range append(netNames, EnergyPkgJoules, EnergyRAMJoules) {
			if _, ok := notes[n]; !ok {
				notes[n] = "the job got the node to itself only at this read"
			}
		}
	}
	m.prevNet, m.exclusive = cur, true
	return errors.Join(errs...)
}

// Samples returns a copy of the samples so far (the baseline is not a sample).
func (m *Meter) Samples() []Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.store.all()
}

// Summary returns the totals so far.
func (m *Meter) Summary() Summary {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Summary{
		Started:     m.started,
		Samples:     len(m.store.samples),
		Halved:      m.store.halved,
		CPUs:        FormatCPUList(m.spec.CPUs),
		Topology:    m.spec.Topology,
		Ended:       m.ended,
		Totals:      maps.Clone(m.totals),
		NotMeasured: maps.Clone(m.notMeasured),
	}
	if n := len(m.store.samples); n > 0 {
		s.Last = m.store.samples[n-1].time
		s.Seconds = s.Last.Sub(s.Started).Seconds()
	}
	if m.perf != nil {
		for i, cpu := range m.spec.CPUs {
			s.PerCPU = append(s.PerCPU, CPUValues{CPU: cpu, Values: maps.Clone(m.perCPU[i])})
		}
	}
	return s
}

// Close stops the perf counters. It does not read: call Read(End) first.
func (m *Meter) Close() error {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	if m.perf == nil {
		return nil
	}
	return m.perf.Close()
}

// NextTick returns the first cycle boundary after now: the next Unix time that is a
// multiple of period (PerSyst eq. 4.1: wait TC − UT mod TC), so that every node reads
// at the same instants without talking to each other.
func NextTick(now time.Time, period time.Duration) time.Time {
	if period <= 0 {
		panic("measure: NextTick with period <= 0")
	}
	t := now.Truncate(period)
	if !t.After(now) {
		t = t.Add(period)
	}
	return t
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
