package htmlreport

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
)

// Cycle is one property's values over a job's devices in one cycle, as a collector
// stores them: the quantiles (Quantiles[0] the least, the last the greatest) and the
// share of the devices where the property was severe.
type Cycle struct {
	Time      time.Time
	Quantiles []float64
	Share     float64
}

// CyclesInput is a job's report and its properties' cycles from a collector's database.
type CyclesInput struct {
	Report digest.Report
	Source string             // which database
	Cycles map[string][]Cycle // by property key
}

// FromCycles builds a job's view from a collector's database: a chart per property (the
// findings' first) of its median over the job's devices and the range from its 10th to
// its 90th percentile, and the findings' lanes from the cycles where they held. A
// database keeps no per-CPU values: there is no heat map.
func FromCycles(in CyclesInput) View {
	v := View{Report: in.Report.Clean(), Source: in.Source}
	v.Notes = append(v.Notes, "No heat map: a collector's database keeps each property's deciles over the job's CPUs, not each CPU's values (persyst report --html on the job's nodes draws it from the node daemons).")
	keys := chartOrder(in.Cycles, v.Report.Findings)
	names, units := propertyNames(v.Report)
	v.Lanes = cycleLanes(v.Report.Findings, in.Cycles)
	for _, k := range keys {
		if len(v.Charts) == MaxCharts {
			v.Notes = append(v.Notes, fmt.Sprintf("%d properties have cycles; the first %d are drawn.", len(keys), MaxCharts))
			break
		}
		med, band := quantileLines(in.Cycles[k])
		if len(med.Points) == 0 {
			continue
		}
		// The view's time is that of the cycles drawn.
		for _, p := range med.Points {
			if v.Start.IsZero() || p.T.Before(v.Start) {
				v.Start = p.T
			}
			if p.T.After(v.End) {
				v.End = p.T
			}
		}
		name := names[k]
		if name == "" {
			name = k
		}
		v.Charts = append(v.Charts, Chart{ID: k, Title: name, Unit: units[k], Shade: v.Lanes,
			Note:  "Median over the job's devices, and the range from their 10th to their 90th percentile.",
			Lines: []Line{thin(med)}, Bands: []Band{thinBand(band)}})
	}
	if v.Start.IsZero() {
		v.Notes = append(v.Notes, "No cycles in the database: nothing to draw over time.")
	}
	return v
}

// chartOrder is the order the properties with cycles are charted in: the findings
// first, most important first, then the others by key.
func chartOrder(cycles map[string][]Cycle, findings []properties.Result) []string {
	keys := make([]string, 0, len(cycles))
	for k, cs := range cycles {
		if len(cs) > 0 {
			keys = append(keys, k)
		}
	}
	rank := map[string]int{}
	for i, f := range findings {
		rank[f.Key] = i + 1
	}
	sort.Slice(keys, func(a, b int) bool {
		ra, rb := rank[keys[a]], rank[keys[b]]
		switch {
		case ra > 0 && rb > 0:
			return ra < rb
		case ra > 0 || rb > 0:
			return ra > 0
		}
		return keys[a] < keys[b]
	})
	return keys
}

// propertyNames are the names and units of the report's properties by key (a finding's
// where a property is both).
func propertyNames(r digest.Report) (names, units map[string]string) {
	names, units = map[string]string{}, map[string]string{}
	for _, p := range append(append([]propertyName{}, fromResults(r.Properties)...), fromResults(r.Findings)...) {
		names[p.key], units[p.key] = p.name, p.unit
	}
	return names, units
}

// cycleLanes are the findings' lanes (as many as there are lane colours): each held in
// the intervals of the cycles where it was severe on some of the job's devices.
func cycleLanes(findings []properties.Result, cycles map[string][]Cycle) []Lane {
	var lanes []Lane
	for _, f := range findings {
		if len(lanes) == len(laneColors) {
			break
		}
		l := Lane{Key: f.Key, Name: f.Name, Color: laneColors[len(lanes)]}
		cs := cycles[f.Key]
		for i, c := range cs {
			if c.Share > 0 {
				l.Spans = append(l.Spans, Span{cycleFrom(cs, i), c.Time})
			}
		}
		l.Spans = mergeSpans(l.Spans)
		lanes = append(lanes, l)
	}
	return lanes
}

// cycleFrom is when the interval of cycle i began: at the cycle before it; the first
// cycle's interval is taken as long as the second's (a minute when it is alone).
func cycleFrom(cs []Cycle, i int) time.Time {
	switch {
	case i > 0:
		return cs[i-1].Time
	case len(cs) > 1:
		return cs[i].Time.Add(-cs[1].Time.Sub(cs[0].Time))
	}
	return cs[i].Time.Add(-time.Minute)
}

// quantileLines are a property's median over the job's devices at each cycle, and the
// range from their 10th to their 90th percentile, unthinned; a cycle with fewer than
// three quantiles is left out.
func quantileLines(cs []Cycle) (Line, Band) {
	med := Line{Name: "median"}
	band := Band{Name: "10-90%"}
	for _, cy := range cs {
		if len(cy.Quantiles) < 3 {
			continue
		}
		med.Points = append(med.Points, Point{cy.Time, quantile.SortedAt(cy.Quantiles, 0.5)})
		band.Lo = append(band.Lo, Point{cy.Time, quantile.SortedAt(cy.Quantiles, 0.1)})
		band.Hi = append(band.Hi, Point{cy.Time, quantile.SortedAt(cy.Quantiles, 0.9)})
	}
	return med, band
}

type propertyName struct{ key, name, unit string }

func fromResults(rs []properties.Result) []propertyName {
	out := make([]propertyName, 0, len(rs))
	for _, r := range rs {
		out = append(out, propertyName{r.Key, r.Name, r.Unit})
	}
	return out
}

// FromStore builds the view of the job with the store's key from a database of the
// agent tree (FromCycles).
func FromStore(ctx context.Context, st *store.Store, source string, job store.Key, r *digest.Report) (View, error) {
	keys, err := st.KeysAt(ctx, job)
	if err != nil {
		return View{}, err
	}
	in := CyclesInput{Report: *r, Source: "the database " + source, Cycles: map[string][]Cycle{}}
	for _, k := range keys {
		cs, err := st.CyclesAt(ctx, job, k)
		if err != nil {
			return View{}, err
		}
		for _, c := range cs {
			in.Cycles[k] = append(in.Cycles[k], Cycle{Time: c.Time, Quantiles: c.Summary.Quantiles, Share: c.TimeShare})
		}
	}
	return FromCycles(in), nil
}
