package measure

import (
	"math"
	"time"

	"github.com/persyst/persyst/sample"
)

// DefaultSampleBytes is the default memory budget of one job's samples.
const DefaultSampleBytes = 4 << 20

// store keeps a job's samples compactly: values in slices indexed by metric (NaN: not
// measured in that interval) instead of maps, about 8 bytes per value. When the samples
// would exceed the budget, neighbouring samples are merged pairwise (counters add up,
// gauges keep the later value, peaks the higher), so a long job keeps its whole life at
// a coarser time resolution instead of losing its beginning.
type store struct {
	budget  int // bytes
	names   []string
	index   map[string]int
	cpus    []int
	perf    []string // per-CPU metric names (perf events), fixed at construction
	kindOf  func(string) sample.Kind
	samples []packed
	halved  int // how many times the resolution was halved
}

type packed struct {
	time    time.Time
	reason  sample.Reason
	seconds float64
	job     []float64   // by store.names
	cpu     [][]float64 // [cpu][perf event]
	low     []string
}

func newStore(budget int, cpus []int, perf []string, kindOf func(string) sample.Kind) *store {
	if budget <= 0 {
		budget = DefaultSampleBytes
	}
	return &store{budget: budget, index: map[string]int{}, cpus: cpus, perf: perf, kindOf: kindOf}
}

func (st *store) id(name string) int {
	if i, ok := st.index[name]; ok {
		return i
	}
	st.index[name] = len(st.names)
	st.names = append(st.names, name)
	return len(st.names) - 1
}

// bytesPer estimates one packed sample's size.
func (st *store) bytesPer() int {
	return 96 + 8*len(st.names) + len(st.cpus)*(24+8*len(st.perf))
}

func (st *store) add(s sample.Sample) {
	p := packed{time: s.Time, reason: s.Reason, seconds: s.Seconds, low: s.LowCoverage}
	for k := range s.Job {
		st.id(k)
	}
	p.job = make([]float64, len(st.names))
	for i := range p.job {
		p.job[i] = math.NaN()
	}
	for k, v := range s.Job {
		p.job[st.index[k]] = v
	}
	if len(s.CPU) > 0 {
		p.cpu = make([][]float64, len(s.CPU))
		flat := make([]float64, len(s.CPU)*len(st.perf))
		for i, c := range s.CPU {
			row := flat[i*len(st.perf) : (i+1)*len(st.perf)]
			for j, name := range st.perf {
				v, ok := c.Values[name]
				if !ok {
					v = math.NaN()
				}
				row[j] = v
			}
			p.cpu[i] = row
		}
	}
	st.samples = append(st.samples, p)
	if len(st.samples) > 2 && len(st.samples)*st.bytesPer() > st.budget {
		st.halve()
	}
}

// halve merges samples pairwise; an odd last sample stays as it is.
func (st *store) halve() {
	out := st.samples[:0]
	for i := 0; i < len(st.samples); i += 2 {
		if i+1 == len(st.samples) {
			out = append(out, st.samples[i])
			continue
		}
		out = append(out, st.merge(st.samples[i], st.samples[i+1]))
	}
	for i := len(out); i < len(st.samples); i++ {
		st.samples[i] = packed{}
	}
	st.samples = out
	st.halved++
}

func (st *store) merge(a, b packed) packed {
	m := packed{time: b.time, reason: b.reason, seconds: a.seconds + b.seconds, low: append(a.low, b.low...)}
	m.job = make([]float64, len(st.names))
	for i, name := range st.names {
		m.job[i] = combine(st.kindOf(name), at(a.job, i), at(b.job, i))
	}
	if a.cpu != nil || b.cpu != nil {
		m.cpu = make([][]float64, len(st.cpus))
		for c := range m.cpu {
			m.cpu[c] = make([]float64, len(st.perf))
			for j := range st.perf {
				m.cpu[c][j] = combine(sample.Counter, at2(a.cpu, c, j), at2(b.cpu, c, j))
			}
		}
	}
	return m
}

func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return math.NaN()
}

func at2(v [][]float64, i, j int) float64 {
	if i < len(v) {
		return at(v[i], j)
	}
	return math.NaN()
}

// combine merges two consecutive intervals' values of one metric.
func combine(k sample.Kind, a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		if k == sample.Counter {
			return a
		}
		return math.NaN() // a gauge's later state is unknown
	}
	switch k {
	case sample.Gauge:
		return b
	case sample.Peak:
		return max(a, b)
	}
	return a + b
}

func (st *store) unpack(p packed) sample.Sample {
	s := sample.Sample{Time: p.time, Reason: p.reason, Seconds: p.seconds, Job: map[string]float64{}, LowCoverage: p.low}
	for i, v := range p.job {
		if !math.IsNaN(v) {
			s.Job[st.names[i]] = v
		}
	}
	for i, row := range p.cpu {
		c := sample.CPUValues{CPU: st.cpus[i], Values: map[string]float64{}}
		for j, v := range row {
			if !math.IsNaN(v) {
				c.Values[st.perf[j]] = v
			}
		}
		s.CPU = append(s.CPU, c)
	}
	return s
}

func (st *store) all() []sample.Sample {
	out := make([]sample.Sample, len(st.samples))
	for i, p := range st.samples {
		out[i] = st.unpack(p)
	}
	return out
}
