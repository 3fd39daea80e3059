package balance

import (
	"testing"
)

// benchCycle returns the tree and the jobs of the first measured cycle.
func benchCycle(b *testing.B, cfg SimConfig) (*Tree, []Job) {
	b.Helper()
	cfg.Cycles = 1
	if err := cfg.validate(); err != nil {
		b.Fatal(err)
	}
	var jobs []Job
	tr, err := generate(cfg, func(_ *Tree, _ int, js []Job, _ int) error {
		jobs = js
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return tr, jobs
}

func benchBalance(b *testing.B, cfg SimConfig) {
	tr, jobs := benchCycle(b, cfg)
	la := max(cfg.LoadPerNode, 1)
	bcfg := Config{LoadPerNode: la, LMax: cfg.LMaxNodes * la, Overflow: cfg.Overflow}
	var res *Result
	b.ResetTimer()
	for b.Loop() {
		var err error
		res, err = Balance(tr, jobs, bcfg)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(jobs)), "jobs")
	b.ReportMetric(100*res.Stats.ExactShareJobs, "exact-%")
	b.ReportMetric(float64(res.Stats.TreeNodesBalanced), "nodes-balanced")
	b.ReportMetric(float64(res.Stats.TreeNodesTopology), "nodes-topology")
}

// BenchmarkBalanceSuperMUC: 9,216 nodes, 216 collectors, ~170 jobs
// (target: under 100 ms per cycle).
func BenchmarkBalanceSuperMUC(b *testing.B) { benchBalance(b, SuperMUC()) }

// BenchmarkBalanceLarge: 100,000 nodes, 2,000 collectors, 20,000 jobs
// (target: under 2 s per cycle).
func BenchmarkBalanceLarge(b *testing.B) { benchBalance(b, LargeCluster()) }

// BenchmarkDistance: one tree-distance query on the large tree.
func BenchmarkDistance(b *testing.B) {
	cfg := LargeCluster()
	cfg.MaxJobs, cfg.MinJobs = 0, 0
	tr, _ := benchCycle(b, cfg)
	n := uint32(len(tr.nodes))
	i := uint32(0)
	for b.Loop() {
		tr.dist(tr.nodes[i%n], tr.nodes[(i*7919)%n])
		i++
	}
}
