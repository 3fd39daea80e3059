package pipeline

import (
	"testing"
	"time"
)

func TestNextTick(t *testing.T) {
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		now    time.Time
		period time.Duration
		want   time.Time
	}{
		{base, time.Minute, base.Add(time.Minute)}, // exactly on a boundary: the next one
		{base.Add(time.Nanosecond), time.Minute, base.Add(time.Minute)},
		{base.Add(59*time.Second + 999*time.Millisecond), time.Minute, base.Add(time.Minute)},
		{base.Add(1500 * time.Millisecond), time.Second, base.Add(2 * time.Second)},
		{base.Add(7 * time.Second), 5 * time.Second, base.Add(10 * time.Second)},
	}
	for _, tc := range tests {
		got := NextTick(tc.now, tc.period)
		if !got.Equal(tc.want) {
			t.Errorf("NextTick(%v, %v) = %v, want %v", tc.now.Format(time.StampMilli), tc.period, got.Format(time.StampMilli), tc.want.Format(time.StampMilli))
		}
		if got.UnixNano()%int64(tc.period) != 0 {
			t.Errorf("NextTick(%v, %v) = %v: not a multiple of the period in Unix time", tc.now, tc.period, got)
		}
	}
}
