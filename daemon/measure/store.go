package measure

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/persyst/persyst/sample"
)

// DefaultSampleBytes is the default memory budget of one job's samples.
const DefaultSampleBytes = 4 << 20

// store keeps a job's samples compactly: values in slices indexed by metric (NaN: not
// measured in that interval) instead of maps, about 8 bytes per value. When the samples
// would exceed the budget, neighbouring samples are merged pairwise (counters add up,
// gauges keep the later value, peaks the higher), so a long job keeps its whole life at
// a coarser time resolution instead of losing its beginning. It also keeps the job's
// totals by metric and per CPU. A metric has its slot from the first read that measured
// it: its index (names, idx) is also the set of the metrics measured so far.
type store struct {
	budget  int // bytes
	names   []string
	idx     map[string]int
	kinds   []sample.Kind // by names
	cpus    []int
	perf    []string // per-CPU metric names (perf events), fixed at construction
	perfIdx map[string]int
	kindOf  func(string) sample.Kind
	samples []packed
	halved  int // how many times the resolution was halved
	gpus    int // the most GPUs a sample had values of
	// totals are the job's values over its samples by names (counters summed, gauges
	// the last, peaks the highest; tHas: which have one); cpuTotals the per-CPU
	// counters by perf, extraCPU those of other names (none, normally).
	totals    []float64
	tHas      []bool
	cpuTotals [][]float64
	cpuHas    [][]bool
	extraCPU  []map[string]float64
}

type packed struct {
	time    time.Time
	reason  sample.Reason
	seconds float64
	job     []float64   // by store.names
	cpu     [][]float64 // [cpu][perf event]
	gpu     []sample.GPUValues
	low     []string
}

// slotValue is one job value of a sample by its slot.
type slotValue struct {
	i int
	v float64
}

func newStore(budget int, cpus []int, perf []string, kindOf func(string) sample.Kind) *store {
	if budget <= 0 {
		budget = DefaultSampleBytes
	}
	st := &store{budget: budget, idx: map[string]int{}, cpus: cpus, perf: perf, perfIdx: map[string]int{}, kindOf: kindOf,
		cpuTotals: make([][]float64, len(cpus)), cpuHas: make([][]bool, len(cpus)), extraCPU: make([]map[string]float64, len(cpus))}
	for i, n := range perf {
		st.perfIdx[n] = i
	}
	for i := range st.cpuTotals {
		st.cpuTotals[i] = make([]float64, len(perf))
		st.cpuHas[i] = make([]bool, len(perf))
	}
	return st
}

func (st *store) id(name string) (int, bool) {
	if i, ok := st.idx[name]; ok {
		return i, false
	}
	st.idx[name] = len(st.names)
	st.names = append(st.names, name)
	st.kinds = append(st.kinds, st.kindOf(name))
	st.totals = append(st.totals, 0)
	st.tHas = append(st.tHas, false)
	return len(st.names) - 1, true
}

// measured says whether a metric was measured by any read so far.
func (st *store) measured(name string) bool {
	_, ok := st.idx[name]
	return ok
}

// index gives the job values of a read their slots (appended to kv), calling first
// with the name of each metric measured for the first time.
func (st *store) index(job map[string]float64, kv []slotValue, first func(name string)) []slotValue {
	for k, v := range job {
		i, isNew := st.id(k)
		if isNew && first != nil {
			first(k)
		}
		kv = append(kv, slotValue{i, v})
	}
	return kv
}

// bytesPer estimates one packed sample's size.
func (st *store) bytesPer() int {
	return 96 + 8*len(st.names) + len(st.cpus)*(24+8*len(st.perf)) + st.gpus*(64+3*48)
}

// add keeps a sample whose job values index gave kv, and adds it to the totals.
func (st *store) add(s sample.Sample, kv []slotValue) {
	p := packed{time: s.Time, reason: s.Reason, seconds: s.Seconds, low: s.LowCoverage, gpu: cloneGPUs(s.GPU)}
	st.gpus = max(st.gpus, len(s.GPU))
	p.job = make([]float64, len(st.names))
	for i := range p.job {
		p.job[i] = math.NaN()
	}
	for _, x := range kv {
		p.job[x.i] = x.v
		switch st.kinds[x.i] {
		case sample.Counter:
			st.totals[x.i] += x.v
		case sample.Gauge:
			st.totals[x.i] = x.v
		case sample.Peak:
			if !st.tHas[x.i] || x.v > st.totals[x.i] {
				st.totals[x.i] = x.v
			}
		}
		st.tHas[x.i] = true
	}
	if len(s.CPU) > 0 {
		p.cpu = make([][]float64, len(s.CPU))
		flat := make([]float64, len(s.CPU)*len(st.perf))
		for i, c := range s.CPU {
			row := flat[i*len(st.perf) : (i+1)*len(st.perf)]
			for j := range row {
				row[j] = math.NaN()
			}
			var tot []float64
			if i < len(st.cpuTotals) {
				tot = st.cpuTotals[i]
			}
			for k, v := range c.Values {
				j, ok := st.perfIdx[k]
				switch {
				case ok:
					row[j] = v
					if tot != nil {
						tot[j] += v
						st.cpuHas[i][j] = true
					}
				case tot != nil:
					if st.extraCPU[i] == nil {
						st.extraCPU[i] = map[string]float64{}
					}
					st.extraCPU[i][k] += v
				}
			}
			p.cpu[i] = row
		}
	}
	st.samples = append(st.samples, p)
	if len(st.samples) > 2 && len(st.samples)*st.bytesPer() > st.budget {
		st.halve()
	}
}

// total returns the job's total of one metric; false: none measured.
func (st *store) total(name string) (float64, bool) {
	for i, n := range st.names {
		if n == name {
			return st.totals[i], st.tHas[i]
		}
	}
	return 0, false
}

// totalsMap returns the job's totals by name; cpuTotalsMap CPU i's.
func (st *store) totalsMap() map[string]float64 {
	out := make(map[string]float64, len(st.names))
	for i, n := range st.names {
		if st.tHas[i] {
			out[n] = st.totals[i]
		}
	}
	return out
}

func (st *store) cpuTotalsMap(i int) map[string]float64 {
	out := make(map[string]float64, len(st.perf))
	for k, v := range st.extraCPU[i] {
		out[k] = v
	}
	for j, n := range st.perf {
		if st.cpuHas[i][j] {
			out[n] += st.cpuTotals[i][j]
		}
	}
	return out
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
	for i := range st.names {
		m.job[i] = combine(st.kinds[i], at(a.job, i), at(b.job, i))
	}
	m.gpu = mergeGPUs(a.gpu, b.gpu)
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

// mergeGPUs merges two consecutive intervals' per-GPU values: seconds add up, memory
// keeps the higher. A GPU missing from one interval keeps its other interval's values.
func mergeGPUs(a, b []sample.GPUValues) []sample.GPUValues {
	out := cloneGPUs(a)
	for _, g := range b {
		i := slices.IndexFunc(out, func(x sample.GPUValues) bool { return x.GPU == g.GPU })
		if i < 0 {
			out = append(out, sample.GPUValues{GPU: g.GPU, Values: maps.Clone(g.Values)})
			continue
		}
		for k, v := range g.Values {
			if k == sample.GPUValueMemoryBytes {
				out[i].Values[k] = max(out[i].Values[k], v)
			} else {
				out[i].Values[k] += v
			}
		}
	}
	return out
}

// cloneGPUs copies per-GPU values (a sample's maps are its reader's).
func cloneGPUs(gs []sample.GPUValues) []sample.GPUValues {
	if len(gs) == 0 {
		return nil
	}
	out := make([]sample.GPUValues, len(gs))
	for i, g := range gs {
		out[i] = sample.GPUValues{GPU: g.GPU, Values: maps.Clone(g.Values)}
	}
	return out
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
	s := sample.Sample{Time: p.time, Reason: p.reason, Seconds: p.seconds, Job: map[string]float64{}, LowCoverage: p.low, GPU: cloneGPUs(p.gpu)}
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
