package exporter

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is a metric's Prometheus type.
type Kind string

// The metric types persyst exports.
const (
	Counter   Kind = "counter"
	Gauge     Kind = "gauge"
	Histogram Kind = "histogram"
)

// Roles: the agents that export metrics ("all": every one).
const (
	RoleAll       = "all"
	RoleDaemon    = "daemon"
	RoleCollector = "collector"
	RoleSync      = "sync"
	RoleFrontend  = "frontend"
)

// Def is one metric: its name, type, labels, which agent exports it, and what it is.
type Def struct {
	Name    string
	Kind    Kind
	Role    string
	Labels  []string
	Help    string
	Buckets []float64 // histograms
}

// Durations of handling one thing (an event, a cycle, a write): 100 µs to 10 s.
var durationBuckets = prometheus.ExponentialBuckets(0.0001, 4, 9)

// Delays of data on its way through the tree: 0.125 s to 128 s.
var delayBuckets = prometheus.ExponentialBuckets(0.125, 2, 11)

// jobLabels are the labels of every job metric (user only where the site says so:
// persyst.conf's MetricsJobLabels).
var jobLabels = []string{"jobid", "user", "node"}

// catalog is every metric persyst exports (besides Go's and the process's own go_* and
// process_* metrics). Defs returns a copy.
var catalog = []Def{
	{Name: "persyst_build_info", Kind: Gauge, Role: RoleAll, Labels: []string{"role", "version"},
		Help: "Always 1: which persyst agent this is, and its version."},

	{Name: "persyst_daemon_events_total", Kind: Counter, Role: RoleDaemon, Labels: []string{"event", "result"},
		Help: "Job lifecycle events received from the SPANK plugin, by event (job_start, step_start, step_end, job_end, other) and result (ok, refused, error)."},
	{Name: "persyst_daemon_event_duration_seconds", Kind: Histogram, Role: RoleDaemon, Labels: []string{"event"},
		Help: "Time to handle a lifecycle event, from its arrival to the answer (job_end includes the digest).", Buckets: durationBuckets},
	{Name: "persyst_daemon_jobs", Kind: Gauge, Role: RoleDaemon, Labels: []string{"state"},
		Help: "Jobs in the node daemon's registry, by state (running, ended)."},
	{Name: "persyst_daemon_cycle_duration_seconds", Kind: Histogram, Role: RoleDaemon,
		Help: "Time to read every running job of the node at one cycle.", Buckets: durationBuckets},
	{Name: "persyst_daemon_perf_counters", Kind: Gauge, Role: RoleDaemon,
		Help: "perf_event counters open for the node's running jobs."},
	{Name: "persyst_daemon_digests_total", Kind: Counter, Role: RoleDaemon, Labels: []string{"result"},
		Help: "Digests for job output files, by result: written, or why not (no_output, not_regular, symlink, not_owner, unlinked, not_found, permission, timeout, off, no_job_facts, error)."},
	{Name: "persyst_daemon_notices_total", Kind: Counter, Role: RoleDaemon, Labels: []string{"reason", "part", "result"},
		Help: "Notices to running jobs that hold resources without using them (NoticeIdleGPUAfter, NoticeIdleCPUAfter), by reason (gpu_idle, cpu_idle), part (output: the line in the job's output file; mail; command: the site's NoticeCommand) and result (sent, failed, no_file)."},
	{Name: "persyst_daemon_unannounced_jobs_total", Kind: Counter, Role: RoleDaemon,
		Help: "Jobs Slurm ran on the node (a step's cgroup existed for 10 s) that persyst's SPANK plugin never announced to the daemon: more than 0 means slurmd did not load the plugin (run persyst check)."},
	{Name: "persyst_daemon_ship_queue", Kind: Gauge, Role: RoleDaemon,
		Help: "Cycles of property records waiting to be shipped to the agent tree."},
	{Name: "persyst_daemon_accounting_writes_total", Kind: Counter, Role: RoleDaemon, Labels: []string{"result"},
		Help: "Digest summaries for Slurm accounting (AdminComment), by result: written, or why not (present, no_room, off, error)."},
	{Name: "persyst_daemon_accounting_write_duration_seconds", Kind: Histogram, Role: RoleDaemon,
		Help: "Time to write a job's digest summary into Slurm accounting.", Buckets: durationBuckets},

	{Name: "persyst_job_cpus", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "A running job's CPUs on the node."},
	{Name: "persyst_job_cpus_busy", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "CPUs the job kept busy over its latest interval (CPU seconds per second)."},
	{Name: "persyst_job_idle_ratio", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "Share of the job's CPUs left idle over its latest interval (0 to 1)."},
	{Name: "persyst_job_memory_bytes", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "Memory the job used at its latest read, page cache included."},
	{Name: "persyst_job_read_bytes_per_second", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "Bytes the job's processes read per second over the latest interval (read(2) and friends)."},
	{Name: "persyst_job_write_bytes_per_second", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "Bytes the job's processes wrote per second over the latest interval."},
	{Name: "persyst_job_file_opens_per_second", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "Files the job opened per second over the latest interval."},
	{Name: "persyst_job_gpus", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "A running job's GPUs on the node, measured (NVIDIA's and AMD's)."},
	{Name: "persyst_job_gpu_info", Kind: Gauge, Role: RoleDaemon, Labels: []string{"jobid", "user", "node", "model"},
		Help: "1 for a running job's GPUs on the node, model naming them vendor first (NVIDIA H100 80GB HBM3, AMD Instinct MI250X)."},
	{Name: "persyst_job_gpus_busy", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "GPUs the job kept running kernels over its latest interval (GPU seconds busy per second, NVML utilization)."},
	{Name: "persyst_job_gpus_unused", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "The job's GPUs that ran no kernel over its latest interval."},
	{Name: "persyst_job_gpu_sm_active_ratio", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "Share of the job's GPUs' streaming multiprocessors busy over its latest interval (0 to 1; GPM, Hopper and newer)."},
	{Name: "persyst_job_gpu_memory_bytes", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "GPU memory the job held at its highest over its latest interval, all its GPUs on the node."},
	{Name: "persyst_job_gpu_power_watts", Kind: Gauge, Role: RoleDaemon, Labels: jobLabels,
		Help: "Power of the job's GPUs over its latest interval (GPUs not shared with other jobs)."},
	{Name: "persyst_job_energy_joules_total", Kind: Counter, Role: RoleDaemon, Labels: jobLabels,
		Help: "Energy the running job has used on the node so far: its processors and memory by RAPL (the node's while it has it alone, else its share by CPU time and memory, an estimate) and its GPUs by NVML."},
	{Name: "persyst_job_idle_seconds", Kind: Gauge, Role: RoleDaemon, Labels: []string{"jobid", "user", "node", "reason"},
		Help: "How long a running job has held resources without using them, on its batch host, by reason: gpu_idle (every GPU ran nothing), cpu_idle (CPUs under a tenth busy); no series while it uses them. Only where notices are on (NoticeIdleGPUAfter, NoticeIdleCPUAfter)."},
	{Name: "persyst_job_top_severity", Kind: Gauge, Role: RoleDaemon, Labels: []string{"jobid", "user", "node", "property"},
		Help: "Severity (0 to 1) of the job's most severe property in its latest interval, and which property it is."},

	{Name: "persyst_tree_refused_total", Kind: Counter, Role: RoleAll, Labels: []string{"stage"},
		Help: "Connections and calls of the agent tree this agent refused, by stage: handshake (authentication failed, or too many handshakes at once), storm (one agent's connections beyond 60 a minute), call (a call its identity may not make, such as a node pushing another node's records)."},

	{Name: "persyst_collector_records_total", Kind: Counter, Role: RoleCollector,
		Help: "Property records received from node daemons."},
	{Name: "persyst_collector_pushes_total", Kind: Counter, Role: RoleCollector, Labels: []string{"result"},
		Help: "Pushes of a cycle's records received, by result (ok, refused)."},
	{Name: "persyst_collector_refused_pushes_total", Kind: Counter, Role: RoleCollector, Labels: []string{"reason"},
		Help: "Pushes refused, by reason: malformed (a bad field, or more records than a push may hold), not_on_node (a job Slurm does not run on the node), full (the jobs a collector follows, the records a cycle holds), late (a cycle summarized and let go already), no_slurm (Slurm could not be asked; the node sends again)."},
	{Name: "persyst_collector_store_delay_seconds", Kind: Histogram, Role: RoleCollector,
		Help: "Time from a cycle's timestamp (the node's read) to its summary stored, per summary stored.", Buckets: delayBuckets},
	{Name: "persyst_collector_jobs", Kind: Gauge, Role: RoleCollector,
		Help: "Jobs the collector holds cycles of."},

	{Name: "persyst_sync_parts_total", Kind: Counter, Role: RoleSync, Labels: []string{"result"},
		Help: "Parts of big jobs' cycles received from collectors, by result (ok, refused)."},

	{Name: "persyst_frontend_balance_duration_seconds", Kind: Histogram, Role: RoleFrontend,
		Help: "Time of one balancing cycle: reading the running jobs, placing them, pushing the routes.", Buckets: durationBuckets},
	{Name: "persyst_frontend_jobs", Kind: Gauge, Role: RoleFrontend,
		Help: "Running jobs placed at the latest balancing cycle."},
	{Name: "persyst_frontend_agents_up", Kind: Gauge, Role: RoleFrontend, Labels: []string{"role"},
		Help: "Agents (collectors, sync agents) that answered at the latest cycle."},
	{Name: "persyst_frontend_store_up", Kind: Gauge, Role: RoleFrontend,
		Help: "1 while the site's store (SiteStore) answered the frontend's latest check (every 10 s), 0 while it does not: the jobs' reports it cannot keep meanwhile wait on their batch hosts."},
	{Name: "persyst_frontend_store_failures_total", Kind: Counter, Role: RoleFrontend,
		Help: "Jobs' final reports and notices the frontend could not keep in the site's store (refused: their batch hosts send them again for 15 minutes)."},
}

// Defs returns the catalog: every metric persyst exports.
func Defs() []Def {
	out := make([]Def, len(catalog))
	for i, d := range catalog {
		d.Labels = slices.Clone(d.Labels)
		d.Buckets = slices.Clone(d.Buckets)
		out[i] = d
	}
	return out
}

// def returns the catalog's entry; a name not in it is a programming error.
func def(name string, kind Kind) Def {
	for _, d := range catalog {
		if d.Name == name {
			if d.Kind != kind {
				panic(fmt.Sprintf("exporter: %s is a %s, not a %s", name, d.Kind, kind))
			}
			return d
		}
	}
	panic("exporter: no metric " + name + " in the catalog")
}

func counterVec(r prometheus.Registerer, name string) *prometheus.CounterVec {
	d := def(name, Counter)
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.Name, Help: d.Help}, d.Labels)
	r.MustRegister(c)
	return c
}

func counter(r prometheus.Registerer, name string) prometheus.Counter {
	d := def(name, Counter)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: d.Name, Help: d.Help})
	r.MustRegister(c)
	return c
}

func histogram(r prometheus.Registerer, name string) prometheus.Histogram {
	d := def(name, Histogram)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: d.Buckets})
	r.MustRegister(h)
	return h
}

func histogramVec(r prometheus.Registerer, name string) *prometheus.HistogramVec {
	d := def(name, Histogram)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: d.Buckets}, d.Labels)
	r.MustRegister(h)
	return h
}

// Reference is the metrics table of docs/prometheus.md, made from the catalog.
func Reference() string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | agent | what it is |\n|---|---|---|---|---|\n")
	for _, d := range catalog {
		labels := "none"
		if len(d.Labels) > 0 {
			labels = "`" + strings.Join(d.Labels, "`, `") + "`"
			if strings.HasPrefix(d.Name, "persyst_job_") {
				labels = strings.Replace(labels, "`user`", "`user`¹", 1)
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", d.Name, d.Kind, labels, d.Role, d.Help)
	}
	return b.String()
}
