package phases

import (
	"math"
	"sort"
	"time"

	"github.com/persyst/persyst/sample"
)

// Interference is the time a job lost on a node to work outside it.
type Interference struct {
	// Seconds is the judged time on the node; Assessed the part of it in phases whose
	// progress could be judged (NotAssessed says why none could).
	Seconds     float64 `json:"seconds"`
	Assessed    float64 `json:"assessed_seconds"`
	NotAssessed string  `json:"not_assessed,omitempty"`
	// LostSeconds is the time lost; Share its part of Seconds; Class Shah's: low
	// (< 7.5 %), medium, high (> 15 %).
	LostSeconds float64 `json:"lost_seconds"`
	Share       float64 `json:"share"`
	Class       string  `json:"class"`
	// Intervals were interfered; Causes says by what, most time lost first; Worst is the
	// stretch of consecutive interfered intervals that lost the most.
	Intervals int      `json:"intervals"`
	Causes    []Cause  `json:"causes,omitempty"`
	Worst     *Stretch `json:"worst,omitempty"`
	// Throttled is the time lost in slow intervals the job's own CPU quota throttled:
	// the scheduler's limit, not interference.
	Throttled float64 `json:"throttled_seconds,omitempty"`
}

// Cause is one outside cause of lost time.
type Cause struct {
	Key         string  `json:"key"` // CauseCPU, CauseIO, CauseMemory
	LostSeconds float64 `json:"lost_seconds"`
}

// Causes of interference.
const (
	CauseCPU    = "cpu"    // other work on the job's CPUs
	CauseIO     = "io"     // the node's I/O pressure
	CauseMemory = "memory" // the node's memory pressure
)

// Interference classes (Shah): a low-interference run measures the code; a high one
// mostly the system.
const (
	LowBelow  = 0.075
	HighAbove = 0.15
)

// The rules' numbers.
const (
	// madFactor: an interval is slow below median − madFactor·MAD ...
	madFactor = 4
	// minDrop: ... and at least this share below the median (a steady job's MAD is ~0).
	minDrop = 0.05
	// minPhaseIntervals: a phase with fewer intervals has no robust median.
	minPhaseIntervals = 5
	// causeShare: an outside cause shows when it takes at least this share of the
	// interval (of the job's CPUs, or of the time for pressure) ...
	causeShare = 0.1
	// causeAbove: ... and that much more than in the phase's typical interval.
	causeAbove = 0.05
	// cpuFull: other work on the job's CPUs slows it only when, with the job's own, it
	// filled them.
	cpuFull = 0.9
	// minCPUProgress and minIOProgress: a phase's progress is its CPU time when its
	// median is at least minCPUProgress CPUs busy, else the bytes it moved when at least
	// minIOProgress a second; a phase with neither waits, and its progress is not judged.
	minCPUProgress = 0.25
	minIOProgress  = 1 << 20
	// ioPhaseBusy: a phase moving data whose CPUs are less busy than this is an I/O phase.
	ioPhaseBusy = 0.75
	// ownIOAbove: the node's I/O stall is not an outside cause in an interval where the
	// job moved more than this times its usual (and 1 MiB/s more): its own I/O (a
	// checkpoint) stalled it. ownGrowth: nor the node's memory stall where the job's own
	// memory grew by more than this share of its peak.
	ownIOAbove = 1.5
	ownGrowth  = 0.05
)

// Class returns the interference class of a lost share.
func Class(share float64) string {
	switch {
	case share < LowBelow:
		return "low"
	case share <= HighAbove:
		return "medium"
	}
	return "high"
}

// slow is one interfered interval.
type slow struct {
	from, to time.Time
	lost     float64
}

// FindInterference judges each phase's intervals (Find's phases of the same samples and
// options) for interference.
func FindInterference(samples []sample.Sample, phases []Phase, o Options) Interference {
	return interference(points(samples, o), phases, o)
}

// interference is FindInterference on the judged intervals (points) of the samples.
func interference(pts []point, phases []Phase, o Options) Interference {
	var in Interference
	for _, p := range pts {
		in.Seconds += p.s.Seconds
	}
	if len(pts) == 0 {
		in.NotAssessed = "no judged interval"
		in.Class = Class(0)
		return in
	}
	// Each interval's lost time and its cause: episodes first (slow for its phase, with
	// an outside cause), then other work on the job's CPUs, which slows it in every
	// interval it is there (its share of the waiting) and so may not move the median.
	v := newVerdicts(len(pts))
	why := ""
	for _, ph := range phases {
		// Why none could be judged: a phase of too few intervals outweighs one that waited.
		if r := v.judgePhase(pts, ph, o.NCPUs); r == tooFewIntervals || r != "" && why == "" {
			why = r
		}
	}
	v.judgeWaits(pts, o.NCPUs)
	in.Throttled = v.throttledSecs
	v.tally(pts, &in)
	if in.Assessed == 0 {
		in.NotAssessed = why
	}
	if in.Seconds > 0 {
		in.Share = in.LostSeconds / in.Seconds
	}
	in.Class = Class(in.Share)
	return in
}

// Why a phase's intervals could not be judged.
const (
	tooFewIntervals = "too few intervals in a phase for a robust median"
	mostlyWaited    = "the job mostly waited: no progress to judge"
)

// verdicts are what was found of each interval of a job (by its index): the time it
// lost to work outside the job and to what (lost 0: none), whether its progress was
// judged, and whether its own CPU quota throttled it; throttledSecs is the time the slow
// throttled intervals lost (the scheduler's limit, not interference).
type verdicts struct {
	lost          []float64
	cause         []string
	assessed      []bool
	throttled     []bool
	throttledSecs float64
}

func newVerdicts(n int) verdicts {
	return verdicts{lost: make([]float64, n), cause: make([]string, n), assessed: make([]bool, n), throttled: make([]bool, n)}
}

// judgePhase judges the intervals of one phase against the phase's own progress: an
// interval slower than its phase's typical one (slowBelow) lost the difference, to the
// outside cause that shows most in it (outsideCause); slow with none showing, it was the
// job's own doing. It returns why the phase could not be judged ("" when it was).
func (v *verdicts) judgePhase(pts []point, ph Phase, ncpus int) string {
	idx := inPhase(pts, ph)
	if len(idx) < minPhaseIntervals {
		return tooFewIntervals
	}
	prog := progress(pts, idx, ncpus)
	if prog == nil {
		return mostlyWaited
	}
	for _, i := range idx {
		v.assessed[i] = true
	}
	thr := slowBelow(prog)
	if thr <= 0 {
		return ""
	}
	sig := signals(pts, idx, ncpus)
	typical := map[string]float64{}
	for k, x := range sig {
		typical[k] = median(x)
	}
	for n, i := range idx {
		if sig["throttled"][n] >= causeShare {
			v.throttled[i] = true
		}
		if prog[n] >= thr {
			continue
		}
		lost := pts[i].s.Seconds * (1 - prog[n]/thr)
		if v.throttled[i] {
			v.throttledSecs += lost
			continue
		}
		if cause := outsideCause(sig, typical, n); cause != "" {
			v.lost[i], v.cause[i] = lost, cause
		}
		// else slow, but nothing outside shows: the job's own doing
	}
	return ""
}

// slowBelow is the progress rate below which an interval of a phase is slow: madFactor
// MADs below the phase's median, and at least minDrop of it.
func slowBelow(prog []float64) float64 {
	med := median(prog)
	dev := make([]float64, len(prog))
	for i, x := range prog {
		dev[i] = math.Abs(x - med)
	}
	return med - max(madFactor*median(dev), minDrop*med)
}

// outsideCause is the outside cause that shows most in interval n of a phase: of those
// that take at least causeShare of it and causeAbove more than in the phase's typical
// interval, the one furthest above; "" when none does. The node's I/O stall is not one
// where the job's own I/O was well above its usual, nor the memory stall where its own
// memory grew.
func outsideCause(sig map[string][]float64, typical map[string]float64, n int) string {
	cause, excess := "", 0.0
	for _, k := range []string{CauseCPU, CauseIO, CauseMemory} {
		v := sig[k][n]
		switch {
		case k == CauseIO && sig["own_io"][n] > ownIOAbove*typical["own_io"]+minIOProgress:
			continue // the job's own I/O: more than it usually did
		case k == CauseMemory && sig["own_growth"][n] > ownGrowth:
			continue // the job's own memory growing
		}
		if v >= causeShare && v-typical[k] >= causeAbove && v-typical[k] > excess {
			cause, excess = k, v-typical[k]
		}
	}
	return cause
}

// judgeWaits charges each interval the time its threads waited for other work on its
// CPUs (waitedForOthers), where that is more than it lost otherwise; not where its own
// CPU quota throttled it: then the wait is the scheduler's limit.
func (v *verdicts) judgeWaits(pts []point, ncpus int) {
	for i, p := range pts {
		if v.throttled[i] || p.s.Job[sample.CPUThrottledSecs] >= causeShare*p.s.Seconds {
			continue // its own quota: the wait is the scheduler's limit
		}
		if c := waitedForOthers(p.s, ncpus); c > v.lost[i] {
			v.lost[i], v.cause[i], v.assessed[i] = c, CauseCPU, true
		}
	}
}

// tally adds the verdicts up into in: the time assessed, the time lost and the intervals
// that lost it, the causes (most time lost first), and the worst stretch.
func (v *verdicts) tally(pts []point, in *Interference) {
	var slows []slow
	causes := map[string]float64{}
	for i, p := range pts {
		if v.assessed[i] {
			in.Assessed += p.s.Seconds
		}
		if v.lost[i] <= 0 {
			continue
		}
		causes[v.cause[i]] += v.lost[i]
		in.LostSeconds += v.lost[i]
		in.Intervals++
		slows = append(slows, slow{from: p.from, to: p.to, lost: v.lost[i]})
	}
	for k, lost := range causes {
		in.Causes = append(in.Causes, Cause{Key: k, LostSeconds: lost})
	}
	sort.Slice(in.Causes, func(i, j int) bool {
		if in.Causes[i].LostSeconds != in.Causes[j].LostSeconds {
			return in.Causes[i].LostSeconds > in.Causes[j].LostSeconds
		}
		return in.Causes[i].Key < in.Causes[j].Key
	})
	in.Worst = worst(slows)
}

// waitedForOthers is the time a job lost in an interval to other work on its CPUs:
// where that work could slow it (othersOnCPUs) and took at least causeShare of them,
// the job's threads waited on a run queue for a CPU, at most as long
// as the others ran. Alone, its runnable threads would have run then: the interval's
// work would have taken that wait less, spread over the threads that were runnable
// (their CPU time and wait over the interval, at least one). 0 where the wait is not
// measured.
func waitedForOthers(s sample.Sample, ncpus int) float64 {
	wait, ok := s.Job[sample.SchedWaitSeconds]
	if !ok || s.Seconds <= 0 {
		return 0
	}
	others := othersOnCPUs(s, ncpus)
	if others < causeShare {
		return 0
	}
	own := s.Job[sample.CPUUserSeconds] + s.Job[sample.CPUSystemSeconds]
	runnable := max((own+wait)/s.Seconds, 1)
	return min(min(wait, others*s.Seconds*float64(max(ncpus, 1)))/runnable, s.Seconds)
}

// othersOnCPUs is the share of the job's CPUs that other work used in an interval,
// counted where it could slow the job: where, with the job's own, it filled them
// (cpuFull), or where the job had work for them all (a busy thread per CPU, as
// cpu_starved judges: its threads then waited because others ran). A node's own reading
// of its CPUs' busy time can fall short of full with four busy threads on two (an
// emulated node read 87 %), while the job's threads wait all the same. 0 where the
// CPUs' busy time is not measured.
func othersOnCPUs(s sample.Sample, ncpus int) float64 {
	busy, ok := s.Job[sample.NodeCPUsBusySeconds]
	if !ok || s.Seconds <= 0 {
		return 0
	}
	capacity := s.Seconds * float64(max(ncpus, 1))
	own := s.Job[sample.CPUUserSeconds] + s.Job[sample.CPUSystemSeconds]
	if busy/capacity < cpuFull && s.Job[sample.SchedBusyThreadSeconds] < cpuFull*capacity {
		return 0
	}
	return max(busy-own, 0) / capacity
}

// inPhase returns the indices of the points that lie in a phase's stretches.
func inPhase(pts []point, ph Phase) []int {
	var idx []int
	for i, p := range pts {
		if ph.Contains(p.s) {
			idx = append(idx, i)
		}
	}
	return idx
}

// progress is the progress rate of each interval of a phase. An I/O phase (at least
// minIOProgress moved a second, its CPUs less than ioPhaseBusy busy) progresses by the
// bytes it moves; another by the instructions it retires where a PMU counted them in
// every interval, else by the CPU time it gets when that is at least minCPUProgress CPUs.
// nil: none fits (the phase waited).
func progress(pts []point, idx []int, ncpus int) []float64 {
	rates := func(f func(s sample.Sample) (float64, bool)) []float64 {
		out := make([]float64, 0, len(idx))
		for _, i := range idx {
			v, ok := f(pts[i].s)
			if !ok {
				return nil
			}
			out = append(out, v)
		}
		return out
	}
	cpu := rates(func(s sample.Sample) (float64, bool) {
		u, uok := s.Rate(sample.CPUUserSeconds)
		sy, sok := s.Rate(sample.CPUSystemSeconds)
		return u + sy, uok || sok
	})
	bytes := rates(func(s sample.Sample) (float64, bool) {
		rd, rok := s.Rate(sample.ReadChars)
		wr, wok := s.Rate(sample.WriteChars)
		return rd + wr, rok || wok
	})
	ioPhase := bytes != nil && median(bytes) >= minIOProgress
	if ioPhase && (cpu == nil || median(cpu) < ioPhaseBusy*float64(max(ncpus, 1))) {
		return bytes
	}
	if r := rates(func(s sample.Sample) (float64, bool) { return s.Rate("instructions") }); r != nil && median(r) > 0 {
		return r
	}
	if cpu != nil && median(cpu) >= minCPUProgress {
		return cpu
	}
	if ioPhase {
		return bytes
	}
	return nil
}

// signals are the outside causes' shares in each interval of a phase: other work on
// the job's CPUs (counted only where it could slow the job: othersOnCPUs), the node's
// I/O and memory stall; and what would make them the job's own: its quota throttling,
// its I/O rate (the node's I/O stall counts the job's own), its memory growth.
func signals(pts []point, idx []int, ncpus int) map[string][]float64 {
	out := map[string][]float64{}
	peak := 0.0
	for _, p := range pts {
		peak = max(peak, memOf(p.s))
	}
	for _, i := range idx {
		s := pts[i].s
		growth := 0.0
		if i > 0 && peak > 0 {
			growth = (memOf(s) - memOf(pts[i-1].s)) / peak
		}
		out["own_growth"] = append(out["own_growth"], growth)
		out["own_io"] = append(out["own_io"], (s.Job[sample.ReadChars]+s.Job[sample.WriteChars])/s.Seconds)
		secs := s.Seconds
		out[CauseCPU] = append(out[CauseCPU], othersOnCPUs(s, ncpus))
		out[CauseIO] = append(out[CauseIO], s.Job[sample.NodeIOPressureSeconds]/secs)
		out[CauseMemory] = append(out[CauseMemory], s.Job[sample.NodeMemPressureSeconds]/secs)
		out["throttled"] = append(out["throttled"], s.Job[sample.CPUThrottledSecs]/secs)
	}
	return out
}

// worst is the run of consecutive slow intervals that lost the most time.
func worst(slows []slow) *Stretch {
	if len(slows) == 0 {
		return nil
	}
	sort.Slice(slows, func(i, j int) bool { return slows[i].from.Before(slows[j].from) })
	var best *Stretch
	bestLost := -1.0
	cur, lost := Stretch{From: slows[0].from, To: slows[0].to}, slows[0].lost
	flush := func() {
		if lost > bestLost {
			c := cur
			best, bestLost = &c, lost
		}
	}
	for _, s := range slows[1:] {
		if s.from.Sub(cur.To).Abs() <= time.Second+time.Duration(0.1*s.to.Sub(s.from).Seconds()*float64(time.Second)) {
			cur.To, lost = s.to, lost+s.lost
			continue
		}
		flush()
		cur, lost = Stretch{From: s.from, To: s.to}, s.lost
	}
	flush()
	return best
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
