package daemon

import (
	"testing"
	"time"

	"github.com/persyst/persyst/daemon/wire"
)

// TestPartWhy: what a node daemon tells the batch host about a job it has no part of: a
// part that ended before it could be measured is too short to judge (no gap); a longer
// one it could not measure, or one still running, is a gap, in words that say so; a job
// it never saw gets no words (the batch host says it did not see it).
func TestPartWhy(t *testing.T) {
	reg := newReg(t, RegistryConfig{})
	applyAll(t, reg, []applied{
		{wire.JobStart, ev(1, "", at(0)), at(0)},
		{wire.JobEnd, ev(1, "", at(500*time.Millisecond)), at(time.Second)},
		{wire.JobStart, ev(2, "", at(0)), at(0)},
		{wire.JobEnd, ev(2, "", at(time.Minute)), at(time.Minute)},
		{wire.JobStart, ev(3, "", at(0)), at(0)},
		{wire.JobStart, ev(4, "", at(0), func(e *wire.Event) { e.Persyst = wire.Off }), at(0)},
	})
	why := partWhy(reg, newMeterSet(), nil)
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
	} {
		if words, short := why(tc.job); words != tc.words || short != tc.short {
			t.Errorf("job %d: %q, %v; want %q, %v", tc.job, words, short, tc.words, tc.short)
		}
	}
}
