package phases_test

import (
	"testing"

	"github.com/persyst/persyst/phases"
)

// BenchmarkJobEnd is what a job's end costs its batch host's daemon for phases and
// interference: a 5.5-day job of 8000 one-minute intervals kept (clustered as 1000
// points), of three behaviours and a neighbour.
func BenchmarkJobEnd(b *testing.B) {
	shared := alone.with("cpu_user_seconds", 0.49, "sched_wait_seconds", 0.5)
	s := jobNoise(1, 0.02, run{smallWrites.with("node_cpus_busy_seconds", 1.0), 1000}, run{alone, 3000}, run{shared, 500},
		run{alone, 2500}, run{reading.with("node_cpus_busy_seconds", 0.6), 1000})
	o := phases.Options{NCPUs: 1}
	b.ReportAllocs()
	for b.Loop() {
		phases.Analyse(s, o)
	}
}
