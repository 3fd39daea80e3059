package pipeline_test

import (
	"testing"
	"time"

	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

// recorded is a one-CPU job of n one-minute intervals: tiny writes for its first quarter,
// computing after.
func recorded(tb testing.TB, n int) *pipeline.Job {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var ss []sample.Sample
	for i := 1; i <= n; i++ {
		s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Minute), Reason: sample.Cycle, Seconds: 60,
			Job: map[string]float64{sample.CPUUserSeconds: 59, sample.CPUSystemSeconds: 0.5, sample.MemAnonBytes: 1 << 30,
				sample.ReadChars: 1e4, sample.ReadSyscalls: 10, sample.WriteChars: 1e3, sample.WriteSyscalls: 10}}
		if i <= n/4 {
			s.Job[sample.CPUUserSeconds], s.Job[sample.CPUSystemSeconds] = 20, 38
			s.Job[sample.WriteChars], s.Job[sample.WriteSyscalls] = 3e8, 3e6
		}
		ss = append(ss, s)
	}
	env := &measure.Env{}
	return pipeline.Recorded(env, measure.Spec{CPUs: []int{0}}, pipeline.Options{Engine: propertiestest.Engine(tb)}, t0, ss)
}

// TestPhasesHeld: the small-writes finding is held in the first phase only.
func TestPhasesHeld(t *testing.T) {
	ph, in := recorded(t, 120).Phases(0)
	if len(ph) != 2 || in == nil {
		t.Fatalf("phases %+v, interference %v: want 2 and an analysis", ph, in)
	}
	if ph[0].Held["io_write_request_size"] < 0.9*ph[0].Seconds || ph[1].Held["io_write_request_size"] != 0 {
		t.Errorf("small writes held %v s in phase 1 of %v s, %v s in phase 2: want all of phase 1, none of 2",
			ph[0].Held["io_write_request_size"], ph[0].Seconds, ph[1].Held["io_write_request_size"])
	}
}

// BenchmarkPhases is the whole of phases at a job's end on its batch host: phases and
// interference found, every property evaluated again per phase. A 5.5-day one-CPU job:
//
//	go test -run XXX -bench BenchmarkPhases ./daemon/pipeline/
func BenchmarkPhases(b *testing.B) {
	j := recorded(b, 8000)
	b.ReportAllocs()
	for b.Loop() {
		j.Phases(0)
	}
}
