package measure

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon/measure/syscount"
	"github.com/persyst/persyst/sample"
)

// TestSyscallsInterval: a job's calls in an interval are those counted whole (every call
// of their time, never scaled), those counted in sampled windows, and, for the time not
// counted, the windows' calls scaled to it (faster by what counting cost them), by the
// wall clock or, where the job's CPU time is split by how its calls were counted, by that,
// else the rate per CPU-second of the last windows, else nothing: the calls counted,
// flagged.
func TestSyscallsInterval(t *testing.T) {
	const openat = "syscalls:sys_enter_openat"
	// interval is one read's: how long since the last, how long the programs counted
	// whole and in windows, the calls counted so on CPUs 0 and 1, and the job's CPU
	// seconds there.
	// With split, the job's CPU seconds split by how its calls were counted: in the
	// windows (cpuSampled) and not at all (cpuOff).
	type interval struct {
		wall, whole, sampled float64
		wholeCalls, inWindow [2]uint64
		busy                 [2]float64
		split                bool
		cpuSampled, cpuOff   float64
	}
	type want struct {
		calls float64 // NaN: not measured
		low   bool    // flagged as low coverage
		cpu0  float64 // CPU 0's calls (0: not looked at)
	}
	for _, tc := range []struct {
		name      string
		cost      time.Duration
		intervals []interval // the last is judged
		want      want
	}{
		{name: "every call counted",
			intervals: []interval{{wall: 1, whole: 1, wholeCalls: [2]uint64{600, 400}, busy: [2]float64{1, 1}}},
			want:      want{calls: 1000}},
		{name: "a burst counted whole, then a quiet job in windows: not scaled (CI: 94,657 of 10,030)",
			intervals: []interval{{wall: 1, whole: 0.1, sampled: 0.25, wholeCalls: [2]uint64{10000, 0}, busy: [2]float64{0.05, 0}}},
			want:      want{calls: 10000, low: true}},
		{name: "a steady storm in windows of a quarter",
			intervals: []interval{{wall: 1, sampled: 0.25, inWindow: [2]uint64{250, 0}, busy: [2]float64{1, 0}}},
			want:      want{calls: 1000, low: true}},
		{name: "the calls between the windows faster by what counting cost",
			cost:      100 * time.Microsecond, // 250 calls took 25 ms of the windows' 250 ms
			intervals: []interval{{wall: 1, sampled: 0.25, inWindow: [2]uint64{250, 0}, busy: [2]float64{1, 0}}},
			want:      want{calls: 250 + 250*3/0.9, low: true}},
		{name: "a burst counted whole, then a storm in windows",
			intervals: []interval{{wall: 1, whole: 0.1, sampled: 0.25, wholeCalls: [2]uint64{5000, 0}, inWindow: [2]uint64{250, 0}, busy: [2]float64{1, 0}}},
			want:      want{calls: 5000 + 250*(1+0.65/0.25), low: true}},
		{name: "no window in a short interval: the last windows' rate per CPU-second",
			intervals: []interval{
				{wall: 1, sampled: 0.25, inWindow: [2]uint64{250, 0}, busy: [2]float64{1, 0}}, // 1000 a CPU-second between windows
				{wall: 0.2, busy: [2]float64{0.1, 0.1}},
			},
			want: want{calls: 200, low: true}},
		{name: "no window and no rate yet: the calls counted, flagged",
			intervals: []interval{{wall: 1, whole: 0.3, wholeCalls: [2]uint64{300, 0}, busy: [2]float64{1, 0}}},
			want:      want{calls: 300, low: true}},
		{name: "nothing counted and no rate: not measured",
			intervals: []interval{{wall: 1, busy: [2]float64{1, 0}}},
			want:      want{calls: math.NaN()}},
		{name: "by CPU time: a burst that ends between two windows, then a sleep (by the wall clock: 2,000)",
			intervals: []interval{{wall: 2, sampled: 0.25, inWindow: [2]uint64{250, 0}, busy: [2]float64{1, 0},
				split: true, cpuSampled: 0.25, cpuOff: 0.75}},
			want: want{calls: 1000, low: true}},
		{name: "by CPU time: the calls between the windows faster by what counting cost",
			cost: 100 * time.Microsecond, // 250 calls took 25 ms of the windows' 250 ms of CPU
			intervals: []interval{{wall: 2, sampled: 0.25, inWindow: [2]uint64{250, 0}, busy: [2]float64{1, 0},
				split: true, cpuSampled: 0.25, cpuOff: 0.75}},
			want: want{calls: 250 + 250*0.75/0.225, low: true}},
		{name: "by CPU time: none spent uncounted, nothing to estimate",
			intervals: []interval{{wall: 1, whole: 0.5, sampled: 0.1, wholeCalls: [2]uint64{500, 0}, busy: [2]float64{0.6, 0},
				split: true, cpuSampled: 0.1, cpuOff: 0.00005}},
			want: want{calls: 500}},
		{name: "by CPU time: no window's CPU time, the last windows' rate per CPU-second",
			intervals: []interval{
				{wall: 1, sampled: 0.25, inWindow: [2]uint64{250, 0}, busy: [2]float64{1, 0}, split: true, cpuSampled: 0.25, cpuOff: 0.75},
				{wall: 1, sampled: 0.25, busy: [2]float64{0.1, 0.1}, split: true, cpuOff: 0.2},
			},
			want: want{calls: 200, low: true}},
		{name: "counted on each CPU: each CPU's own",
			intervals: []interval{{wall: 1, sampled: 0.5, inWindow: [2]uint64{100, 300}, busy: [2]float64{1, 1}}},
			want:      want{calls: 800, cpu0: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &syscallsSource{names: []string{openat}, cpus: []int{0, 1}, filesWhy: "not counted apart here"}
			now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
			var att syscount.Attached
			var split syscount.CPUSplit
			cur := make([]syscount.Counts, 2)
			var smp sample.Sample
			var r *Read
			read := func(iv interval) {
				smp = sample.Sample{Job: map[string]float64{"task-clock": (iv.busy[0] + iv.busy[1]) * 1e9}}
				for cpu, b := range iv.busy {
					smp.CPU = append(smp.CPU, sample.CPUValues{CPU: cpu, Values: map[string]float64{"task-clock": b * 1e9}})
				}
				r = &Read{Sample: &smp, Spec: &Spec{Name: "job"}, notes: map[string]string{}}
				s.interval(r, reading{now: now, att: att, split: split, hasSplit: iv.split, counts: slices.Clone(cur)}, tc.cost)
			}
			read(interval{split: tc.intervals[0].split}) // the first read: where the counts start
			for _, iv := range tc.intervals {
				split.Sampled += time.Duration(iv.cpuSampled * float64(time.Second))
				split.Off += time.Duration(iv.cpuOff * float64(time.Second))
				now = now.Add(time.Duration(iv.wall * float64(time.Second)))
				att.Whole += time.Duration(iv.whole * float64(time.Second))
				att.Sampled += time.Duration(iv.sampled * float64(time.Second))
				for cpu := range cur {
					cur[cpu].Whole[0] += iv.wholeCalls[cpu]
					cur[cpu].Sampled[0] += iv.inWindow[cpu]
				}
				read(iv)
			}
			got, measured := smp.Job[openat]
			if math.IsNaN(tc.want.calls) {
				if measured || r.notes[openat] == "" {
					t.Errorf("calls = %v (measured %v), note %q; want not measured, with why", got, measured, r.notes[openat])
				}
				return
			}
			if !measured || math.Abs(got-tc.want.calls) > 1e-6*tc.want.calls {
				t.Errorf("calls = %v (measured %v, note %q), want %v", got, measured, r.notes[openat], tc.want.calls)
			}
			low := slices.Contains(smp.LowCoverage, openat+"@sampled")
			if low != tc.want.low {
				t.Errorf("flagged as low coverage: %v, want %v (%v)", low, tc.want.low, smp.LowCoverage)
			}
			if got := smp.CPU[0].Values[openat]; tc.want.cpu0 != 0 && got != tc.want.cpu0 {
				t.Errorf("CPU 0's calls = %v, want %v", got, tc.want.cpu0)
			}
		})
	}
}
