package phases_test

import (
	"fmt"
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

// BenchmarkCompare is the batch host's comparison of a 1024-node job's nodes at its end:
// each node of three phases (one node in ten unlike the rest).
func BenchmarkCompare(b *testing.B) {
	o := phases.Options{NCPUs: 1}
	alikePh := phases.Find(job(1, run{smallWrites, 15}, run{compute, 30}, run{reading, 15}), o)
	unlikePh := phases.Find(job(2, run{compute, 45}, run{reading, 15}), o)
	nodes := make([]phases.NodePhases, 1024)
	for i := range nodes {
		ph := alikePh
		if i%10 == 0 {
			ph = unlikePh
		}
		nodes[i] = phases.NodePhases{Node: fmt.Sprintf("node%04d", i), NCPUs: 1, Phases: ph}
	}
	b.ReportAllocs()
	for b.Loop() {
		if a := phases.Compare(nodes); a == nil || len(a.Unlike) != 103 {
			b.Fatalf("compared: %+v", a)
		}
	}
}
