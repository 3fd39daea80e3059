package digest

import (
	"fmt"
	"math"
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
	// Nodes are the nodes whose energy is counted: of a multi-node job, the batch host's
	// only (the other nodes' is not summed yet).
	Nodes []string `json:"nodes,omitempty"`
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

// energyOf is a job's energy from what was measured of it (nil: nothing measured it).
func energyOf(m sample.Summary, nodes []string, co2PerKWh float64) *Energy {
	parts, within := energyParts(m.Totals)
	if len(parts) == 0 {
		return nil
	}
	how := m.Methods[sample.MethodEnergy]
	if _, ok := parts["gpus"]; ok || within["gpus"] > 0 {
		how = strings.TrimPrefix(how+"; GPUs: NVML", "; ")
	}
	e := &Energy{Parts: parts, Within: within, How: how, Estimate: strings.Contains(how, "estimate")}
	for _, v := range parts {
		e.Joules += v
	}
	e.KWh = e.Joules / 3.6e6
	if len(nodes) > 0 {
		e.Nodes = nodes[:1]
	}
	if co2PerKWh > 0 {
		e.CO2PerKWh, e.CO2Grams = co2PerKWh, e.KWh*co2PerKWh
	}
	return e
}

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
func someNodes(e *Energy, nnodes int) bool { return len(e.Nodes) > 0 && nnodes > len(e.Nodes) }

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
	if someNodes(e, r.NNodes) {
		s = "Energy on " + strings.Join(e.Nodes, ", ") + " (not on the job's other nodes): " + KWh(e.KWh)
	}
	var about []string
	_, metered := e.Parts["node"]
	if metered {
		m := "the whole node's, from its own meter"
		if len(within) > 0 {
			m += "; of it " + strings.Join(within, ", ")
		}
		about = append(about, m)
	}
	if len(parts) > 1 {
		about = append(about, strings.Join(parts, ", "))
	}
	switch {
	case strings.Contains(e.How, "gave no reading") && metered:
		about = append(about, "the node's own meter gave no reading for part of the job: that part is not counted")
	case strings.Contains(e.How, "gave no reading"):
		about = append(about, "the node's own meter gave no reading for part of the job: its fans, disks and power supply are not counted")
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
