// Package exporter serves persyst's agents' Prometheus metrics on /metrics: the node
// daemon's, the collectors', the sync agents' and the frontend's own activity, and the
// node daemon's running jobs.
//
// Every metric persyst exports is a Def of the catalog (Defs); docs/prometheus.md is
// generated from it (go test ./exporter -update) and a test keeps the two in step. An
// agent makes its metrics with the constructors (NewDaemon, NewCollector, ...), which
// register them on a registry of its own (NewRegistry): there is no global registry.
//
// Values known only at scrape time (jobs by state, a running job's latest interval) come
// from a Snapshot, a function the agent gives, called on every scrape. The job metrics
// are made that way: a job's series exist while it runs and are gone at the next scrape
// after it ended, and their number is bounded by the node's running jobs.
//
// # Who may scrape
//
// Serve binds the address it is given (persyst.conf's *MetricsAddr keys: off unless set,
// and the host part is explicit) and answers only clients whose address lies in Allow
// (MetricsAllow; loopback when unset): the job metrics name jobs and users, which are a
// site's private data. Others get 403, and a refusal is logged at most once a minute,
// with the count, whatever a client sends. Requests are bounded: header size, time, and
// scrapes in flight.
package exporter
