package measure

import (
	"fmt"

	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/sample"
)

// The job's cgroup statistics (cgstats): CPU time and throttling, memory and OOM events,
// tasks, block I/O, pressure stall times.
var cgroupRegistration = Registration{Name: "cgroup", Default: true, Metrics: vocabulary(cgroupNames()...), New: newCgroup}

// cgField maps a cgstats field to a metric and the factor from the field's unit.
type cgField struct {
	field cgstats.Field
	name  string
	scale float64
	get   func(*cgstats.Stats) uint64
}

var cgFields = []cgField{
	{cgstats.CPUUser, sample.CPUUserSeconds, 1e-9, func(s *cgstats.Stats) uint64 { return s.CPUUserNs }},
	{cgstats.CPUSystem, sample.CPUSystemSeconds, 1e-9, func(s *cgstats.Stats) uint64 { return s.CPUSystemNs }},
	{cgstats.CPUPeriods, sample.CPUPeriods, 1, func(s *cgstats.Stats) uint64 { return s.NrPeriods }},
	{cgstats.CPUThrottled, sample.CPUThrottled, 1, func(s *cgstats.Stats) uint64 { return s.NrThrottled }},
	{cgstats.CPUThrottledTime, sample.CPUThrottledSecs, 1e-9, func(s *cgstats.Stats) uint64 { return s.ThrottledNs }},
	{cgstats.MemCurrent, sample.MemBytes, 1, func(s *cgstats.Stats) uint64 { return s.MemCurrent }},
	{cgstats.MemPeak, sample.MemPeakBytes, 1, func(s *cgstats.Stats) uint64 { return s.MemPeak }},
	{cgstats.MemAnon, sample.MemAnonBytes, 1, func(s *cgstats.Stats) uint64 { return s.MemAnon }},
	{cgstats.MemOOM, sample.OOMEvents, 1, func(s *cgstats.Stats) uint64 { return s.OOM }},
	{cgstats.MemOOMKill, sample.OOMKills, 1, func(s *cgstats.Stats) uint64 { return s.OOMKill }},
	{cgstats.PgFault, sample.PageFaults, 1, func(s *cgstats.Stats) uint64 { return s.PgFault }},
	{cgstats.PgMajFault, sample.MajorPageFaults, 1, func(s *cgstats.Stats) uint64 { return s.PgMajFault }},
	{cgstats.PidsCurrent, sample.Tasks, 1, func(s *cgstats.Stats) uint64 { return s.Pids }},
	{cgstats.IOReadBytes, sample.BlkReadBytes, 1, func(s *cgstats.Stats) uint64 { return s.IOReadBytes }},
	{cgstats.IOWriteBytes, sample.BlkWriteBytes, 1, func(s *cgstats.Stats) uint64 { return s.IOWriteBytes }},
	{cgstats.IOReadOps, sample.BlkReadOps, 1, func(s *cgstats.Stats) uint64 { return s.IOReadOps }},
	{cgstats.IOWriteOps, sample.BlkWriteOps, 1, func(s *cgstats.Stats) uint64 { return s.IOWriteOps }},
	{cgstats.PSICPUSome, sample.PSICPUSomeSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.CPUSome.TotalUs }},
	{cgstats.PSICPUFull, sample.PSICPUFullSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.CPUFull.TotalUs }},
	{cgstats.PSIMemSome, sample.PSIMemSomeSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.MemSome.TotalUs }},
	{cgstats.PSIMemFull, sample.PSIMemFullSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.MemFull.TotalUs }},
	{cgstats.PSIIOSome, sample.PSIIOSomeSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.IOSome.TotalUs }},
	{cgstats.PSIIOFull, sample.PSIIOFullSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.IOFull.TotalUs }},
}

func cgroupNames() []string {
	out := make([]string, len(cgFields))
	for i, f := range cgFields {
		out[i] = f.name
	}
	return out
}

// cgKinds are the kinds of cgFields' metrics.
var cgKinds = func() []sample.Kind {
	out := make([]sample.Kind, len(cgFields))
	for i, f := range cgFields {
		out[i] = sample.KindOf(f.name)
	}
	return out
}()

type cgroupSource struct {
	files *cgstats.Files // the job's statistics files, kept open between reads
	// prev holds the cumulative counters at the previous read, by cgFields (prevHas:
	// which were read).
	prev    []float64
	prevHas cgstats.Field
	why     map[cgstats.Missing]string // notes made from Missing, kept from read to read
}

func newCgroup(env *Env, _ *Spec) (Source, error) {
	c := &cgroupSource{why: map[cgstats.Missing]string{}, prev: make([]float64, len(cgFields))}
	if env.Stats != nil {
		c.files = env.Stats.Files()
	}
	return c, nil
}

func (c *cgroupSource) Read(r *Read) error {
	if c.files == nil || len(r.Spec.StatCgroups) == 0 {
		for _, f := range cgFields {
			r.NotMeasured(f.name, "no cgroup found for the job")
		}
		return nil
	}
	st, err := c.files.Read(r.Spec.StatCgroups)
	r.cgroupGone = st.Vanished
	for _, miss := range st.Missing {
		why, ok := c.why[miss]
		if !ok {
			why = miss.Why
			if miss.Path != "" {
				why += " (" + miss.Path + ")"
			}
			if len(c.why) >= 64 {
				clear(c.why) // bounded: the notes of a job's cgroups hardly change
			}
			c.why[miss] = why
		}
		for _, f := range cgFields {
			if miss.Fields&f.field != 0 {
				r.NotMeasured(f.name, why)
			}
		}
	}
	var has cgstats.Field
	for i, f := range cgFields {
		if !st.Has(f.field) {
			continue
		}
		v := float64(f.get(&st)) * f.scale
		if cgKinds[i] != sample.Counter {
			r.Sample.Job[f.name] = v
			continue
		}
		if c.prevHas&f.field != 0 {
			r.Sample.Job[f.name] = max(v-c.prev[i], 0)
		}
		c.prev[i] = v
		has |= f.field
	}
	if !st.Vanished {
		c.prevHas = has
	} else {
		// Keep the previous cumulative values: a counter that comes back (cgroup
		// recreated) starts from its own zero, and max(v-p, 0) hides the reset.
		c.prevHas |= has
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.Spec.Name, err)
	}
	return nil
}

// Recheck looks again for the statistics files found absent (the job's cgroups were found
// again).
func (c *cgroupSource) Recheck() {
	if c.files != nil {
		c.files.Recheck()
	}
}

// OpenFiles is how many statistics files the source keeps open.
func (c *cgroupSource) OpenFiles() int {
	if c.files == nil {
		return 0
	}
	return c.files.OpenFiles()
}

func (c *cgroupSource) Close() error {
	if c.files == nil {
		return nil
	}
	return c.files.Close()
}
