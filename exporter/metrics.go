package exporter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a registry for one agent: persyst_build_info, and Go's and the
// process's own metrics.
func NewRegistry(role, version string) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := def("persyst_build_info", Gauge)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: d.Name, Help: d.Help}, d.Labels)
	g.WithLabelValues(role, version).Set(1)
	r.MustRegister(g)
	return r
}

// Daemon is the node daemon's own metrics. A nil *Daemon counts nothing.
type Daemon struct {
	events            *prometheus.CounterVec
	eventSeconds      *prometheus.HistogramVec
	cycleSeconds      prometheus.Histogram
	digests           *prometheus.CounterVec
	accountingWrites  *prometheus.CounterVec
	accountingSeconds prometheus.Histogram
	unannounced       prometheus.Counter
	notices           *prometheus.CounterVec
}

// NewDaemon registers the node daemon's metrics on r.
func NewDaemon(r prometheus.Registerer) *Daemon {
	return &Daemon{
		events:            counterVec(r, "persyst_daemon_events_total"),
		eventSeconds:      histogramVec(r, "persyst_daemon_event_duration_seconds"),
		cycleSeconds:      histogram(r, "persyst_daemon_cycle_duration_seconds"),
		digests:           counterVec(r, "persyst_daemon_digests_total"),
		accountingWrites:  counterVec(r, "persyst_daemon_accounting_writes_total"),
		accountingSeconds: histogram(r, "persyst_daemon_accounting_write_duration_seconds"),
		unannounced:       counter(r, "persyst_daemon_unannounced_jobs_total"),
		notices:           counterVec(r, "persyst_daemon_notices_total"),
	}
}

// Notice counts a part of a notice to a running job (output, mail, command) for a reason
// (gpu_idle, cpu_idle), sent or not.
func (m *Daemon) Notice(reason, part, result string) {
	if m != nil {
		m.notices.WithLabelValues(reason, part, result).Inc()
	}
}

// The lifecycle events the daemon counts by name; any other is "other", so that what a
// client sends cannot add series.
var eventNames = map[string]bool{"job_start": true, "step_start": true, "step_end": true, "job_end": true}

// Event counts a lifecycle event handled in d with result (ok, refused, error).
func (m *Daemon) Event(event, result string, d time.Duration) {
	if m == nil {
		return
	}
	if !eventNames[event] {
		event = "other"
	}
	m.events.WithLabelValues(event, result).Inc()
	m.eventSeconds.WithLabelValues(event).Observe(d.Seconds())
}

// Cycle records one cycle's read time.
func (m *Daemon) Cycle(d time.Duration) {
	if m != nil {
		m.cycleSeconds.Observe(d.Seconds())
	}
}

// Digest counts a digest written ("written") or not (why).
func (m *Daemon) Digest(result string) {
	if m != nil {
		m.digests.WithLabelValues(result).Inc()
	}
}

// Accounting counts a summary written into Slurm accounting ("written") or not (why),
// and how long writing took (d 0: nothing was tried).
func (m *Daemon) Accounting(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.accountingWrites.WithLabelValues(result).Inc()
	if d > 0 {
		m.accountingSeconds.Observe(d.Seconds())
	}
}

// Unannounced counts a job Slurm ran that the SPANK plugin never announced.
func (m *Daemon) Unannounced() {
	if m != nil {
		m.unannounced.Inc()
	}
}

// Collector is a collector's own metrics. A nil *Collector counts nothing.
type Collector struct {
	records prometheus.Counter
	pushes  *prometheus.CounterVec
	refused *prometheus.CounterVec
	delay   prometheus.Histogram
}

// NewCollector registers a collector's metrics on r; jobs says how many jobs it holds.
func NewCollector(r prometheus.Registerer, jobs func() int) *Collector {
	NewSnapshot(r, []string{"persyst_collector_jobs"}, func(emit Emit) {
		emit("persyst_collector_jobs", float64(jobs()))
	})
	return &Collector{records: counter(r, "persyst_collector_records_total"), pushes: counterVec(r, "persyst_collector_pushes_total"),
		refused: counterVec(r, "persyst_collector_refused_pushes_total"), delay: histogram(r, "persyst_collector_store_delay_seconds")}
}

// Push counts a push of n records, taken (refused "") or refused, and why.
func (m *Collector) Push(n int, refused string) {
	if m == nil {
		return
	}
	if refused != "" {
		m.pushes.WithLabelValues("refused").Inc()
		m.refused.WithLabelValues(refused).Inc()
		return
	}
	m.pushes.WithLabelValues("ok").Inc()
	m.records.Add(float64(n))
}

// Stored records the time from a cycle's timestamp to its summary stored.
func (m *Collector) Stored(d time.Duration) {
	if m != nil {
		m.delay.Observe(d.Seconds())
	}
}

// TreeRefusals registers, on r, what the agent tree's authentication of this agent
// refused (refused: the counts by stage, treeauth.Tree.RefusedBy).
func TreeRefusals(r prometheus.Registerer, refused func() map[string]uint64) {
	NewSnapshot(r, []string{"persyst_tree_refused_total"}, func(emit Emit) {
		for stage, n := range refused() {
			emit("persyst_tree_refused_total", float64(n), stage)
		}
	})
}

// Sync is a sync agent's own metrics. A nil *Sync counts nothing.
type Sync struct {
	parts *prometheus.CounterVec
}

// NewSync registers a sync agent's metrics on r.
func NewSync(r prometheus.Registerer) *Sync {
	return &Sync{parts: counterVec(r, "persyst_sync_parts_total")}
}

// Part counts a part received, accepted or refused.
func (m *Sync) Part(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.parts.WithLabelValues("ok").Inc()
	} else {
		m.parts.WithLabelValues("refused").Inc()
	}
}

// Frontend is the frontend's own metrics. A nil *Frontend counts nothing.
type Frontend struct {
	balance       prometheus.Histogram
	jobs          prometheus.Gauge
	up            *prometheus.GaugeVec
	storeUp       prometheus.Gauge
	storeFailures prometheus.Counter
}

// NewFrontend registers the frontend's metrics on r.
func NewFrontend(r prometheus.Registerer) *Frontend {
	jd, ud, sd := def("persyst_frontend_jobs", Gauge), def("persyst_frontend_agents_up", Gauge), def("persyst_frontend_store_up", Gauge)
	f := &Frontend{
		balance:       histogram(r, "persyst_frontend_balance_duration_seconds"),
		jobs:          prometheus.NewGauge(prometheus.GaugeOpts{Name: jd.Name, Help: jd.Help}),
		up:            prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ud.Name, Help: ud.Help}, ud.Labels),
		storeUp:       prometheus.NewGauge(prometheus.GaugeOpts{Name: sd.Name, Help: sd.Help}),
		storeFailures: counter(r, "persyst_frontend_store_failures_total"),
	}
	r.MustRegister(f.jobs, f.up, f.storeUp)
	return f
}

// StoreUp records whether the site's store answered the latest check.
func (m *Frontend) StoreUp(up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.storeUp.Set(v)
}

// StoreFailed counts a report or notice the site's store did not keep.
func (m *Frontend) StoreFailed() {
	if m != nil {
		m.storeFailures.Inc()
	}
}

// Cycle records a balancing cycle: its time, the jobs placed, and the agents that
// answered.
func (m *Frontend) Cycle(d time.Duration, jobs, collectors, syncs int) {
	if m == nil {
		return
	}
	m.balance.Observe(d.Seconds())
	m.jobs.Set(float64(jobs))
	m.up.WithLabelValues("collector").Set(float64(collectors))
	m.up.WithLabelValues("sync").Set(float64(syncs))
}
