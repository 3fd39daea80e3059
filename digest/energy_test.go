package digest

import (
	"math"
	"strings"
	"testing"

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
		at := 0
		for _, w := range tc.line {
			i := strings.Index(line[at:], w)
			if i < 0 {
				t.Errorf("%s: the line lacks %q after its first %d bytes: %s", tc.name, w, at, line)
				break
			}
			at += i + len(w)
		}
		for _, w := range tc.notLine {
			if strings.Contains(line, w) {
				t.Errorf("%s: the line says %q: %s", tc.name, w, line)
			}
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
