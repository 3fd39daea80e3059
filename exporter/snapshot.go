package exporter

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Emit gives one value of a metric of the catalog, with its labels' values in the
// catalog's order.
type Emit func(name string, value float64, labels ...string)

// Snapshot gives the values of some metrics at a scrape, by calling emit for each.
type Snapshot func(emit Emit)

// snapshot is a prometheus.Collector whose metrics are made at each scrape.
type snapshot struct {
	descs map[string]*prometheus.Desc
	kinds map[string]prometheus.ValueType
	// keep are the indices of the labels each metric keeps (nil: all).
	keep map[string][]int
	f    Snapshot
}

// NewSnapshot registers on r a collector that calls f at every scrape for the values of
// the metrics names (gauges or counters of the catalog). A value of a metric not in
// names, or with the wrong number of labels, is reported as an error of the scrape. The
// labels omit name are left out of every metric that has them (f still gives their
// values): what a site does not want scrapers to learn.
func NewSnapshot(r prometheus.Registerer, names []string, f Snapshot, omit ...string) {
	s := &snapshot{descs: map[string]*prometheus.Desc{}, kinds: map[string]prometheus.ValueType{}, keep: map[string][]int{}, f: f}
	for _, n := range names {
		var d Def
		for _, c := range catalog {
			if c.Name == n {
				d = c
			}
		}
		switch d.Kind {
		case Gauge:
			s.kinds[n] = prometheus.GaugeValue
		case Counter:
			s.kinds[n] = prometheus.CounterValue
		default:
			panic(fmt.Sprintf("exporter: %q is not a gauge or counter of the catalog", n))
		}
		labels := d.Labels
		if slices.ContainsFunc(d.Labels, func(l string) bool { return slices.Contains(omit, l) }) {
			labels = nil
			for i, l := range d.Labels {
				if !slices.Contains(omit, l) {
					labels = append(labels, l)
					s.keep[n] = append(s.keep[n], i)
				}
			}
			s.keep[n] = append([]int{}, s.keep[n]...) // not nil: some are left out
		}
		s.descs[n] = prometheus.NewDesc(d.Name, d.Help, labels, nil)
	}
	r.MustRegister(s)
}

func (s *snapshot) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
}

func (s *snapshot) Collect(ch chan<- prometheus.Metric) {
	s.f(func(name string, v float64, labels ...string) {
		d, ok := s.descs[name]
		if !ok {
			ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("persyst_invalid", "", nil, nil), fmt.Errorf("metric %q not declared", name))
			return
		}
		if keep, ok := s.keep[name]; ok && len(labels) > 0 {
			kept := make([]string, 0, len(keep))
			for _, i := range keep {
				if i < len(labels) {
					kept = append(kept, labels[i])
				}
			}
			labels = kept
		}
		m, err := prometheus.NewConstMetric(d, s.kinds[name], v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	})
}
