package exporter

import (
	"fmt"

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
	f     Snapshot
}

// NewSnapshot registers on r a collector that calls f at every scrape for the values of
// the metrics names (gauges or counters of the catalog). A value of a metric not in
// names, or with the wrong number of labels, is reported as an error of the scrape.
func NewSnapshot(r prometheus.Registerer, names []string, f Snapshot) {
	s := &snapshot{descs: map[string]*prometheus.Desc{}, kinds: map[string]prometheus.ValueType{}, f: f}
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
		s.descs[n] = prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
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
		m, err := prometheus.NewConstMetric(d, s.kinds[name], v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	})
}
