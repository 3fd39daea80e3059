package digest

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/persyst/persyst/sample"
)

// TestEnergy: which counters make a job's energy, and what its line says: RAPL's parts;
// the node's own meter where it read the whole job, RAPL's within it; RAPL's alone where
// the meter missed part of the job; the meter's without the part it missed where there
// is nothing else; a multi-node job's batch host named.
func TestEnergy(t *testing.T) {
	const kwh = 3.6e6
	meterGap := "RAPL (powercap): the node's, the job had it alone; the node's meter (BMC, Redfish) gave no reading for 10 s of the job (from 10:00:00: timeout): the job's energy is RAPL's alone"
	for _, tc := range []struct {
		name    string
		totals  map[string]float64
		how     string
		nodes   []string
		nnodes  int
		joules  float64
		parts   []string
		within  []string
		line    []string // in the line, in this order
		notLine []string
	}{
		{name: "RAPL", totals: map[string]float64{sample.EnergyPkgJoules: kwh, sample.EnergyRAMJoules: 0.1 * kwh},
			joules: 1.1 * kwh, parts: []string{"cpu", "dram"}, line: []string{"Energy: " + KWh(1.1), "processors " + KWh(1), "memory " + KWh(0.1)}},
		{name: "the node's meter, RAPL and the GPUs within it", totals: map[string]float64{sample.EnergyNodeJoules: 3 * kwh, sample.EnergyPkgJoules: kwh,
			sample.EnergyRAMJoules: 0.1 * kwh, sample.GPUEnergyJoules: 1.5 * kwh},
			joules: 3 * kwh, parts: []string{"node"}, within: []string{"cpu", "dram", "gpus"},
			line: []string{"Energy: " + KWh(3), "the whole node's, from its own meter; of it processors " + KWh(1), "GPUs " + KWh(1.5)}},
		{name: "the meter missed part of the job: RAPL's alone", totals: map[string]float64{sample.EnergyNodeJoules: 2 * kwh, sample.EnergyNodeMissedSeconds: 10,
			sample.EnergyPkgJoules: kwh}, how: meterGap,
			joules: kwh, parts: []string{"cpu"}, line: []string{"Energy: " + KWh(1), "its fans, disks and power supply are not counted"}, notLine: []string{"whole node"}},
		{name: "the meter missed part of the job, no RAPL", totals: map[string]float64{sample.EnergyNodeJoules: 2 * kwh, sample.EnergyNodeMissedSeconds: 10},
			how:    "the node's meter (BMC, Redfish): the node's, the job had it alone; the node's meter (BMC, Redfish) gave no reading for 10 s of the job (from 10:00:00: timeout): the node's energy without those seconds",
			joules: 2 * kwh, parts: []string{"node"}, line: []string{"Energy: " + KWh(2), "that part is not counted"}},
		{name: "a multi-node job: the batch host's", totals: map[string]float64{sample.EnergyPkgJoules: kwh}, nodes: []string{"n1", "n2"}, nnodes: 2,
			joules: kwh, parts: []string{"cpu"}, line: []string{"Energy on n1 (not on the job's other nodes): " + KWh(1)}},
	} {
		e := energyOf(sample.Summary{Totals: tc.totals, Methods: map[string]string{sample.MethodEnergy: tc.how}}, tc.nodes, 0)
		if e == nil {
			t.Errorf("%s: no energy", tc.name)
			continue
		}
		if math.Abs(e.Joules-tc.joules) > 1e-6 || math.Abs(EnergyJoules(tc.totals)-tc.joules) > 1e-6 {
			t.Errorf("%s: %v J (EnergyJoules %v), want %v", tc.name, e.Joules, EnergyJoules(tc.totals), tc.joules)
		}
		if got := keysOf(e.Parts); strings.Join(got, " ") != strings.Join(tc.parts, " ") {
			t.Errorf("%s: parts %v, want %v", tc.name, got, tc.parts)
		}
		if got := keysOf(e.Within); strings.Join(got, " ") != strings.Join(tc.within, " ") {
			t.Errorf("%s: within %v, want %v", tc.name, got, tc.within)
		}
		line := EnergyLine(Report{Energy: e, NNodes: tc.nnodes})
		inOrder(t, tc.name+": the line", line, tc.line, tc.notLine)
	}
}

// inOrder checks that text holds each of want, in this order, and none of not.
func inOrder(t *testing.T, what, text string, want, not []string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Errorf("%s lacks %q after its first %d bytes: %s", what, w, at, text)
			break
		}
		at += i + len(w)
	}
	for _, w := range not {
		if strings.Contains(text, w) {
			t.Errorf("%s says %q: %s", what, w, text)
		}
	}
}

func keysOf(m map[string]float64) []string {
	var out []string
	for _, k := range []string{"node", "cpu", "dram", "platform", "gpus"} {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// TestEnergyOfNodes: a multi-node job's energy is its nodes' summed, part by part; it is
// the whole job's only where every node's is in it; how each node measured it is said
// where they differ; a node whose meter read the whole job and one read by RAPL alone
// are told apart.
func TestEnergyOfNodes(t *testing.T) {
	const kwh = 3.6e6
	rapl := func(pkg, dram float64, how string) *Energy {
		return NodeEnergy(sample.Energy{Totals: map[string]float64{sample.EnergyPkgJoules: pkg * kwh, sample.EnergyRAMJoules: dram * kwh}, How: how})
	}
	metered := NodeEnergy(sample.Energy{Totals: map[string]float64{sample.EnergyNodeJoules: 3 * kwh, sample.EnergyPkgJoules: kwh}, How: "the node's meter (BMC, Redfish): the node's, the job had it alone"})
	alone := "RAPL (powercap): the node's, the job had it alone"
	shared := "RAPL (powercap): the job's share of the node's by its CPU time (DRAM: by its memory), an estimate"
	for _, tc := range []struct {
		name     string
		by       map[string]*Energy
		nnodes   int
		joules   float64
		parts    map[string]float64
		counted  int
		nodes    []string
		estimate bool
		how      []string // in How
		line     []string // in the line, in this order
		notLine  []string
	}{
		{name: "two nodes by RAPL, alike", by: map[string]*Energy{"n2": rapl(1, 0.1, alone), "n1": rapl(2, 0.2, alone)}, nnodes: 2,
			joules: 3.3 * kwh, parts: map[string]float64{"cpu": 3 * kwh, "dram": 0.3 * kwh}, counted: 2, nodes: []string{"n1", "n2"},
			how: []string{alone}, line: []string{"Energy: " + KWh(3.3), "processors " + KWh(3), "memory " + KWh(0.3)}, notLine: []string{"not on", "n1:"}},
		{name: "one node shared: an estimate, each node's way named", by: map[string]*Energy{"n1": rapl(2, 0.2, alone), "n2": rapl(1, 0.1, shared)}, nnodes: 2,
			joules: 3.3 * kwh, parts: map[string]float64{"cpu": 3 * kwh, "dram": 0.3 * kwh}, counted: 2, nodes: []string{"n1", "n2"}, estimate: true,
			how: []string{"n1: " + alone, " | n2: " + shared}, line: []string{"Energy: " + KWh(3.3), "an estimate"}},
		{name: "two of three nodes", by: map[string]*Energy{"n1": rapl(2, 0, alone), "n3": rapl(1, 0, alone), "n2": nil}, nnodes: 3,
			joules: 3 * kwh, parts: map[string]float64{"cpu": 3 * kwh, "dram": 0}, counted: 2, nodes: []string{"n1", "n3"},
			line: []string{"Energy on 2 of the job's 3 nodes (not on the others): " + KWh(3)}},
		{name: "one node's meter, one node's RAPL", by: map[string]*Energy{"n1": metered, "n2": rapl(1, 0.5, alone)}, nnodes: 2,
			joules: 4.5 * kwh, parts: map[string]float64{"node": 3 * kwh, "cpu": kwh, "dram": 0.5 * kwh}, counted: 2, nodes: []string{"n1", "n2"},
			line: []string{"Energy: " + KWh(4.5), "from its own meter on 1 of 2 nodes (" + KWh(3) + ")", "of it processors " + KWh(1), "processors " + KWh(1) + ", memory " + KWh(0.5)}},
		{name: "one node of two: named", by: map[string]*Energy{"n1": rapl(1, 0, alone), "n2": nil}, nnodes: 2,
			joules: kwh, parts: map[string]float64{"cpu": kwh, "dram": 0}, counted: 0, nodes: []string{"n1"},
			line: []string{"Energy on n1 (not on the job's other nodes): " + KWh(1)}},
	} {
		e := energyOfNodes(tc.by, 0)
		if e == nil {
			t.Errorf("%s: no energy", tc.name)
			continue
		}
		if math.Abs(e.Joules-tc.joules) > 1e-6 || math.Abs(e.KWh-tc.joules/kwh) > 1e-9 {
			t.Errorf("%s: %v J, %v kWh; want %v J", tc.name, e.Joules, e.KWh, tc.joules)
		}
		if diff := cmp.Diff(tc.parts, e.Parts, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
			t.Errorf("%s: parts (-want +got):\n%s", tc.name, diff)
		}
		if e.NodesCounted != tc.counted || strings.Join(e.Nodes, ",") != strings.Join(tc.nodes, ",") || e.Estimate != tc.estimate {
			t.Errorf("%s: nodes %v (%d counted), estimate %v; want %v (%d), %v", tc.name, e.Nodes, e.NodesCounted, e.Estimate, tc.nodes, tc.counted, tc.estimate)
		}
		if tc.counted > 1 && len(e.ByNode) != tc.counted {
			t.Errorf("%s: by node %v, want %d nodes", tc.name, e.ByNode, tc.counted)
		}
		if e.Whole(tc.nnodes) != (len(tc.nodes) == tc.nnodes) {
			t.Errorf("%s: whole %v with %d of %d nodes", tc.name, e.Whole(tc.nnodes), len(tc.nodes), tc.nnodes)
		}
		inOrder(t, tc.name+": how", e.How, tc.how, nil)
		inOrder(t, tc.name+": the line", EnergyLine(Report{Energy: e, NNodes: tc.nnodes}), tc.line, tc.notLine)
		// The nodes' own energies are left as they were.
		for n, ne := range tc.by {
			if ne != nil && (ne.Nodes != nil || ne.ByNode != nil) {
				t.Errorf("%s: node %s's energy changed: %+v", tc.name, n, ne)
			}
		}
	}
}
