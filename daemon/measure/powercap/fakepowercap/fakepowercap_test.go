package fakepowercap

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/sample"
)

// series is n intervals of secs seconds ending at t0+offset+k*secs, each with joules of
// the package and cpu seconds.
func series(t0 time.Time, offset time.Duration, n int, secs, joules, cpu float64) []sample.Sample {
	var ss []sample.Sample
	for k := 1; k <= n; k++ {
		ss = append(ss, sample.Sample{
			Time:    t0.Add(offset + time.Duration(float64(k)*secs*float64(time.Second))),
			Seconds: secs,
			Job:     map[string]float64{sample.EnergyPkgJoules: joules, sample.CPUUserSeconds: cpu, sample.EnergyShareCPUSeconds: cpu},
		})
	}
	return ss
}

func TestSpan(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		a, b []sample.Sample
		want Overlap
	}{{
		name: "read 700 ms apart, b started two intervals later and ended earlier",
		a:    series(t0, 0, 10, 3, 150, 3),
		b:    series(t0, 6700*time.Millisecond, 7, 3, 150, 3),
		want: Overlap{From: t0.Add(6700 * time.Millisecond), To: t0.Add(27700 * time.Millisecond),
			A: Share{Joules: 900, CPU: 18, Basis: 18, Seconds: 18, Intervals: 6},
			B: Share{Joules: 1050, CPU: 21, Basis: 21, Seconds: 21, Intervals: 7}},
	}, {
		name: "never measured together",
		a:    series(t0, 0, 3, 1, 100, 1),
		b:    series(t0, 10*time.Second, 3, 1, 100, 1),
		want: Overlap{From: t0.Add(10 * time.Second), To: t0.Add(3 * time.Second)},
	}, {
		name: "b without the metric",
		a:    series(t0, 0, 3, 1, 100, 1),
		b:    []sample.Sample{{Time: t0.Add(time.Second), Seconds: 1, Job: map[string]float64{sample.CPUUserSeconds: 1}}},
		want: Overlap{From: t0, To: time.Time{}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Span(tc.a, tc.b, sample.EnergyPkgJoules)); diff != "" {
				t.Errorf("Span (-want +got):\n%s", diff)
			}
		})
	}
}
