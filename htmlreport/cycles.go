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
	keys := make([]string, 0, len(in.Cycles))
	for k, cs := range in.Cycles {
		if len(cs) > 0 {
			keys = append(keys, k)
		}
	}
	rank := map[string]int{}
	for i, f := range v.Report.Findings {
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
	names, units := map[string]string{}, map[string]string{}
	for _, p := range append(append([]propertyName{}, fromResults(v.Report.Properties)...), fromResults(v.Report.Findings)...) {
		names[p.key], units[p.key] = p.name, p.unit
	}
	for _, f := range v.Report.Findings {
		if len(v.Lanes) == len(laneColors) {
			break
		}
		l := Lane{Key: f.Key, Name: f.Name, Color: laneColors[len(v.Lanes)]}
		cs := in.Cycles[f.Key]
		for i, c := range cs {
			if c.Share <= 0 {
				continue
			}
			from := c.Time.Add(-time.Minute)
			if i > 0 {
				from = cs[i-1].Time
			} else if len(cs) > 1 {
				from = c.Time.Add(-cs[1].Time.Sub(cs[0].Time))
			}
			l.Spans = append(l.Spans, Span{from, c.Time})
		}
		l.Spans = mergeSpans(l.Spans)
		v.Lanes = append(v.Lanes, l)
	}
	for _, k := range keys {
		if len(v.Charts) == MaxCharts {
			v.Notes = append(v.Notes, fmt.Sprintf("%d properties have cycles; the first %d are drawn.", len(keys), MaxCharts))
			break
		}
		name := names[k]
		if name == "" {
			name = k
		}
		c := Chart{ID: k, Title: name, Unit: units[k], Shade: v.Lanes,
			Note: "Median over the job's devices, and the range from their 10th to their 90th percentile."}
		med := Line{Name: "median"}
		band := Band{Name: "10-90%"}
		for _, cy := range in.Cycles[k] {
			q := len(cy.Quantiles) - 1
			if q < 2 {
				continue
			}
			if v.Start.IsZero() || cy.Time.Before(v.Start) {
				v.Start = cy.Time
			}
			if cy.Time.After(v.End) {
				v.End = cy.Time
			}
			med.Points = append(med.Points, Point{cy.Time, quantile.SortedAt(cy.Quantiles, 0.5)})
			band.Lo = append(band.Lo, Point{cy.Time, quantile.SortedAt(cy.Quantiles, 0.1)})
			band.Hi = append(band.Hi, Point{cy.Time, quantile.SortedAt(cy.Quantiles, 0.9)})
		}
		if len(med.Points) == 0 {
			continue
		}
		c.Lines, c.Bands = []Line{thin(med)}, []Band{thinBand(band)}
		v.Charts = append(v.Charts, c)
	}
	if v.Start.IsZero() {
		v.Notes = append(v.Notes, "No cycles in the database: nothing to draw over time.")
	}
	return v
}

type propertyName struct{ key, name, unit string }

func fromResults(rs []properties.Result) []propertyName {
	out := make([]propertyName, 0, len(rs))
	for _, r := range rs {
		out = append(out, propertyName{r.Key, r.Name, r.Unit})
	}
	return out
}

// FromStore builds a job's view from a database of the agent tree (FromCycles).
func FromStore(ctx context.Context, st *store.Store, source string, r *digest.Report) (View, error) {
	keys, err := st.Keys(ctx, r.JobID)
	if err != nil {
		return View{}, err
	}
	in := CyclesInput{Report: *r, Source: "the database " + source, Cycles: map[string][]Cycle{}}
	for _, k := range keys {
		cs, err := st.Cycles(ctx, r.JobID, k)
		if err != nil {
			return View{}, err
		}
		for _, c := range cs {
			in.Cycles[k] = append(in.Cycles[k], Cycle{Time: c.Time, Quantiles: c.Summary.Quantiles, Share: c.TimeShare})
		}
	}
	return FromCycles(in), nil
}
