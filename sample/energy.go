package sample

import (
	"math"
	"strings"
)

// EnergyMetrics are the metrics a job's energy is made of (the digest's Energy): what a
// node carries of a job to its batch host, which sums a multi-node job's nodes.
func EnergyMetrics() []string {
	return []string{EnergyPkgJoules, EnergyRAMJoules, EnergyPsysJoules, EnergyNodeJoules, EnergyNodeMissedSeconds, GPUEnergyJoules}
}

// Energy is a job's energy on one node so far: its meter's totals of the EnergyMetrics
// and how they were measured (Summary.Methods' MethodEnergy). No Totals: nothing
// measured it.
type Energy struct {
	Totals map[string]float64
	How    string
}

// EnergyOf is the energy in a summary's totals and methods.
func EnergyOf(totals map[string]float64, methods map[string]string) Energy {
	e := Energy{How: methods[MethodEnergy]}
	for _, k := range EnergyMetrics() {
		if v, ok := totals[k]; ok {
			if e.Totals == nil {
				e.Totals = map[string]float64{}
			}
			e.Totals[k] = v
		}
	}
	return e
}

// maxEnergyHow bounds how an energy was measured as another agent sends it.
const maxEnergyHow = 512

// CleanEnergy is an energy another agent sent, as it may be taken: the energy metrics
// only, each a finite count of zero or more, how it was measured cut to a bound. false:
// nothing of it can be taken.
func CleanEnergy(totals map[string]float64, how string) (Energy, bool) {
	e := Energy{}
	for _, k := range EnergyMetrics() {
		v, ok := totals[k]
		if !ok {
			continue
		}
		if !(v >= 0) || math.IsInf(v, 0) {
			return Energy{}, false
		}
		if e.Totals == nil {
			e.Totals = map[string]float64{}
		}
		e.Totals[k] = v
	}
	if e.Totals == nil {
		return Energy{}, false
	}
	if len(how) > maxEnergyHow {
		how = strings.ToValidUTF8(how[:maxEnergyHow], "")
	}
	e.How = how
	return e, true
}
