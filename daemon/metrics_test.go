package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/daemon/measure/powercap/fakepowercap"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
	"github.com/rs/zerolog"
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
		{"4 GPUs, 2 busy", sample.Sample{Seconds: 2, Job: map[string]float64{"task-clock": 2e9, sample.GPUs: 4,
			sample.GPUBusySeconds: 3.9, sample.GPUUnusedSeconds: 4, sample.GPUSMActiveSeconds: 3.6,
			sample.GPUMemPeakBytes: 1 << 30, sample.GPUEnergyJoules: 2600}}, 2,
			map[string]float64{"persyst_job_cpus": 2, "persyst_job_cpus_busy": 1, "persyst_job_idle_ratio": 0.5,
				"persyst_job_gpus": 4, "persyst_job_gpus_busy": 1.95, "persyst_job_gpus_unused": 2,
				"persyst_job_gpu_sm_active_ratio": 0.45, "persyst_job_gpu_memory_bytes": 1 << 30, "persyst_job_gpu_power_watts": 1300}},
		{"a shared GPU: memory only", sample.Sample{Seconds: 1, Job: map[string]float64{sample.GPUs: 1, sample.GPUMemPeakBytes: 4096}}, 1,
			map[string]float64{"persyst_job_cpus": 1, "persyst_job_gpus": 1, "persyst_job_gpu_memory_bytes": 4096}},
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

// metricsNode is a measurer on a fake node (fakeNodeJobs) with n running jobs, ids
// 1..n, each read twice (a baseline and one interval of 10 s with 5 s of CPU), and the
// daemon's /metrics handler with the site's MetricsJobLabels.
func metricsNode(tb testing.TB, n int, jobLabels string) (*Measurer, *Registry, http.Handler, *time.Time) {
	tb.Helper()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i + 1
	}
	root, setCPU := fakeNodeJobs(tb, ids...)
	// A FAKE powercap tree (no machine here has RAPL): 100 J between the two reads.
	rapl, err := fakepowercap.New(filepath.Join(root, "sys/class/powercap"), 0, fakepowercap.Zone{Dir: "intel-rapl:0", Name: "package-0"})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	reg := newReg(tb, RegistryConfig{UserName: func(uid uint32) string { return "u" + strconv.Itoa(int(uid)) }})
	engine := propertiestest.Engine(tb)
	prom := exporter.NewRegistry(exporter.RoleDaemon, "test")
	m, err := NewMeasurer(MeasureConfig{Root: root, Cycle: 10 * time.Second, StateDir: tb.TempDir(), Digest: DigestConfig{Engine: engine},
		Metrics: exporter.NewDaemon(prom)}, reg, "node1", zerolog.Nop(), func() time.Time { return now })
	if err != nil {
		tb.Fatal(err)
	}
	names, omit := snapshotMetrics(jobLabels)
	exporter.NewSnapshot(prom, names, m.snapshot(reg, nil, len(names) > nodeMetrics), omit...)
	for _, id := range ids {
		j, err := reg.Apply(wire.StepStart, &wire.Event{JobID: uint32(id), UID: 1000 + uint32(id), Persyst: wire.On, StepID: "batch", Time: now}, now)
		if err != nil {
			tb.Fatal(err)
		}
		prepareNow(m, j)
	}
	m.cycle() // baselines
	now = now.Add(10 * time.Second)
	for _, id := range ids {
		setCPU(id, 5_000_000)
	}
	if err := rapl.Add("intel-rapl:0", 100); err != nil {
		tb.Fatal(err)
	}
	m.cycle()
	h := exporter.Handler(exporter.ServeOptions{Registry: prom, Log: zerolog.Nop()})
	return m, reg, h, &now
}

func scrape(tb testing.TB, h http.Handler) string {
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.RemoteAddr = "127.0.0.1:9999"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		tb.Fatalf("scrape: %d %s", w.Code, w.Body.String())
	}
	return w.Body.String()
}

// TestJobMetricsFollowRunningJobs: a running job's series carry its latest interval; once
// it ended they are gone, and the cycle was timed.
func TestJobMetricsFollowRunningJobs(t *testing.T) {
	m, reg, h, now := metricsNode(t, 2, "user,jobid")
	body := scrape(t, h)
	for _, want := range []string{
		`persyst_job_cpus{jobid="1",node="node1",user="u1001"} 2`,
		`persyst_job_cpus_busy{jobid="2",node="node1",user="u1002"} 0.5`,
		`persyst_job_idle_ratio{jobid="1",node="node1",user="u1001"} 0.75`,
		// Two jobs of 5 s of CPU time each share the node's 100 J.
		`persyst_job_energy_joules_total{jobid="2",node="node1",user="u1002"} 50`,
		`persyst_daemon_jobs{state="running"} 2`,
		`persyst_daemon_cycle_duration_seconds_count 2`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	// Not measured on this node (no perf, no memory files): no series, never a 0.
	for _, absent := range []string{"persyst_job_file_opens_per_second{", "persyst_job_memory_bytes{"} {
		if strings.Contains(body, absent) {
			t.Errorf("scrape has %s although it is not measured here", absent)
		}
	}
	*now = now.Add(3 * time.Second)
	if _, err := reg.Apply(wire.JobEnd, &wire.Event{JobID: 1, UID: 1001, Persyst: wire.On, Time: *now}, *now); err != nil {
		t.Fatal(err)
	}
	m.end(1)
	body = scrape(t, h)
	if strings.Contains(body, `jobid="1"`) {
		t.Errorf("job 1 ended but its series remain:\n%s", body)
	}
	if !strings.Contains(body, `persyst_job_cpus{jobid="2",node="node1",user="u1002"} 2`) {
		t.Errorf("job 2's series are gone with job 1's:\n%s", body)
	}
}

// TestJobMetricLabels: what a scraper learns of the node's jobs is the site's choice
// (MetricsJobLabels): job ids and users, job ids only (the default), or nothing per job.
func TestJobMetricLabels(t *testing.T) {
	for _, tc := range []struct {
		labels     string
		want, none []string
	}{
		{"user,jobid", []string{`persyst_job_cpus{jobid="1",node="node1",user="u1001"} 2`,
			`persyst_job_top_severity{jobid="1",node="node1",property="cpu_user_pct",user="u1001"}`}, nil},
		{"jobid", []string{`persyst_job_cpus{jobid="1",node="node1"} 2`, `persyst_job_top_severity{jobid="1",node="node1",property="cpu_user_pct"}`},
			[]string{"user="}},
		{"", []string{`persyst_job_cpus{jobid="1",node="node1"} 2`}, []string{"user="}},
		{"none", []string{`persyst_daemon_jobs{state="running"} 1`}, []string{"persyst_job_", "jobid="}},
	} {
		t.Run(tc.labels, func(t *testing.T) {
			_, _, h, _ := metricsNode(t, 1, tc.labels)
			body := scrape(t, h)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("scrape lacks %q:\n%s", w, body)
				}
			}
			for _, n := range tc.none {
				if strings.Contains(body, n) {
					t.Errorf("scrape has %q:\n%s", n, body)
				}
			}
		})
	}
}

// BenchmarkScrape32Jobs: one /metrics scrape of a node daemon with 32 running jobs (the
// measurer's snapshot, the self metrics, Go's and the process's), and its size.
func BenchmarkScrape32Jobs(b *testing.B) {
	_, _, h, _ := metricsNode(b, 32, "user,jobid")
	size := len(scrape(b, h))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		scrape(b, h)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}

// BenchmarkDigestAccounting: what keeping the summary in Slurm's accounting adds to a
// job's digest, which the job's completion waits for. The writer stands in for scontrol
// update and sleeps 8 ms (its median on the test cluster); it runs in the background,
// so the digest does not wait for it.
func BenchmarkDigestAccounting(b *testing.B) {
	for _, tc := range []struct {
		name  string
		write func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error)
	}{
		{"off", nil},
		{"on_8ms_writer", func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error) {
			time.Sleep(8 * time.Millisecond)
			return "written", nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, reg, _, _ := metricsNode(b, 1, "user,jobid")
			facts := fakeFacts{1: {JobID: 1, WorkDir: "/w", Stdout: "out"}}
			m.pass.acct.write, m.pass.acct.facts, m.lookups.facts = tc.write, facts, facts
			m.dig.appendText = func(context.Context, digest.Target, []byte) error { return nil }
			j := reg.Job(1)
			b.ResetTimer()
			for b.Loop() {
				jm := m.meters.get(1)
				jm.mu.Lock()
				jm.digested = false
				jm.mu.Unlock()
				if err := m.digest(context.Background(), j, atBatchEnd, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAccountingOncePerJob: a batch job's summary is written at its digest; a job
// without a batch script (srun) gets its summary at its end, not at each step's end.
func TestAccountingOncePerJob(t *testing.T) {
	root, _ := fakeNodeJobs(t, 1, 2)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	reg := newReg(t, RegistryConfig{})
	engine := propertiestest.Engine(t)
	var mu sync.Mutex
	var written []string
	m, err := NewMeasurer(MeasureConfig{Root: root, Cycle: 10 * time.Second, StateDir: t.TempDir(), Digest: DigestConfig{Engine: engine,
		Facts:  fakeFacts{1: {JobID: 1, WorkDir: "/w", Stdout: "out", BatchHost: "node1"}, 2: {JobID: 2}},
		Append: func(context.Context, digest.Target, []byte) error { return nil },
		Accounting: func(_ context.Context, job string, id uint32, _ string, r digest.Report) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			written = append(written, fmt.Sprintf("%s:%d", job, r.JobID))
			return "written", nil
		}}}, reg, "node1", zerolog.Nop(), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	apply := func(k wire.Kind, id uint32, step string) *Job {
		j, err := reg.Apply(k, &wire.Event{JobID: id, UID: 1000, Persyst: wire.On, StepID: step, Time: now}, now)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	prepareNow(m, apply(wire.StepStart, 1, "batch"))
	prepareNow(m, apply(wire.StepStart, 2, "0"))
	m.cycle()
	now = now.Add(10 * time.Second)
	m.cycle()
	// The batch job: at its digest. The srun job: not at its step's end, at its end.
	if err := m.digest(context.Background(), reg.Job(1), atBatchEnd, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.StepEnded(context.Background(), apply(wire.StepEnd, 2, "0"), "0"); err != nil {
		t.Fatal(err)
	}
	// Summaries are written in the background: wait for them (a little longer for one
	// that must not come).
	settled := func(n int) []string {
		for i := 0; i < 300; i++ {
			mu.Lock()
			got := slices.Clone(written)
			mu.Unlock()
			if len(got) >= n {
				time.Sleep(50 * time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(written)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	got := settled(1)
	if diff := cmp.Diff([]string{"1:1"}, got); diff != "" {
		t.Errorf("summaries before the srun job's end (-want +got):\n%s", diff)
	}
	j := apply(wire.JobEnd, 2, "")
	if err := m.End(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	got = settled(2)
	if diff := cmp.Diff([]string{"1:1", "2:2"}, got); diff != "" {
		t.Errorf("summaries after the srun job's end (-want +got):\n%s", diff)
	}
}
