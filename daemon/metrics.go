package daemon

import (
	"strconv"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/sample"
)

// snapshotNames are the metrics the daemon gives at each scrape (snapshot): the node's,
// then the per-job gauges.
var snapshotNames = []string{
	"persyst_daemon_jobs", "persyst_daemon_perf_counters", "persyst_daemon_ship_queue",
	"persyst_job_cpus", "persyst_job_cpus_busy", "persyst_job_idle_ratio", "persyst_job_memory_bytes",
	"persyst_job_read_bytes_per_second", "persyst_job_write_bytes_per_second", "persyst_job_file_opens_per_second",
	"persyst_job_gpus", "persyst_job_gpu_info", "persyst_job_gpus_busy", "persyst_job_gpus_unused", "persyst_job_gpu_sm_active_ratio",
	"persyst_job_gpu_memory_bytes", "persyst_job_gpu_power_watts", "persyst_job_energy_joules_total", "persyst_job_top_severity", "persyst_job_idle_seconds",
}

// nodeMetrics counts the node's metrics at the head of snapshotNames.
const nodeMetrics = 3

// snapshotMetrics are the metrics a scrape gives and the labels left out of them, for
// the site's MetricsJobLabels: "user,jobid" names jobs and their users, "jobid" (and "")
// jobs only, "none" gives no per-job gauges.
func snapshotMetrics(jobLabels string) (names, omit []string) {
	switch jobLabels {
	case "user,jobid":
		return snapshotNames, nil
	case "none":
		return snapshotNames[:nodeMetrics], nil
	}
	return snapshotNames, []string{"user"}
}

// snapshot gives the registry's jobs by state and, for every running job measured on this
// node, its latest interval. A value the node does not measure has no series.
func (m *Measurer) snapshot(reg *Registry, uplink Uplink, perJob bool) exporter.Snapshot {
	return func(emit exporter.Emit) {
		jobs := reg.Jobs()
		states := map[JobState]int{Running: 0, Ended: 0}
		users := map[uint32]string{}
		for _, j := range jobs {
			states[j.State]++
			if j.State == Running {
				users[j.JobID] = j.User
				if j.User == "" {
					users[j.JobID] = strconv.FormatUint(uint64(j.UID), 10)
				}
			}
		}
		for st, n := range states {
			emit("persyst_daemon_jobs", float64(n), string(st))
		}
		if q, ok := uplink.(interface{ Pending() int }); ok && uplink != nil {
			emit("persyst_daemon_ship_queue", float64(q.Pending()))
		}
		counters := 0
		for _, jm := range m.meters.sorted() {
			st, job := jm.now()
			if st == ended || job == nil {
				continue
			}
			meter := job.Meter()
			counters += meter.Counters()
			user, ok := users[jm.id]
			if !ok || !perJob {
				continue // not running in the registry (ending), or no per-job gauges
			}
			l, ok := job.Latest()
			if !ok {
				continue
			}
			lab := []string{strconv.FormatUint(uint64(jm.id), 10), user, m.node}
			jobGauges(l.Sample, len(meter.Spec().CPUs), func(name string, v float64) { emit(name, v, lab...) })
			sum := meter.Summary()
			if e := digest.EnergyJoules(sum.Totals); e >= 0 {
				emit("persyst_job_energy_joules_total", e, lab...)
			}
			if model := sum.Methods[sample.GPUModelMethod]; model != "" {
				emit("persyst_job_gpu_info", 1, append(lab, model)...)
			}
			emit("persyst_job_top_severity", l.Top.Severity, append(lab, l.Top.Key)...)
			for reason, secs := range m.notices.idleFor(jm.id) {
				emit("persyst_job_idle_seconds", secs, append(lab, reason)...)
			}
		}
		emit("persyst_daemon_perf_counters", float64(counters))
	}
}

// jobGauges gives a job's gauges from one interval of it on a node with cpus CPUs.
func jobGauges(s sample.Sample, cpus int, emit func(name string, v float64)) {
	emit("persyst_job_cpus", float64(cpus))
	if busy, ok := s.CPUsBusy(); ok {
		emit("persyst_job_cpus_busy", busy)
		if cpus > 0 {
			emit("persyst_job_idle_ratio", min(max(1-busy/float64(cpus), 0), 1))
		}
	}
	if v, has := s.Job["mem_bytes"]; has {
		emit("persyst_job_memory_bytes", v)
	}
	if v, has := s.Rate("read_chars"); has {
		emit("persyst_job_read_bytes_per_second", v)
	}
	if v, has := s.Rate("write_chars"); has {
		emit("persyst_job_write_bytes_per_second", v)
	}
	if opens, has := s.FileOpens(); has {
		emit("persyst_job_file_opens_per_second", opens)
	}
	gpuGauges(s, emit)
}

// gpuGauges gives a GPU job's GPU gauges (none for a job without GPUs).
func gpuGauges(s sample.Sample, emit func(name string, v float64)) {
	gpus, has := s.Job[sample.GPUs]
	if !has || gpus <= 0 {
		return
	}
	emit("persyst_job_gpus", gpus)
	if v, has := s.Rate(sample.GPUBusySeconds); has {
		emit("persyst_job_gpus_busy", v)
	}
	if v, has := s.Rate(sample.GPUUnusedSeconds); has {
		emit("persyst_job_gpus_unused", v)
	}
	if v, has := s.Rate(sample.GPUSMActiveSeconds); has {
		emit("persyst_job_gpu_sm_active_ratio", min(max(v/gpus, 0), 1))
	}
	if v, has := s.Job[sample.GPUMemPeakBytes]; has {
		emit("persyst_job_gpu_memory_bytes", v)
	}
	if v, has := s.Rate(sample.GPUEnergyJoules); has {
		emit("persyst_job_gpu_power_watts", v)
	}
}
