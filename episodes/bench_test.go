package episodes_test

import (
	"testing"
	"time"

	"github.com/persyst/persyst/episodes"
)

// BenchmarkSite: a site of 2000 nodes running 4000 jobs, a tenth of them stalled, each
// node answering every cycle; the frontend's work per cycle (one answer per node, then
// the episodes over the cycles kept), with MaxCycles cycles kept.
func BenchmarkSite(b *testing.B) {
	const nodes, jobs = 2000, 4000
	d := episodes.NewDetector(time.Minute)
	answers := func(c int) [][]episodes.Cycle {
		out := make([][]episodes.Cycle, nodes)
		for n := range out {
			k := episodes.Cycle{TS: ts(c)}
			for j := n; j < jobs; j += nodes {
				k.Measured = append(k.Measured, uint32(j+1))
				if j%10 == 0 {
					k.Stalled = append(k.Stalled, uint32(j+1))
				}
			}
			out[n] = []episodes.Cycle{k}
		}
		return out
	}
	for c := 0; c < episodes.MaxCycles; c++ {
		for _, a := range answers(c) {
			d.Add(a)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, a := range answers(episodes.MaxCycles + i) {
			d.Add(a)
		}
		d.Episodes()
	}
}
