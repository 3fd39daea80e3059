package digest

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/persyst/persyst/sample"
)

// Energy is what a job used on the nodes measured: the node's own meter's (its BMC's)
// where it gave a reading all along, else the RAPL counters' of its processors and
// memory and NVML's of its GPUs; the node's while the job had it alone, else the job's
// share (an estimate). It is information, never a finding.
type Energy struct {
	Joules float64 `json:"joules"`
	KWh    float64 `json:"kwh"`
	// Parts are the joules of each counter that makes up Joules: "node" (the node's
	// meter: everything in the node), or "cpu" (the processor packages), "dram",
	// "platform" (RAPL psys, where no package counter is read) and "gpus".
	Parts map[string]float64 `json:"parts"`
	// Within are the parts measured inside the node's meter's ("cpu", "dram", "gpus"):
	// already in Joules.
	Within map[string]float64 `json:"within,omitempty"`
	// Estimate: a share of a shared node's energy is in it (by CPU time or memory).
	Estimate bool `json:"estimate,omitempty"`
	// How says where the energy came from (sample.MethodEnergy; the GPUs' from NVML).
	How string `json:"how,omitempty"`
	// Nodes are the nodes whose energy is counted (a multi-node job's nodes whose energy
	// reached its batch host); NodesCounted how many, where more than one (a summary in
	// Slurm's accounting keeps one name only).
	Nodes        []string `json:"nodes,omitempty"`
	NodesCounted int      `json:"nodes_counted,omitempty"`
	// ByNode is each counted node's energy, where more than one is counted (without how
	// it was measured where every node's is the same: How).
	ByNode map[string]*Energy `json:"by_node,omitempty"`
	// CO2Grams is the emissions at the site's CO2PerKWh (0: the site gives none).
	CO2Grams  float64 `json:"co2_grams,omitempty"`
	CO2PerKWh float64 `json:"co2_per_kwh,omitempty"`
}

// energyParts are the joules of each part of a job's energy in a meter's totals (none:
// no counter measured it): the node's meter's where it read the whole job (the rest
// then within it), else the RAPL counters' and the GPUs'.
func energyParts(totals map[string]float64) (parts, within map[string]float64) {
	parts = raplParts(totals)
	node, ok := totals[sample.EnergyNodeJoules]
	switch {
	case ok && totals[sample.EnergyNodeMissedSeconds] == 0:
		return map[string]float64{"node": node}, parts
	case ok && len(parts) == 0:
		parts["node"] = node // the meter's, without the seconds it did not read
	}
	return parts, nil
}

// raplParts are the joules of the RAPL counters and the GPUs in a meter's totals.
func raplParts(totals map[string]float64) map[string]float64 {
	parts := map[string]float64{}
	if v, ok := totals[sample.EnergyPkgJoules]; ok {
		parts["cpu"] = v
		if d, ok := totals[sample.EnergyRAMJoules]; ok {
			parts["dram"] = d
		}
	} else if v, ok := totals[sample.EnergyPsysJoules]; ok {
		parts["platform"] = v // the whole platform: the packages and DRAM are in it
	}
	if v, ok := totals[sample.GPUEnergyJoules]; ok {
		parts["gpus"] = v
	}
	return parts
}

// EnergyJoules is a job's energy so far in a meter's totals; -1: no counter measured it.
func EnergyJoules(totals map[string]float64) float64 {
	parts, _ := energyParts(totals)
	if len(parts) == 0 {
		return -1
	}
	sum := 0.0
	for _, v := range parts {
		sum += v
	}
	return sum
}

// energyOf is a job's energy from what was measured of it on the first of nodes (nil:
// nothing measured it).
func energyOf(m sample.Summary, nodes []string, co2PerKWh float64) *Energy {
	node := ""
	if len(nodes) > 0 {
		node = nodes[0]
	}
	return energyOfNodes(map[string]*Energy{node: NodeEnergy(sample.EnergyOf(m.Totals, m.Methods))}, co2PerKWh)
}

// NodeEnergy is a job's energy on one node, from its meter's totals (nil: nothing
// measured it there).
func NodeEnergy(in sample.Energy) *Energy {
	parts, within := energyParts(in.Totals)
	if len(parts) == 0 {
		return nil
	}
	how := in.How
	if _, ok := parts["gpus"]; ok || within["gpus"] > 0 {
		how = strings.TrimPrefix(how+"; GPUs: NVML", "; ")
	}
	e := &Energy{Parts: parts, Within: within, How: how, Estimate: strings.Contains(how, "estimate")}
	for _, v := range parts {
		e.Joules += v
	}
	e.KWh = e.Joules / 3.6e6
	return e
}

// maxHowNodes is how many nodes' ways of measuring a multi-node job's energy names, where
// they differ (each node's is in ByNode).
const maxHowNodes = 3

// energyOfNodes is a job's energy over its nodes, each node's (NodeEnergy; nil: nothing
// measured it there); nil where nothing measured it on any node. A node named "" is not
// named.
func energyOfNodes(by map[string]*Energy, co2PerKWh float64) *Energy {
	var counted []string
	per := map[string]*Energy{}
	for n, ne := range by {
		if ne != nil && ne.Parts != nil {
			c := *ne
			c.Nodes, c.NodesCounted, c.ByNode, c.CO2Grams, c.CO2PerKWh = nil, 0, nil, 0, 0
			per[n] = &c
			counted = append(counted, n)
		}
	}
	sort.Strings(counted)
	var e *Energy
	switch len(counted) {
	case 0:
		return nil
	case 1:
		e = per[counted[0]]
		if counted[0] != "" {
			e.Nodes = counted
		}
	default:
		e = sumEnergy(counted, per)
	}
	if co2PerKWh > 0 {
		e.CO2PerKWh, e.CO2Grams = co2PerKWh, e.KWh*co2PerKWh
	}
	return e
}

// sumEnergy adds up the energy of the nodes counted (two or more): joules and each part,
// an estimate where any node's is, how each node measured it where they differ.
func sumEnergy(counted []string, per map[string]*Energy) *Energy {
	e := &Energy{Parts: map[string]float64{}, Nodes: counted, NodesCounted: len(counted), ByNode: per}
	var hows []string
	for _, n := range counted {
		ne := per[n]
		for k, v := range ne.Parts {
			e.Parts[k] += v
		}
		for k, v := range ne.Within {
			if e.Within == nil {
				e.Within = map[string]float64{}
			}
			e.Within[k] += v
		}
		e.Joules += ne.Joules
		e.Estimate = e.Estimate || ne.Estimate
		if ne.How != "" && !slices.Contains(hows, ne.How) {
			hows = append(hows, ne.How)
		}
	}
	e.KWh = e.Joules / 3.6e6
	if len(hows) <= 1 {
		// Each node measured it the same way: said once (a job may run on thousands).
		e.How = strings.Join(hows, "")
		for _, ne := range per {
			ne.How = ""
		}
		return e
	}
	var each []string
	for i, n := range counted {
		if i == maxHowNodes {
			each = append(each, fmt.Sprintf("%d more nodes (each node's in by_node)", len(counted)-i))
			break
		}
		each = append(each, n+": "+per[n].How)
	}
	e.How = strings.Join(each, " | ")
	return e
}

// Whole says whether the energy is all of a job's nnodes' (a report made before nodes were
// summed names the batch host's only).
func (e *Energy) Whole(nnodes int) bool { return !someNodes(e, nnodes) }

// energyFacts is the energy as the digest's facts give it: "0.45 kWh", "12 Wh", with the
// emissions where the site gives its factor; "" where it is not the whole job's (a
// multi-node job's other nodes are not counted: EnergyLine names the node).
func energyFacts(e *Energy, nnodes int) string {
	if e == nil || someNodes(e, nnodes) {
		return ""
	}
	s := KWh(e.KWh)
	if e.CO2Grams > 0 {
		s += ", " + grams(e.CO2Grams) + " CO2e"
	}
	return s
}

// someNodes says whether the energy counts fewer of the job's nodes than it ran on.
func someNodes(e *Energy, nnodes int) bool {
	n := max(e.NodesCounted, len(e.Nodes))
	return n > 0 && nnodes > n
}

// EnergyLine says (the text digest: after the findings) what a report's energy is made of,
// whether it is an estimate, and what it emitted ("" : no energy). How each part was
// measured is in the report's Energy.How (JSON, HTML).
func EnergyLine(r Report) string {
	e := r.Energy
	if e == nil {
		return ""
	}
	names := []struct{ key, name string }{{"cpu", "processors"}, {"dram", "memory"}, {"platform", "platform"}, {"gpus", "GPUs"}}
	var parts, within []string
	for _, n := range names {
		if v, ok := e.Parts[n.key]; ok {
			parts = append(parts, n.name+" "+KWh(v/3.6e6))
		}
		if v, ok := e.Within[n.key]; ok {
			within = append(within, n.name+" "+KWh(v/3.6e6))
		}
	}
	s := "Energy: " + KWh(e.KWh)
	switch n := max(e.NodesCounted, len(e.Nodes)); {
	case someNodes(e, r.NNodes) && n == 1:
		s = "Energy on " + strings.Join(e.Nodes, ", ") + " (not on the job's other nodes): " + KWh(e.KWh)
	case someNodes(e, r.NNodes):
		s = fmt.Sprintf("Energy on %d of the job's %d nodes (not on the others): %s", n, r.NNodes, KWh(e.KWh))
	}
	multi := e.NodesCounted > 1
	var about []string
	node, metered := e.Parts["node"]
	if metered {
		m := "the whole node's, from its own meter"
		switch {
		case multi && len(parts) == 0:
			m = "the whole nodes', each from its own meter"
		case multi:
			// Some nodes by their meters, the others by RAPL and NVML.
			m = "the whole node's from its own meter on " + nodesMetered(e) + " (" + KWh(node/3.6e6) + "), the others' parts"
		}
		if len(within) > 0 {
			m += "; of it " + strings.Join(within, ", ")
		}
		about = append(about, m)
	}
	if len(parts) > 1 || metered && len(parts) > 0 {
		about = append(about, strings.Join(parts, ", "))
	}
	meter := "the node's own meter"
	if multi {
		meter = "a node's own meter"
	}
	switch {
	case strings.Contains(e.How, "gave no reading") && metered && !multi:
		about = append(about, meter+" gave no reading for part of the job: that part is not counted")
	case strings.Contains(e.How, "gave no reading"):
		about = append(about, meter+" gave no reading for part of the job: its fans, disks and power supply are not counted")
	}
	if e.Estimate {
		about = append(about, "a share of a shared node's by CPU time and memory, an estimate")
	}
	if len(about) > 0 {
		s += " (" + strings.Join(about, "; ") + ")"
	}
	if e.CO2Grams > 0 {
		s += fmt.Sprintf(", about %s CO2e at %s g per kWh", grams(e.CO2Grams), round2(e.CO2PerKWh))
	}
	return s + "."
}

// nodesMetered says on how many of the nodes counted the node's own meter read the job
// ("some nodes" where each node's energy is not at hand).
func nodesMetered(e *Energy) string {
	if len(e.ByNode) == 0 {
		return "some nodes"
	}
	n := 0
	for _, ne := range e.ByNode {
		if _, ok := ne.Parts["node"]; ok {
			n++
		}
	}
	return fmt.Sprintf("%d of %d nodes", n, len(e.ByNode))
}

// KWh writes energy in kWh, or Wh below a tenth of a kWh, to 2 significant digits.
func KWh(kwh float64) string {
	switch {
	case kwh >= 0.1:
		return round2(kwh) + " kWh"
	case kwh*1000 >= 0.01:
		return round2(kwh*1000) + " Wh"
	}
	return "0 Wh"
}

// grams writes a mass of CO2 in g, or kg from 1000 g, to 2 significant digits.
func grams(g float64) string {
	if g >= 1000 {
		return round2(g/1000) + " kg"
	}
	return round2(g) + " g"
}

// round2 writes v to 2 significant digits, without an exponent ("3.2", "450", "0.012").
func round2(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	p := math.Pow(10, math.Floor(math.Log10(math.Abs(v)))-1)
	return strconv.FormatFloat(math.Round(v/p)*p, 'f', max(0, -int(math.Floor(math.Log10(p)))), 64)
}
