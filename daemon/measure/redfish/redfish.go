// Package redfish reads a node's own power meter, its BMC, through Redfish: the
// chassis's EnvironmentMetrics (PowerWatts, EnergyJoules; Redfish 2020.4 on) or, from
// older BMCs, its Power resource (PowerControl's PowerConsumedWatts). A Meter polls the
// BMC in the background, at most once per cycle and each request bounded by a timeout,
// so that a BMC that is slow or gone never holds up a node's cycle; the jobs' sources
// read the energy counted so far without waiting for it.
//
// The node's energy is the BMC's own joules counter where it gives one, else its power
// readings integrated over time (the trapezoid between two readings). A stretch with no
// reading longer than the meter's gap limit, or a BMC counter that went backwards, is
// not counted and counts as a reset: the intervals over it are not measured.
//
// Parse reads a Redfish document (a chassis, or one of its power resources) and is a
// pure function of its bytes, tested on fixtures.
package redfish

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// Reading is what one power resource of a BMC says.
type Reading struct {
	Watts float64 // the node's power now
	// Joules is the BMC's energy counter (EnvironmentMetrics' EnergyJoules), where
	// HasJoules.
	Joules    float64
	HasJoules bool
}

// Document is a parsed Redfish document: a chassis's links to its power resources, or a
// power resource's reading.
type Document struct {
	// EnvironmentMetrics and Power are a chassis's links ("" : none).
	EnvironmentMetrics, Power string
	// Reading is a power resource's; HasReading says the document had one.
	Reading    Reading
	HasReading bool
}

// maxDocument bounds what is read of a BMC's answer.
const maxDocument = 1 << 20

type link struct {
	ID string `json:"@odata.id"`
}

type sensor struct {
	Reading *float64
}

type document struct {
	EnvironmentMetrics *link
	Power              json.RawMessage // a chassis's link, or (a Power resource) absent
	PowerWatts         *sensor
	EnergyJoules       *sensor
	PowerControl       []struct {
		PowerConsumedWatts *float64
	}
}

// Parse reads a chassis or a power resource (EnvironmentMetrics or Power).
func Parse(r io.Reader) (Document, error) {
	var d document
	dec := json.NewDecoder(io.LimitReader(r, maxDocument))
	if err := dec.Decode(&d); err != nil {
		return Document{}, fmt.Errorf("redfish: %w", err)
	}
	var out Document
	if d.EnvironmentMetrics != nil {
		out.EnvironmentMetrics = d.EnvironmentMetrics.ID
	}
	var l link
	if len(d.Power) > 0 && json.Unmarshal(d.Power, &l) == nil {
		out.Power = l.ID
	}
	switch {
	case d.PowerWatts != nil && d.PowerWatts.Reading != nil:
		out.Reading.Watts, out.HasReading = *d.PowerWatts.Reading, true
		if d.EnergyJoules != nil && d.EnergyJoules.Reading != nil {
			out.Reading.Joules, out.Reading.HasJoules = *d.EnergyJoules.Reading, true
		}
	case len(d.PowerControl) > 0:
		// The first control is the chassis's own (the others, where there are more,
		// are parts of it: summing them would count twice).
		if w := d.PowerControl[0].PowerConsumedWatts; w != nil {
			out.Reading.Watts, out.HasReading = *w, true
		}
	}
	if out.HasReading {
		r := out.Reading
		if !(r.Watts >= 0) || math.IsInf(r.Watts, 0) || (r.HasJoules && (!(r.Joules >= 0) || math.IsInf(r.Joules, 0))) {
			return Document{}, fmt.Errorf("redfish: a reading of %v W, %v J: want numbers of 0 or more", r.Watts, r.Joules)
		}
	}
	return out, nil
}

// ErrNoReading: the resource gave no power reading (the BMC has no power sensor there).
var ErrNoReading = errors.New("redfish: no power reading in the resource")
