package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/sample"
)

// TestReportSumsNodesEnergy: a multi-node job's batch host sums its nodes' energy: its own
// as it measured it (not the older copy its last cycle sent the tree), the other nodes'
// from the job-wide report, none of a node the job did not run on; a node whose energy
// did not come is not counted, and the digest says so.
func TestReportSumsNodesEnergy(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	rapl := func(j float64) *digest.Energy {
		return digest.NodeEnergy(sample.Energy{Totals: map[string]float64{sample.EnergyPkgJoules: j}, How: "RAPL (powercap): the node's, the job had it alone"})
	}
	e := &jobEnd{
		job:  &Job{JobID: 5, NNodes: 3, Started: t0},
		node: "n1", at: t0.Add(time.Minute), began: t0.Add(time.Minute),
		measured: measurement{cpus: 1, summary: sample.Summary{Started: t0, Last: t0.Add(time.Minute), Seconds: 60, Samples: 6,
			Totals:  map[string]float64{sample.EnergyPkgJoules: 100},
			Methods: map[string]string{sample.MethodEnergy: "RAPL (powercap): the node's, the job had it alone"}}},
		wide: &digest.Report{Nodes: []string{"n1", "n2", "n3"}, NNodes: 3,
			Energy: &digest.Energy{NodesCounted: 3, ByNode: map[string]*digest.Energy{"n1": rapl(90), "n2": rapl(50), "n9": rapl(1e6)}}},
	}
	r := e.report()
	en := r.Energy
	if en == nil || en.Joules != 150 || en.NodesCounted != 2 || strings.Join(en.Nodes, ",") != "n1,n2" || en.Whole(r.NNodes) {
		t.Fatalf("energy %+v of a 3-node job, n1 measured here (100 J), n2 by the tree (50 J), n3 not: want 150 J of n1 and n2", en)
	}
	if line := digest.EnergyLine(r); !strings.Contains(line, "Energy on 2 of the job's 3 nodes (not on the others)") {
		t.Errorf("the digest's energy line: %s", line)
	}
	// Every node's come: the whole job's.
	e.wide.Energy.ByNode["n3"] = rapl(25)
	if en := e.report().Energy; en == nil || en.Joules != 175 || !en.Whole(3) {
		t.Errorf("energy %+v with all 3 nodes', want 175 J, the whole job's", en)
	}
}
