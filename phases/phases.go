package phases

import (
	"math"
	"sort"
	"time"

	"github.com/persyst/persyst/sample"
)

// Stretch is a stretch of wall-clock time.
type Stretch struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Seconds is the stretch's length.
func (s Stretch) Seconds() float64 { return s.To.Sub(s.From).Seconds() }

// Phase is one behaviour of a job on a node: the intervals of one cluster, in stretches of
// consecutive intervals.
type Phase struct {
	N         int       `json:"n"` // 1, 2, ... in the order the phases first appear
	Stretches []Stretch `json:"stretches"`
	Intervals int       `json:"intervals"`
	Seconds   float64   `json:"seconds"` // judged time in the phase
	Share     float64   `json:"share"`   // of the judged time on the node
	Traits    Traits    `json:"traits"`
	// Centroid is the phase's mean normalised features, what phases of different nodes
	// are compared by (Compare).
	Centroid []float64 `json:"centroid,omitempty"`
	// Held are the job's properties that were severe in the phase, with the seconds they
	// were (filled in by whoever evaluates the properties per phase).
	Held map[string]float64 `json:"held,omitempty"`
}

// Contains says whether a sample's interval lies in one of the phase's stretches (its
// end does).
func (p Phase) Contains(s sample.Sample) bool {
	for _, st := range p.Stretches {
		if st.holds(s.Time) {
			return true
		}
	}
	return false
}

// holds says whether an interval ending at t lies in the stretch.
func (s Stretch) holds(t time.Time) bool {
	return t.After(s.From) && !t.After(s.To)
}

// Traits describe a phase: its intervals' rates over its time (a value that was not
// measured is 0).
type Traits struct {
	CPUBusy      float64 `json:"cpu_busy"`               // share of the job's CPUs busy
	SystemShare  float64 `json:"system_share,omitempty"` // of the CPU time, in the kernel
	ReadBytes    float64 `json:"read_bytes,omitempty"`   // per second
	WriteBytes   float64 `json:"write_bytes,omitempty"`  // per second
	ReadCalls    float64 `json:"read_calls,omitempty"`   // per second
	WriteCalls   float64 `json:"write_calls,omitempty"`  // per second
	Opens        float64 `json:"opens,omitempty"`        // files opened per second
	MemBytes     float64 `json:"mem_bytes,omitempty"`    // memory in use, mean
	GPUBusy      float64 `json:"gpu_busy,omitempty"`     // share of the job's GPUs busy
	Instructions float64 `json:"instructions,omitempty"` // per second (PMU)
}

// Options configure Find.
type Options struct {
	// NCPUs is the job's CPUs on the node (0: shares of CPUs are taken per CPU busy).
	NCPUs int
	// Judged says whether a sample's interval is judged (the start-up and suspended
	// intervals are not); nil: every interval is.
	Judged func(sample.Sample) bool
}

// Limits of the method.
const (
	// MinIntervals is the fewest judged intervals in which phases are looked for: a job
	// with fewer has one phase.
	MinIntervals = 8
	// MaxPhases bounds the phases: beyond it the two most alike are merged.
	MaxPhases = 6
	// MinShare is the least share of the judged time a phase has: a smaller cluster
	// joins the one most like it.
	MinShare = 0.05
	// EpsMin and EpsMax bound DBSCAN's radius in normalised units: 0.25 is half of the
	// job's CPUs more or less busy, or a factor of 7 in I/O per CPU-second; two
	// behaviours that far apart are never one phase, noise within one behaviour never
	// two.
	EpsMin, EpsMax = 0.25, 0.6
	// maxPoints bounds the intervals clustered (O(n²) distances): beyond it neighbouring
	// intervals are taken together.
	maxPoints = 1024
)

// point is one judged interval: its time, its features, and its sample.
type point struct {
	s        sample.Sample
	from, to time.Time
	x        []float64
}

// Find splits the judged intervals of samples (one node's, in time order) into phases.
// It returns nil when nothing was judged, one phase for a job of one behaviour.
func Find(samples []sample.Sample, o Options) []Phase { return find(points(samples, o), o) }

// Analyse is Find and FindInterference of the same samples, their intervals prepared
// once.
func Analyse(samples []sample.Sample, o Options) ([]Phase, Interference) {
	pts := points(samples, o)
	ph := find(pts, o)
	return ph, interference(pts, ph, o)
}

func find(pts []point, o Options) []Phase {
	if len(pts) == 0 {
		return nil
	}
	labels := make([]int, len(pts))
	if len(pts) >= MinIntervals {
		labels = cluster(pts)
	}
	return assemble(pts, labels, o)
}

// points are the judged intervals of samples with their features, at most maxPoints
// (neighbours merged).
func points(samples []sample.Sample, o Options) []point {
	var judged []sample.Sample
	for _, s := range samples {
		if s.Seconds > 0 && (o.Judged == nil || o.Judged(s)) {
			judged = append(judged, s)
		}
	}
	for len(judged) > maxPoints {
		judged = mergePairs(judged)
	}
	peak := 0.0
	for _, s := range judged {
		peak = max(peak, memOf(s))
	}
	pts := make([]point, len(judged))
	prevMem := -1.0
	for i, s := range judged {
		pts[i] = point{s: s, to: s.Time, from: s.From()}
		pts[i].x = features(s, o.NCPUs, peak, prevMem)
		prevMem = memOf(s)
	}
	dropSparse(pts)
	return pts
}

// mergePairs merges neighbouring samples pairwise: counters add, gauges and peaks keep
// the later's (the phases of a long job are found at a coarser resolution).
func mergePairs(in []sample.Sample) []sample.Sample {
	out := make([]sample.Sample, 0, (len(in)+1)/2)
	for i := 0; i < len(in); i += 2 {
		if i+1 == len(in) {
			out = append(out, in[i])
			break
		}
		a, b := in[i], in[i+1]
		m := sample.Sample{Time: b.Time, Reason: b.Reason, Seconds: a.Seconds + b.Seconds, Job: map[string]float64{}}
		for k, v := range b.Job {
			if sample.KindOf(k) == sample.Counter {
				if va, ok := a.Job[k]; ok {
					v += va
				}
			}
			m.Job[k] = v
		}
		out = append(out, m)
	}
	return out
}

func memOf(s sample.Sample) float64 {
	if v, ok := s.Job[sample.MemAnonBytes]; ok {
		return v
	}
	return s.Job[sample.MemBytes]
}

// The features of an interval, each scaled so that 1 is a large difference in behaviour.
// What the job does is taken per CPU-second it ran (I/O, opens, context switches), so
// that a job slowed down from outside, which does the same work more slowly, stays in its
// phase; amounts are in decades above a level below which they do not matter, at 0.3 a
// decade.
const (
	fBusy = iota
	fSystem
	fReadBytes
	fWriteBytes
	fReadCalls
	fWriteCalls
	fOpens
	fMem
	fMemGrowth
	fSwitches
	fIPC
	fGPU
	nFeatures
)

// missing marks a feature the interval has no value for.
var missing = math.NaN()

// decades scales an amount: 0.3 per decade above level.
func decades(v, level float64) float64 { return 0.3 * math.Log10(1+max(v, 0)/level) }

// features of one interval. Busy is the job's CPU demand, at half weight: its CPU time
// and the time its threads waited for a CPU, so that others on its CPUs do not move it.
func features(s sample.Sample, ncpus int, memPeak, prevMem float64) []float64 {
	x := make([]float64, nFeatures)
	for i := range x {
		x[i] = missing
	}
	secs := s.Seconds
	n := float64(max(ncpus, 1))
	user, uok := s.Job[sample.CPUUserSeconds]
	sys, sok := s.Job[sample.CPUSystemSeconds]
	// per is what amounts are taken per: the CPU time, at least 1 % of the interval.
	per := secs
	if uok || sok {
		x[fBusy] = 0.5 * min((user+sys+s.Job[sample.SchedWaitSeconds])/secs/n, 1.5)
		x[fSystem] = 0
		if user+sys > 0.05*secs {
			x[fSystem] = 0.5 * sys / (user + sys)
		}
		per = max(user+sys, 0.01*secs)
	}
	amount := func(name string, level float64, f int) {
		if v, ok := s.Job[name]; ok {
			x[f] = decades(v/per, level)
		}
	}
	amount(sample.ReadChars, 1<<20, fReadBytes)
	amount(sample.WriteChars, 1<<20, fWriteBytes)
	amount(sample.ReadSyscalls, 100, fReadCalls)
	amount(sample.WriteSyscalls, 100, fWriteCalls)
	amount("context-switches", 1000, fSwitches)
	if v, ok := s.FileOpens(); ok {
		x[fOpens] = decades(v*secs/per, 10)
	}
	if m := memOf(s); memPeak > 0 {
		x[fMem] = 0.5 * m / memPeak
		if prevMem >= 0 {
			x[fMemGrowth] = 0.5 * max(min((m-prevMem)/memPeak, 1), -1)
		}
	}
	if ins, ok := s.Job["instructions"]; ok {
		if cyc := s.Job["cycles"]; cyc > 0 {
			x[fIPC] = min(ins/cyc, 4) / 4
		}
	}
	if g := s.Job[sample.GPUs]; g > 0 {
		if b, ok := s.Job[sample.GPUBusySeconds]; ok {
			x[fGPU] = min(b/secs/g, 1)
		}
	}
	return x
}

// dropSparse keeps a feature only where at least 90 % of the intervals have it; the
// missing values of a kept feature are taken as 0.
func dropSparse(pts []point) {
	for f := 0; f < nFeatures; f++ {
		n := 0
		for _, p := range pts {
			if !math.IsNaN(p.x[f]) {
				n++
			}
		}
		keep := float64(n) >= 0.9*float64(len(pts))
		for _, p := range pts {
			if !keep || math.IsNaN(p.x[f]) {
				p.x[f] = 0
			}
		}
	}
}

func dist(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		d := a[i] - b[i]
		s += d * d
	}
	return math.Sqrt(s)
}

// minPoints is DBSCAN's MinPoints for n intervals: 3 for up to 150, growing to 10 for
// 500 and more (González found 4 to 10 best).
func minPoints(n int) int { return max(3, min(10, n/50)) }

// cluster labels each point with its cluster (0, 1, ...): DBSCAN, its noise joined to the
// cluster of the nearest core point, then clusters too small or too many merged.
// Distances are computed as needed, never kept (memory O(n), time O(n²)).
func cluster(pts []point) []int {
	n := len(pts)
	d := func(i, j int) float64 { return dist(pts[i].x, pts[j].x) }
	mp := minPoints(n)
	eps := Eps(n, d, mp)
	labels, core := dbscan(n, d, eps, mp)
	if len(core) == 0 {
		return make([]int, n) // no dense region: one behaviour, however noisy
	}
	for i := range labels {
		if labels[i] >= 0 {
			continue
		}
		best, bd := -1, math.Inf(1)
		for _, c := range core {
			if dd := d(i, c); dd < bd {
				best, bd = c, dd
			}
		}
		labels[i] = labels[best]
	}
	return merge(pts, labels)
}

// Eps is DBSCAN's radius for n points at distances d: the distance of each point to its
// (minPts−1)-th nearest neighbour, sorted in descending order, taken at the graph's knee
// (the point farthest below the chord from its first to its last value, both axes
// scaled to 1), bounded to [EpsMin, EpsMax].
func Eps(n int, d func(i, j int) float64, minPts int) float64 {
	k := minPts - 1
	if n <= k || k < 1 {
		return EpsMin
	}
	kd := make([]float64, n)
	row := make([]float64, n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			row[j] = d(i, j)
		}
		sort.Float64s(row)
		kd[i] = row[k] // row[0] is the point itself
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(kd)))
	top, bottom := kd[0], kd[n-1]
	if top-bottom <= 0 {
		return min(max(top, EpsMin), EpsMax)
	}
	best, at := -1.0, 0
	for i, v := range kd {
		x := float64(i) / float64(n-1)
		y := (v - bottom) / (top - bottom)
		if below := (1 - x) - y; below > best {
			best, at = below, i
		}
	}
	return min(max(kd[at], EpsMin), EpsMax)
}

// dbscan labels n points at distances d with clusters 0, 1, ... or -1 (noise), and
// returns the core points.
func dbscan(n int, d func(i, j int) float64, eps float64, minPts int) (labels, core []int) {
	labels = make([]int, n)
	isCore := make([]bool, n)
	for i := range labels {
		labels[i] = -1
		k := 0
		for j := 0; j < n && k < minPts; j++ {
			if d(i, j) <= eps {
				k++
			}
		}
		if k >= minPts {
			isCore[i] = true
			core = append(core, i)
		}
	}
	c := 0
	for _, i := range core {
		if labels[i] >= 0 {
			continue
		}
		labels[i] = c
		queue := []int{i}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if !isCore[p] {
				continue
			}
			for q := 0; q < n; q++ {
				if labels[q] < 0 && d(p, q) <= eps {
					labels[q] = c
					queue = append(queue, q)
				}
			}
		}
		c++
	}
	return labels, core
}

// merge joins clusters with less than MinShare of the time into the cluster whose
// centroid is nearest, and then the two nearest until at most MaxPhases remain; labels
// come back as 0, 1, ... in the order clusters first appear.
func merge(pts []point, labels []int) []int {
	for {
		secs, cent := centroids(pts, labels)
		total := 0.0
		for _, s := range secs {
			total += s
		}
		ids := make([]int, 0, len(secs))
		for id := range secs {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		if len(ids) <= 1 {
			break
		}
		from, into := -1, -1
		// The smallest cluster under MinShare joins its nearest.
		for _, id := range ids {
			if secs[id] < MinShare*total && (from < 0 || secs[id] < secs[from]) {
				from = id
			}
		}
		if from >= 0 {
			into = nearest(from, ids, cent)
		} else if len(ids) > MaxPhases {
			bd := math.Inf(1)
			for i, a := range ids {
				for _, b := range ids[i+1:] {
					if dd := dist(cent[a], cent[b]); dd < bd {
						bd, from, into = dd, b, a
					}
				}
			}
		}
		if from < 0 {
			break
		}
		for i := range labels {
			if labels[i] == from {
				labels[i] = into
			}
		}
	}
	// Renumber by first appearance.
	order := map[int]int{}
	for i, l := range labels {
		if _, ok := order[l]; !ok {
			order[l] = len(order)
		}
		labels[i] = order[l]
	}
	return labels
}

func centroids(pts []point, labels []int) (map[int]float64, map[int][]float64) {
	secs, cent, n := map[int]float64{}, map[int][]float64{}, map[int]int{}
	for i, p := range pts {
		l := labels[i]
		secs[l] += p.s.Seconds
		if cent[l] == nil {
			cent[l] = make([]float64, nFeatures)
		}
		for f, v := range p.x {
			cent[l][f] += v
		}
		n[l]++
	}
	for l, c := range cent {
		for f := range c {
			c[f] /= float64(n[l])
		}
	}
	return secs, cent
}

func nearest(from int, ids []int, cent map[int][]float64) int {
	best, bd := -1, math.Inf(1)
	for _, id := range ids {
		if id == from {
			continue
		}
		if dd := dist(cent[from], cent[id]); dd < bd {
			best, bd = id, dd
		}
	}
	return best
}

// contiguous says whether interval b follows a without a stretch between them that was
// not judged (the start-up, a suspension, a daemon restart).
func contiguous(a, b point) bool {
	return b.from.Sub(a.to).Abs() <= time.Second+time.Duration(0.1*b.s.Seconds*float64(time.Second))
}

// assemble makes the phases of labelled points.
func assemble(pts []point, labels []int, o Options) []Phase {
	total := 0.0
	for _, p := range pts {
		total += p.s.Seconds
	}
	nph := 0
	for _, l := range labels {
		nph = max(nph, l+1)
	}
	out := make([]Phase, nph)
	for i := range out {
		out[i].N = i + 1
	}
	for i, p := range pts {
		ph := &out[labels[i]]
		ph.Intervals++
		ph.Seconds += p.s.Seconds
		if k := len(ph.Stretches); k > 0 && labels[i-1] == labels[i] && contiguous(pts[i-1], p) {
			ph.Stretches[k-1].To = p.to
		} else {
			ph.Stretches = append(ph.Stretches, Stretch{From: p.from, To: p.to})
		}
	}
	_, cent := centroids(pts, labels)
	for i := range out {
		out[i].Share = out[i].Seconds / total
		out[i].Traits = traits(pts, labels, i, o.NCPUs)
		out[i].Centroid = cent[i]
	}
	return out
}

// traits are phase l's rates over its time.
func traits(pts []point, labels []int, l, ncpus int) Traits {
	var t Traits
	sum := map[string]float64{}
	secs, memSecs, cpuSecs, gpuSecs := 0.0, 0.0, 0.0, 0.0
	for i, p := range pts {
		if labels[i] != l {
			continue
		}
		s := p.s
		secs += s.Seconds
		for _, k := range []string{sample.CPUUserSeconds, sample.CPUSystemSeconds, sample.ReadChars, sample.WriteChars,
			sample.ReadSyscalls, sample.WriteSyscalls, sample.GPUBusySeconds, "instructions"} {
			sum[k] += s.Job[k]
		}
		if o, ok := s.FileOpens(); ok {
			sum["opens"] += o * s.Seconds
		}
		if m := memOf(s); m > 0 {
			sum["mem"] += m * s.Seconds
			memSecs += s.Seconds
		}
		if g := s.Job[sample.GPUs]; g > 0 {
			gpuSecs += g * s.Seconds
		}
		cpuSecs += float64(max(ncpus, 1)) * s.Seconds
	}
	if secs <= 0 {
		return t
	}
	cpu := sum[sample.CPUUserSeconds] + sum[sample.CPUSystemSeconds]
	t.CPUBusy = cpu / cpuSecs
	if cpu > 0 {
		t.SystemShare = sum[sample.CPUSystemSeconds] / cpu
	}
	t.ReadBytes, t.WriteBytes = sum[sample.ReadChars]/secs, sum[sample.WriteChars]/secs
	t.ReadCalls, t.WriteCalls = sum[sample.ReadSyscalls]/secs, sum[sample.WriteSyscalls]/secs
	t.Opens = sum["opens"] / secs
	t.Instructions = sum["instructions"] / secs
	if memSecs > 0 {
		t.MemBytes = sum["mem"] / memSecs
	}
	if gpuSecs > 0 {
		t.GPUBusy = sum[sample.GPUBusySeconds] / gpuSecs
	}
	return t
}
