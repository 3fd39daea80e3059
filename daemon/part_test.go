package daemon

import (
	"testing"
	"time"

	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

// TestPartWhy: what a node daemon tells the batch host about a job it has no part of: a
// part that ended before it could be measured is too short to judge (no gap); a longer
// one it could not measure, or one still running, is a gap, in words that say so; a job
// it never saw gets no words (the batch host says it did not see it). A job it measured
// is short when its properties judged none of it (a start-up read that came late, under
// load, holds more than the start-up and is still not judged), and a gap otherwise.
func TestPartWhy(t *testing.T) {
	reg := newReg(t, RegistryConfig{})
	applyAll(t, reg, []applied{
		{wire.JobStart, ev(1, "", at(0)), at(0)},
		{wire.JobEnd, ev(1, "", at(500*time.Millisecond)), at(time.Second)},
		{wire.JobStart, ev(2, "", at(0)), at(0)},
		{wire.JobEnd, ev(2, "", at(time.Minute)), at(time.Minute)},
		{wire.JobStart, ev(3, "", at(0)), at(0)},
		{wire.JobStart, ev(4, "", at(0), func(e *wire.Event) { e.Persyst = wire.Off }), at(0)},
		{wire.JobStart, ev(6, "", at(0)), at(0)},
		{wire.JobStart, ev(7, "", at(0)), at(0)},
	})
	engine := propertiestest.Engine(t)
	measured := func(ss ...sample.Sample) *jobMeter {
		for i := range ss {
			ss[i].Job = map[string]float64{sample.CPUUserSeconds: ss[i].Seconds / 2}
		}
		pj := pipeline.Recorded(&measure.Env{}, measure.Spec{CPUs: []int{0}}, pipeline.Options{Engine: engine}, at(0), ss)
		return &jobMeter{state: measuring, job: pj}
	}
	meters := newMeterSet()
	meters.jobs[6] = measured(sample.Sample{Time: at(1300 * time.Millisecond), Reason: sample.Startup, Seconds: 1.3})
	meters.jobs[7] = measured(sample.Sample{Time: at(time.Second), Reason: sample.Startup, Seconds: 1},
		sample.Sample{Time: at(5 * time.Second), Reason: sample.Cycle, Seconds: 4})
	why := partWhy(reg, meters, engine)
	for _, tc := range []struct {
		job   uint32
		words string
		short bool
	}{
		{1, "its part ended before it could be measured", true},
		{2, "its persyst daemon could not measure the job (its log says why)", false},
		{3, "its persyst daemon has not measured the job yet", false},
		{4, "the job opted out there", false},
		{5, "", false},
		{6, "its part ended within its start-up, which is never judged", true},
		{7, "its persyst daemon measured the job but kept no part of it", false},
	} {
		if words, short := why(tc.job); words != tc.words || short != tc.short {
			t.Errorf("job %d: %q, %v; want %q, %v", tc.job, words, short, tc.words, tc.short)
		}
	}
}
