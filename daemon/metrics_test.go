package daemon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/sample"
)

func TestJobGauges(t *testing.T) {
	tests := []struct {
		name string
		s    sample.Sample
		cpus int
		want map[string]float64
	}{
		{"perf and everything", sample.Sample{Seconds: 2, Job: map[string]float64{
			"task-clock": 3e9, "mem_bytes": 1 << 20, "read_chars": 4096, "write_chars": 2048,
			"syscalls:sys_enter_openat": 10, "syscalls:sys_enter_open": 2}}, 4,
			map[string]float64{"persyst_job_cpus": 4, "persyst_job_cpus_busy": 1.5, "persyst_job_idle_ratio": 0.625,
				"persyst_job_memory_bytes": 1 << 20, "persyst_job_read_bytes_per_second": 2048,
				"persyst_job_write_bytes_per_second": 1024, "persyst_job_file_opens_per_second": 6}},
		{"cgroup CPU time without perf; nothing else measured has no series", sample.Sample{Seconds: 1, Job: map[string]float64{
			"cpu_user_seconds": 0.5, "cpu_system_seconds": 0.25}}, 1,
			map[string]float64{"persyst_job_cpus": 1, "persyst_job_cpus_busy": 0.75, "persyst_job_idle_ratio": 0.25}},
		{"busier than its CPUs (rounding at the read): idle is 0, not negative", sample.Sample{Seconds: 1, Job: map[string]float64{
			"task-clock": 2.1e9}}, 2,
			map[string]float64{"persyst_job_cpus": 2, "persyst_job_cpus_busy": 2.1, "persyst_job_idle_ratio": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]float64{}
			jobGauges(tc.s, tc.cpus, func(n string, v float64) { got[n] = v })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("gauges (-want +got):\n%s", diff)
			}
		})
	}
}
