package measure

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/sample"
)

// perf events in cgroup mode, one counter per event and CPU of the job (perfcg); per
// process in inherit mode when there is no cgroup (`persyst run` without privileges).
var perfRegistration = Registration{Name: "perf", Default: true, New: newPerf}

type perfSource struct {
	g *perfcg.Group
	// idx is the index in g.Events() of the first event of each name in names.
	idx   []int
	names []string
	// static are the events not measured for the whole job, and why.
	static map[string]string
	prev   perfcg.Counts
	spare  perfcg.Counts // arrays the next read goes into (perfcg.Group.ReadInto)
	have   bool
	// open is how many counters are open (read without the meter's lock, by Counters).
	open atomic.Int64
}

func newPerf(env *Env, spec *Spec) (Source, error) {
	p := &perfSource{static: map[string]string{}}
	for name, why := range env.Unavailable {
		p.static[name] = why
	}
	if spec.PerfCgroup == "" && spec.PerfPID <= 0 {
		why := spec.PerfWhy
		if why == "" {
			why = "no cgroup to count perf events in"
		}
		for _, e := range env.Events {
			p.static[e.Name] = why
		}
		return p, nil
	}
	if len(env.Events) == 0 {
		return p, nil
	}
	var err error
	if spec.PerfCgroup != "" {
		p.g, err = perfcg.Open(spec.PerfCgroup, spec.CPUs, env.Events)
	} else {
		// Counting a process tree counts its user space only: events that happen only in
		// the kernel would read 0, which is not a measurement.
		var user []perfevents.Event
		for _, e := range env.Events {
			if perfevents.KernelOnly(e.Name) {
				p.static[e.Name] = "not measured: it happens in the kernel, which an unprivileged user may not count (kernel.perf_event_paranoid)"
				continue
			}
			user = append(user, e)
		}
		p.g, err = perfcg.OpenProcess(spec.PerfPID, spec.CPUs, user)
	}
	if err != nil {
		// The job goes on being measured by everything else.
		env.Log.Warn().Err(err).Str("job", spec.Name).Msg("perf events not measured")
		for _, e := range env.Events {
			p.static[e.Name] = err.Error()
		}
		return p, nil
	}
	byName := map[string]perfevents.Event{}
	for _, e := range p.g.Events() {
		byName[e.Name] = e
	}
	unavailable := p.g.Unavailable()
	seen := map[string]bool{}
	for name, err := range unavailable {
		p.static[name] = "not available: " + perfcg.Reason(byName[name], err)
		seen[name] = true // never read: no values to keep
	}
	for j, e := range p.g.Events() {
		if !seen[e.Name] {
			seen[e.Name] = true
			p.idx = append(p.idx, j)
			p.names = append(p.names, e.Name)
		}
	}
	p.open.Store(int64(p.g.Counters()))
	return p, nil
}

// Counters returns how many perf counters the source holds open.
func (p *perfSource) Counters() int { return int(p.open.Load()) }

func (p *perfSource) CPUMetrics() ([]string, bool) { return p.names, p.g != nil }

func (p *perfSource) Read(r *Read) error {
	for name, why := range p.static {
		r.NotMeasured(name, why)
	}
	if p.g == nil {
		return nil
	}
	cur := p.spare
	err := p.g.ReadInto(&cur)
	if err != nil {
		for _, n := range p.names {
			r.NotMeasured(n, "perf read failed: "+err.Error())
		}
		return fmt.Errorf("%s: %w", r.Spec.Name, err)
	}
	if !p.have {
		p.prev, p.spare, p.have = cur, perfcg.Counts{}, true
		return nil
	}
	s := r.Sample
	s.CPU = make([]sample.CPUValues, len(cur.CPUs))
	for i, cpu := range cur.CPUs {
		s.CPU[i] = sample.CPUValues{CPU: cpu, Values: make(map[string]float64, len(p.idx))}
	}
	for k, j := range p.idx {
		name := p.names[k]
		var sum float64
		ok := true
		for i := range cur.CPUs {
			c, q := cur.PerCPU[i][j], p.prev.PerCPU[i][j]
			if !c.Available || !q.Available {
				ok = false
				continue
			}
			v, low := delta(c, q, p.g.LowCoverage)
			if ev := cur.Events[j]; ev.Kind != perfevents.Hardware {
				// Software events and tracepoints take no PMU counter and are never
				// multiplexed; in per-process mode running < enabled only means the
				// process ran on other CPUs too. Their raw counts are exact.
				v, low = float64(sub(c.Raw, q.Raw)), false
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
	p.prev, p.spare = cur, p.prev // the older arrays are read into next
	return nil
}

// Method says that system calls were counted with the perf tracepoints, where they were.
func (p *perfSource) Method() (string, string) {
	for _, n := range p.names {
		if strings.HasPrefix(n, perfevents.SyscallPrefix) {
			return SystemCalls, "perf tracepoints, every call"
		}
	}
	return "", ""
}

func (p *perfSource) Close() error {
	if p.g == nil {
		return nil
	}
	p.open.Store(0)
	return p.g.Close()
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
