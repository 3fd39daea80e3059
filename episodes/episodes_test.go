package episodes_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/episodes"
)

const period = time.Minute

var t0 = time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)

func ts(i int) int64 { return t0.Add(time.Duration(i) * period).Unix() }

func ids(from, to int) []uint32 {
	var out []uint32
	for i := from; i <= to; i++ {
		out = append(out, uint32(i))
	}
	return out
}

// site: one node per job (jobs 1..jobs), each measuring its job in cycles 0..n-1, the
// jobs stall[c] stalled in cycle c.
func site(jobs, n int, stall map[int][]uint32) []episodes.Cycle {
	var out []episodes.Cycle
	for c := 0; c < n; c++ {
		for j := 1; j <= jobs; j++ {
			k := episodes.Cycle{TS: ts(c), Measured: []uint32{uint32(j)}}
			for _, s := range stall[c] {
				if s == uint32(j) {
					k.Stalled = []uint32{s}
				}
			}
			out = append(out, k)
		}
	}
	return out
}

func TestEpisodes(t *testing.T) {
	type ep struct {
		From, To        int // cycles
		Jobs, Stalled   int
		Peak            float64
		Touched, Spared uint32
	}
	four := ids(1, 4)
	for _, tc := range []struct {
		name   string
		cycles []episodes.Cycle
		want   []ep
	}{
		{"4 of 10 jobs stall for 4 minutes", site(10, 10, map[int][]uint32{3: four, 4: four, 5: four, 6: four}),
			[]ep{{From: 2, To: 6, Jobs: 10, Stalled: 4, Peak: 0.4, Touched: 4, Spared: 5}}},
		{"2 jobs are too few", site(4, 10, map[int][]uint32{3: ids(1, 2), 4: ids(1, 2), 5: ids(1, 2)}), nil},
		{"3 of 20 is too small a share", site(20, 10, map[int][]uint32{3: ids(1, 3), 4: ids(1, 3), 5: ids(1, 3)}), nil},
		{"one minute is no episode", site(10, 10, map[int][]uint32{3: four}), nil},
		{"a quiet minute between two episodes", site(10, 10, map[int][]uint32{1: four, 2: four, 4: ids(3, 6), 5: ids(3, 6)}),
			[]ep{{From: 0, To: 2, Jobs: 10, Stalled: 4, Peak: 0.4, Touched: 1, Spared: 5}, {From: 3, To: 5, Jobs: 10, Stalled: 4, Peak: 0.4, Touched: 6, Spared: 1}}},
		// A job on two nodes stalls on both: one job.
		{"a job on several nodes counts once", append(site(6, 5, map[int][]uint32{1: ids(1, 3), 2: ids(1, 3)}),
			episodes.Cycle{TS: ts(1), Measured: []uint32{1}, Stalled: []uint32{1}}, episodes.Cycle{TS: ts(2), Measured: []uint32{1}, Stalled: []uint32{1}}),
			[]ep{{From: 0, To: 2, Jobs: 6, Stalled: 3, Peak: 0.5, Touched: 3, Spared: 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := episodes.NewDetector(period)
			d.Add(tc.cycles)
			var got []ep
			for _, e := range d.Episodes() {
				g := ep{From: int(e.From.Sub(t0) / period), To: int(e.To.Sub(t0) / period), Jobs: e.Jobs, Stalled: e.Stalled, Peak: e.Peak}
				if len(tc.want) > len(got) {
					w := tc.want[len(got)]
					if e.Touched(w.Touched) {
						g.Touched = w.Touched
					}
					if !e.Touched(w.Spared) {
						g.Spared = w.Spared
					}
				}
				got = append(got, g)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("episodes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBounds: the cycles kept are bounded, the oldest dropped.
func TestBounds(t *testing.T) {
	d := episodes.NewDetector(period)
	for c := 0; c < episodes.MaxCycles+100; c++ {
		d.Add([]episodes.Cycle{{TS: ts(c), Measured: ids(1, 4), Stalled: ids(1, 4)}})
	}
	e := d.Episodes()
	if len(e) != 1 || e[0].From.Before(t0.Add(99*period)) {
		t.Errorf("episodes %+v: want one, of the last %d cycles only", e, episodes.MaxCycles)
	}
}

// TestLateReport: a node's report of a cycle the detector settled still counts.
func TestLateReport(t *testing.T) {
	d := episodes.NewDetector(period)
	d.Add(site(10, 10, map[int][]uint32{3: ids(1, 2), 4: ids(1, 2)}))
	if e := d.Episodes(); len(e) != 0 {
		t.Fatalf("episodes of 2 stalled jobs: %+v", e)
	}
	d.Add([]episodes.Cycle{{TS: ts(3), Measured: []uint32{11}, Stalled: []uint32{11}}, {TS: ts(4), Measured: []uint32{11}, Stalled: []uint32{11}}})
	e := d.Episodes()
	if len(e) != 1 || e[0].Stalled != 3 || !e[0].Touched(11) || e[0].Jobs != 11 {
		t.Errorf("episodes after job 11's late report: %+v, want one of 3 stalled jobs in 11", e)
	}
}
