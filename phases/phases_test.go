package phases_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/sample"
)

// Synthetic jobs: runs of intervals of known behaviours, each value varied by up to ±5 %
// (a fixed seed), so that the phases found can be checked against the phases made.

// behaviour is what a job does per second of one interval, on one CPU.
type behaviour map[string]float64

var (
	compute = behaviour{sample.CPUUserSeconds: 0.98, sample.CPUSystemSeconds: 0.01, "context-switches": 40,
		sample.MemAnonBytes: 1 << 30, sample.ReadChars: 1000, sample.WriteChars: 200, sample.ReadSyscalls: 2, sample.WriteSyscalls: 1}
	smallWrites = behaviour{sample.CPUUserSeconds: 0.35, sample.CPUSystemSeconds: 0.6, "context-switches": 60,
		sample.MemAnonBytes: 1 << 28, sample.WriteChars: 5e6, sample.WriteSyscalls: 50000, sample.ReadChars: 100, sample.ReadSyscalls: 1}
	reading = behaviour{sample.CPUUserSeconds: 0.15, sample.CPUSystemSeconds: 0.35, "context-switches": 900,
		sample.MemAnonBytes: 1 << 29, sample.ReadChars: 2e8, sample.ReadSyscalls: 200, sample.WriteChars: 100, sample.WriteSyscalls: 1}
	opening = behaviour{sample.CPUUserSeconds: 0.3, sample.CPUSystemSeconds: 0.6, "context-switches": 100,
		sample.MemAnonBytes: 1 << 28, "syscalls:sys_enter_openat": 20000, sample.ReadChars: 4e6, sample.ReadSyscalls: 40000}
)

// with returns b changed by kv.
func (b behaviour) with(kv ...any) behaviour {
	out := behaviour{}
	for k, v := range b {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1].(float64)
	}
	return out
}

type run struct {
	b behaviour
	n int
}

const interval = 60 * time.Second

var t0 = time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)

// job makes the samples of runs, one interval each, from t0 on, each value varied by up
// to ±5 %.
func job(seed uint64, runs ...run) []sample.Sample { return jobNoise(seed, 0.1, runs...) }

// jobNoise is job with values varied by up to ±noise/2.
func jobNoise(seed uint64, noise float64, runs ...run) []sample.Sample {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []sample.Sample
	t := t0
	for _, r := range runs {
		for i := 0; i < r.n; i++ {
			t = t.Add(interval)
			s := sample.Sample{Time: t, Reason: sample.Cycle, Seconds: interval.Seconds(), Job: map[string]float64{}}
			for k, v := range r.b {
				v *= 1 + noise*(rng.Float64()-0.5)
				if sample.KindOf(k) == sample.Counter {
					v *= interval.Seconds()
				}
				s.Job[k] = v
			}
			out = append(out, s)
		}
	}
	return out
}

// at is the time i intervals after t0.
func at(i int) time.Time { return t0.Add(time.Duration(i) * interval) }

func TestFind(t *testing.T) {
	type want struct {
		n         int
		stretches [][2]int // interval indices: from, to
	}
	neighbour := compute.with(sample.CPUUserSeconds, 0.49, sample.SchedWaitSeconds, 0.5)
	for _, tc := range []struct {
		name string
		runs []run
		want []want
	}{
		{"one behaviour", []run{{compute, 60}}, []want{{1, [][2]int{{0, 60}}}}},
		{"small writes, then computing", []run{{smallWrites, 15}, {compute, 45}},
			[]want{{1, [][2]int{{0, 15}}}, {2, [][2]int{{15, 60}}}}},
		{"computing, reading, computing again", []run{{compute, 20}, {reading, 20}, {compute, 20}},
			[]want{{1, [][2]int{{0, 20}, {40, 60}}}, {2, [][2]int{{20, 40}}}}},
		{"three behaviours", []run{{opening, 12}, {compute, 30}, {smallWrites, 18}},
			[]want{{1, [][2]int{{0, 12}}}, {2, [][2]int{{12, 42}}}, {3, [][2]int{{42, 60}}}}},
		{"a blip is no phase", []run{{compute, 30}, {smallWrites, 2}, {compute, 30}},
			[]want{{1, [][2]int{{0, 62}}}}},
		{"too short for phases", []run{{smallWrites, 3}, {compute, 4}},
			[]want{{1, [][2]int{{0, 7}}}}},
		{"a neighbour taking half the CPU is no phase", []run{{compute, 20}, {neighbour, 20}, {compute, 20}},
			[]want{{1, [][2]int{{0, 60}}}}},
		{"an idle stretch", []run{{compute, 20}, {compute.with(sample.CPUUserSeconds, 0.01, "context-switches", 2.0), 20}},
			[]want{{1, [][2]int{{0, 20}}}, {2, [][2]int{{20, 40}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := phases.Find(job(1, tc.runs...), phases.Options{NCPUs: 1})
			var gotW []want
			for _, p := range got {
				w := want{n: p.N}
				for _, s := range p.Stretches {
					w.stretches = append(w.stretches, [2]int{int(s.From.Sub(t0) / interval), int(s.To.Sub(t0) / interval)})
				}
				gotW = append(gotW, w)
			}
			if diff := cmp.Diff(tc.want, gotW, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("phases (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFindNoisy: an I/O job whose read rate swings by a factor of ten from interval to
// interval is one behaviour.
func TestFindNoisy(t *testing.T) {
	s := job(2, run{reading, 60})
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range s {
		f := 0.1 + 0.9*rng.Float64()
		s[i].Job[sample.ReadChars] *= f
		s[i].Job[sample.ReadSyscalls] *= f
	}
	if got := phases.Find(s, phases.Options{NCPUs: 1}); len(got) != 1 {
		t.Errorf("found %d phases, want 1: %+v", len(got), got)
	}
}

// TestFindJudged: intervals not judged (start-up, suspension) belong to no phase, and a
// stretch does not run across them.
func TestFindJudged(t *testing.T) {
	s := job(4, run{compute, 30})
	skip := func(x sample.Sample) bool { return x.Time.After(at(10)) && !x.Time.After(at(15)) }
	got := phases.Find(s, phases.Options{NCPUs: 1, Judged: func(x sample.Sample) bool { return !skip(x) }})
	want := []phases.Stretch{{From: at(0), To: at(10)}, {From: at(15), To: at(30)}}
	if len(got) != 1 {
		t.Fatalf("found %d phases, want 1", len(got))
	}
	if diff := cmp.Diff(want, got[0].Stretches); diff != "" {
		t.Errorf("stretches (-want +got):\n%s", diff)
	}
	if got[0].Intervals != 25 || got[0].Seconds != 25*interval.Seconds() || got[0].Share != 1 {
		t.Errorf("phase %+v: want 25 intervals, all the judged time", got[0])
	}
}

func TestTraits(t *testing.T) {
	got := phases.Find(job(5, run{smallWrites, 15}, run{compute, 45}), phases.Options{NCPUs: 1})
	if len(got) != 2 {
		t.Fatalf("found %d phases, want 2", len(got))
	}
	w := got[0].Traits
	if w.CPUBusy < 0.9 || w.CPUBusy > 1 || w.WriteCalls < 45000 || w.WriteCalls > 55000 || w.SystemShare < 0.55 || w.SystemShare > 0.7 {
		t.Errorf("small-writes phase traits %+v", w)
	}
	if c := got[1].Traits; c.CPUBusy < 0.95 || c.WriteCalls > 2 {
		t.Errorf("computing phase traits %+v", c)
	}
	if s := got[0].Share + got[1].Share; s < 0.999 || s > 1.001 {
		t.Errorf("shares add up to %v", s)
	}
}

// TestFindLong: a job of more intervals than are clustered at once is clustered at a
// coarser resolution, and its boundaries found to within that resolution.
func TestFindLong(t *testing.T) {
	got := phases.Find(job(6, run{smallWrites, 1500}, run{compute, 3000}), phases.Options{NCPUs: 1})
	if len(got) != 2 || len(got[0].Stretches) != 1 {
		t.Fatalf("phases %+v, want 2", got)
	}
	// 4500 intervals are clustered 8 at a time (4500 → 563 points).
	if b := got[0].Stretches[0].To; b.Before(at(1500-8)) || b.After(at(1500+8)) {
		t.Errorf("boundary at %v, want 1500 ± 8", b.Sub(t0)/interval)
	}
}

func TestEps(t *testing.T) {
	// Two tight groups far apart: the knee lies at the groups' own spread, raised to
	// EpsMin.
	pts := []float64{0, 0.01, 0.02, 0.03, 0.04, 5, 5.01, 5.02, 5.03, 5.04}
	scale := 1.0
	d := func(i, j int) float64 { return scale * max(pts[i]-pts[j], pts[j]-pts[i]) }
	if got := phases.Eps(len(pts), d, 3); got != phases.EpsMin {
		t.Errorf("Eps = %v, want %v", got, phases.EpsMin)
	}
	// Spread wider than EpsMax: bounded.
	scale = 100
	if got := phases.Eps(len(pts), d, 3); got != phases.EpsMax {
		t.Errorf("Eps = %v, want %v", got, phases.EpsMax)
	}
	// Between the bounds: the knee of an evenly spread line of points is its spacing.
	pts = []float64{0, 0.3, 0.6, 0.9, 1.2, 1.5, 1.8, 2.1, 2.4, 2.7}
	scale = 1
	if got := phases.Eps(len(pts), d, 3); got < phases.EpsMin || got > phases.EpsMax {
		t.Errorf("Eps = %v, want within [%v, %v]", got, phases.EpsMin, phases.EpsMax)
	}
}
