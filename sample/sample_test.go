package sample

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAddSuspended: suspended intervals become stretches; one that follows the last
// stretch extends it, an interval mostly running is not suspended, and the stretches
// stay bounded.
func TestAddSuspended(t *testing.T) {
	t0 := time.Unix(1000, 0).UTC()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	iv := func(end, secs, susp float64) Sample {
		return Sample{Time: at(end), Seconds: secs, Job: map[string]float64{SuspendedSeconds: susp}}
	}
	gap := func(from, to float64) Gap { return Gap{From: at(from), To: at(to), Why: "suspended by Slurm"} }
	for _, tc := range []struct {
		name string
		in   []Sample
		want []Gap
	}{
		{"none", []Sample{iv(1, 1, 0), iv(2, 1, 0)}, nil},
		{"one stretch over two intervals", []Sample{iv(1, 1, 0), iv(3, 2, 2), iv(4, 1, 1), iv(5, 1, 0)}, []Gap{gap(1, 4)}},
		// Slurm's SIGTSTP a moment before the freeze: the interval's end, then the freeze.
		{"a suspension's start within a running interval", []Sample{iv(2, 2, 0.5), iv(5, 3, 3)}, []Gap{gap(1.5, 5)}},
		// ... or before a short one: the grace reaches back over intervals counted running.
		{"a suspension's start before a short interval", []Sample{iv(9, 1, 0), iv(10, 1, 2), iv(12, 2, 2)}, []Gap{gap(8, 12)}},
		{"two stretches", []Sample{iv(2, 2, 2), iv(3, 1, 0), iv(5, 2, 2)}, []Gap{gap(0, 2), gap(3, 5)}},
		{"not measured", []Sample{{Time: at(1), Seconds: 1, Job: map[string]float64{}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Gap
			for _, s := range tc.in {
				got = AddSuspended(got, s)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("stretches (-want +got):\n%s", diff)
			}
		})
	}
	var got []Gap
	for i := range 100 {
		got = AddSuspended(got, iv(float64(2*i+2), 1, 1))
	}
	if len(got) != maxSuspended || !got[len(got)-1].To.Equal(at(200)) {
		t.Errorf("100 stretches kept as %d, the last to %v; want %d, the last to the end", len(got), got[len(got)-1].To, maxSuspended)
	}
}
