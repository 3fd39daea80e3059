package pipeline

import "time"

// NextTick returns the first cycle boundary after now: the next Unix time that is a
// multiple of period (PerSyst eq. 4.1: wait TC − UT mod TC), so that every node reads
// at the same instants without talking to each other.
func NextTick(now time.Time, period time.Duration) time.Time {
	if period <= 0 {
		panic("pipeline: NextTick with period <= 0")
	}
	t := now.Truncate(period)
	if !t.After(now) {
		t = t.Add(period)
	}
	return t
}
