package phases_test

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/sample"
)

// alone is a job computing on its one CPU with nothing else there but a daemon's 1 %.
var alone = compute.with(sample.NodeCPUsBusySeconds, 1.0, sample.NodeIOPressureSeconds, 0.0, sample.NodeMemPressureSeconds, 0.0)

func TestInterference(t *testing.T) {
	// A neighbour on the job's CPU: the job gets half of it, waits the other half.
	shared := alone.with(sample.CPUUserSeconds, 0.49, sample.SchedWaitSeconds, 0.5)
	// The job's own CPU quota: half the time throttled, the CPU otherwise idle.
	throttled := alone.with(sample.CPUUserSeconds, 0.49, sample.CPUThrottledSecs, 0.5, sample.NodeCPUsBusySeconds, 0.5)
	// Slower with nothing outside to show for it: the job's own doing.
	ownDoing := alone.with(sample.CPUUserSeconds, 0.49, sample.NodeCPUsBusySeconds, 0.5)
	// A reader whose file system slowed to a quarter while the node stalled on I/O: it
	// reads, calls and switches a quarter as often, in the same pieces.
	reader := reading.with(sample.NodeCPUsBusySeconds, 0.5, sample.NodeIOPressureSeconds, 0.02, sample.NodeMemPressureSeconds, 0.0)
	congested := reader.with(sample.ReadChars, 5e7, sample.ReadSyscalls, 50.0, "context-switches", 225.0,
		sample.CPUUserSeconds, 0.05, sample.CPUSystemSeconds, 0.1, sample.NodeIOPressureSeconds, 0.7)
	type want struct {
		intervals int
		share     float64 // ± 0.01
		class     string
		causes    []string
		worst     [2]int
	}
	for _, tc := range []struct {
		name string
		runs []run
		want want
	}{
		{"alone", []run{{alone, 60}}, want{class: "low"}},
		// 15 of 60 intervals at 0.5 CPUs of 0.99: slower than the phase's threshold (95 %
		// of the median; the MAD is far smaller) by 1 − 0.5/(0.95·0.99) of the time, and
		// waiting half of it for the CPU the neighbour had: each loses the larger, 0.5.
		{"a neighbour half-way", []run{{alone, 20}, {shared, 15}, {alone, 25}},
			want{intervals: 15, share: 15 * 0.5 / 60, class: "medium", causes: []string{"cpu"}, worst: [2]int{20, 35}}},
		{"a neighbour for longer", []run{{alone, 20}, {shared, 25}, {alone, 25}},
			want{intervals: 25, share: 25 * 0.5 / 70, class: "high", causes: []string{"cpu"}, worst: [2]int{20, 45}}},
		// A neighbour there all along sets the median: no interval is slow for the
		// phase, but in each the job waited half the time for the CPU the neighbour had.
		{"a neighbour all along", []run{{shared, 60}},
			want{intervals: 60, share: 0.5, class: "high", causes: []string{"cpu"}, worst: [2]int{0, 60}}},
		// Its own four busy threads on one CPU wait 3/4 of the time, with nobody else.
		{"its own threads waiting is no interference", []run{{alone.with(sample.SchedWaitSeconds, 3.0), 60}}, want{class: "low"}},
		{"its own CPU quota is no interference", []run{{alone, 20}, {throttled, 15}, {alone, 25}}, want{class: "low"}},
		{"slow with no outside cause", []run{{alone, 20}, {ownDoing, 15}, {alone, 25}}, want{class: "low"}},
		// A computing job that writes a checkpoint, stalling the node on its own I/O.
		{"its own checkpoint is no interference", []run{{alone, 30}, {alone.with(sample.CPUUserSeconds, 0.3, sample.WriteChars, 4e8,
			sample.WriteSyscalls, 400.0, sample.NodeIOPressureSeconds, 0.6, sample.NodeCPUsBusySeconds, 0.32), 2}, {alone, 30}}, want{class: "low"}},
		// An I/O phase progresses by the bytes it moves.
		{"a congested file system", []run{{reader, 30}, {congested, 10}, {reader, 20}},
			want{intervals: 10, share: 10 * (1 - 5e7/(0.95*2e8)) / 60, class: "medium", causes: []string{"io"}, worst: [2]int{30, 40}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := jobNoise(9, 0.01, tc.runs...)
			o := phases.Options{NCPUs: 1}
			in := phases.FindInterference(s, phases.Find(s, o), o)
			got := want{intervals: in.Intervals, share: in.Share, class: in.Class}
			for _, c := range in.Causes {
				got.causes = append(got.causes, c.Key)
			}
			if in.Worst != nil {
				got.worst = [2]int{int(in.Worst.From.Sub(t0) / interval), int(in.Worst.To.Sub(t0) / interval)}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateApprox(0, 0.01)); diff != "" {
				t.Errorf("interference (-want +got):\n%s", diff)
			}
			if math.Abs(in.Seconds-float64(len(s))*interval.Seconds()) > 1e-6 {
				t.Errorf("judged %v s, want %v", in.Seconds, float64(len(s))*interval.Seconds())
			}
		})
	}
}

// TestInterferenceStarved: a job with a busy thread on each of its 2 CPUs and a
// neighbour's two beside them, on a node that reads its CPUs 87 % busy (an emulated
// node's accounting): its threads waited half the time, and the time lost to other work
// is counted in every interval, as its starvation is; the job's own extra threads on a
// node read as full are still no interference.
func TestInterferenceStarved(t *testing.T) {
	starved := alone.with(sample.CPUUserSeconds, 1.0, sample.SchedWaitSeconds, 1.0, sample.SchedBusyThreadSeconds, 2.0,
		sample.NodeCPUsBusySeconds, 1.74)
	own := alone.with(sample.CPUUserSeconds, 1.98, sample.SchedWaitSeconds, 2.0, sample.SchedBusyThreadSeconds, 4.0,
		sample.NodeCPUsBusySeconds, 2.0)
	o := phases.Options{NCPUs: 2}
	for _, tc := range []struct {
		name      string
		s         []sample.Sample
		intervals int
		share     float64
	}{
		// Lost: the others' 0.74 CPU-s of the waits, over the 2 runnable threads.
		{"starved, CPUs read 87 % busy", jobNoise(5, 0.01, run{starved, 30}), 30, 0.37},
		{"its own four threads", jobNoise(5, 0.01, run{own, 30}), 0, 0},
	} {
		in := phases.FindInterference(tc.s, phases.Find(tc.s, o), o)
		if in.Intervals != tc.intervals || math.Abs(in.Share-tc.share) > 0.02 {
			t.Errorf("%s: %d intervals, %.3f lost; want %d, %.2f (%+v)", tc.name, in.Intervals, in.Share, tc.intervals, tc.share, in)
		}
	}
}

// TestInterferenceThrottled: intervals its own CPU quota slowed, within a phase, are
// counted apart and lose nothing to interference.
func TestInterferenceThrottled(t *testing.T) {
	throttled := alone.with(sample.CPUUserSeconds, 0.49, sample.CPUThrottledSecs, 0.5, sample.NodeCPUsBusySeconds, 0.5)
	s := jobNoise(11, 0.01, run{alone, 30}, run{throttled, 2}, run{alone, 30})
	o := phases.Options{NCPUs: 1}
	ph := phases.Find(s, o)
	in := phases.FindInterference(s, ph, o)
	if len(ph) != 1 || in.LostSeconds != 0 || in.Throttled < 2*interval.Seconds()*0.4 {
		t.Errorf("%d phases, interference %+v: want one phase, nothing lost, about 2·0.47 intervals throttled", len(ph), in)
	}
}

// TestInterferenceWaiting: a job that mostly waits has no progress to judge, and says so.
func TestInterferenceWaiting(t *testing.T) {
	s := job(10, run{alone.with(sample.CPUUserSeconds, 0.01, sample.ReadChars, 10.0), 30})
	o := phases.Options{NCPUs: 1}
	in := phases.FindInterference(s, phases.Find(s, o), o)
	if in.Assessed != 0 || in.NotAssessed == "" || in.LostSeconds != 0 {
		t.Errorf("interference %+v: want not assessed, with why", in)
	}
}

func TestClass(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  string
	}{{0, "low"}, {0.0749, "low"}, {0.075, "medium"}, {0.15, "medium"}, {0.1501, "high"}} {
		if got := phases.Class(tc.share); got != tc.want {
			t.Errorf("Class(%v) = %q, want %q", tc.share, got, tc.want)
		}
	}
}
