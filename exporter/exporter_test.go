package exporter

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/internal/docsection"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

var update = flag.Bool("update", false, "rewrite docs/prometheus.md's metric table")

// TestDocsListEveryPrometheusMetric: docs/prometheus.md holds the catalog's table, and
// every metric the agents register is in the catalog.
func TestDocsListEveryPrometheusMetric(t *testing.T) {
	docsection.Check(t, "../docs/prometheus.md", "<!-- metrics: made by go test ./exporter -update -->\n", "<!-- end of metrics -->\n",
		Reference(), *update, "go test ./exporter -update")

	// Every agent's registry holds only catalog metrics (and Go's and the process's).
	reg := NewRegistry("daemon", "test")
	NewDaemon(reg)
	NewCollector(reg, func() int { return 0 })
	NewSync(reg)
	NewFrontend(reg)
	var names []string
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, d := range catalog {
		known[d.Name] = true
	}
	for _, mf := range mfs {
		n := mf.GetName()
		if strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
			continue
		}
		names = append(names, n)
		if !known[n] {
			t.Errorf("%s is registered but not in the catalog", n)
		}
	}
	if len(names) == 0 {
		t.Error("no persyst metric gathered")
	}
}

// TestCatalog: names follow Prometheus's conventions and are unique.
func TestCatalog(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range catalog {
		if seen[d.Name] {
			t.Errorf("%s twice", d.Name)
		}
		seen[d.Name] = true
		if !strings.HasPrefix(d.Name, "persyst_") {
			t.Errorf("%s: not persyst_", d.Name)
		}
		if d.Kind == Counter != strings.HasSuffix(d.Name, "_total") {
			t.Errorf("%s: counters, and only counters, end in _total", d.Name)
		}
		if d.Kind == Histogram && len(d.Buckets) == 0 {
			t.Errorf("%s: a histogram without buckets", d.Name)
		}
		if d.Help == "" {
			t.Errorf("%s: no help", d.Name)
		}
	}
}

func TestSnapshotSeriesComeAndGo(t *testing.T) {
	reg := NewRegistry("daemon", "test")
	jobs := map[string]float64{"17": 1.5, "18": 0.25}
	NewSnapshot(reg, []string{"persyst_job_cpus_busy"}, func(emit Emit) {
		for j, v := range jobs {
			emit("persyst_job_cpus_busy", v, j, "alice", "node1")
		}
	})
	want := `
# HELP persyst_job_cpus_busy CPUs the job kept busy over its latest interval (CPU seconds per second).
# TYPE persyst_job_cpus_busy gauge
persyst_job_cpus_busy{jobid="17",node="node1",user="alice"} 1.5
persyst_job_cpus_busy{jobid="18",node="node1",user="alice"} 0.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "persyst_job_cpus_busy"); err != nil {
		t.Error(err)
	}
	delete(jobs, "17") // job 17 ended: its series is gone at the next scrape
	want = `
# HELP persyst_job_cpus_busy CPUs the job kept busy over its latest interval (CPU seconds per second).
# TYPE persyst_job_cpus_busy gauge
persyst_job_cpus_busy{jobid="18",node="node1",user="alice"} 0.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "persyst_job_cpus_busy"); err != nil {
		t.Error(err)
	}
}

func TestSnapshotBadValueIsAScrapeError(t *testing.T) {
	reg := NewRegistry("daemon", "test")
	NewSnapshot(reg, []string{"persyst_job_cpus"}, func(emit Emit) {
		emit("persyst_job_cpus", 2, "17") // two labels missing
	})
	if _, err := reg.Gather(); err == nil {
		t.Error("a value with missing labels gathered without error")
	}
}

func TestDaemonEventsBounded(t *testing.T) {
	reg := NewRegistry("daemon", "test")
	m := NewDaemon(reg)
	for _, e := range []string{"job_start", "job_end", "x1", "x2", strings.Repeat("y", 1000)} {
		m.Event(e, "ok", time.Millisecond)
	}
	if got := testutil.CollectAndCount(m.events); got != 3 { // job_start, job_end, other
		t.Errorf("%d event series, want 3 (unknown events are \"other\")", got)
	}
	var nilm *Daemon
	nilm.Event("job_start", "ok", time.Second) // a nil *Daemon counts nothing, and does not panic
	nilm.Digest("written")
}

func TestHandlerChecksWhoScrapes(t *testing.T) {
	reg := NewRegistry("daemon", "v1")
	var logs bytes.Buffer
	now := time.Unix(1000, 0)
	h := Handler(ServeOptions{Registry: reg, Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		Log: zerolog.New(&logs), Now: func() time.Time { return now }})
	cases := []struct {
		remote, method, path string
		want                 int
	}{
		{"10.1.2.3:5000", "GET", "/metrics", 200},
		{"[::ffff:10.1.2.3]:5000", "GET", "/metrics", 200},
		{"10.2.0.1:5000", "GET", "/metrics", 403},
		{"127.0.0.1:5000", "GET", "/metrics", 403},
		{"garbage", "GET", "/metrics", 403},
		{"10.1.2.3:5000", "GET", "/", 404},
		{"10.1.2.3:5000", "POST", "/metrics", 405},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.RemoteAddr = c.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s %s from %s: %d, want %d", c.method, c.path, c.remote, w.Code, c.want)
		}
		if c.want == 200 && !strings.Contains(w.Body.String(), `persyst_build_info{role="daemon",version="v1"} 1`) {
			t.Errorf("from %s: no build info in\n%s", c.remote, w.Body.String())
		}
	}
	// Three refusals within a minute: one log line. Later, one more with the count.
	if n := strings.Count(logs.String(), "scrape refused"); n != 1 {
		t.Errorf("%d refusal lines within a minute, want 1:\n%s", n, logs.String())
	}
	now = now.Add(2 * time.Minute)
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.RemoteAddr = "10.9.9.9:1"
	h.ServeHTTP(httptest.NewRecorder(), r)
	if n := strings.Count(logs.String(), "scrape refused"); n != 2 || !strings.Contains(logs.String(), `"refused":3`) {
		t.Errorf("after a minute: want a second line counting 3 refusals:\n%s", logs.String())
	}
}

func TestServeDefaultAllowsLoopbackOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Serve(ctx, ServeOptions{Addr: "127.0.0.1:0", Registry: NewRegistry("collector", "v2"), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `role="collector"`) {
		t.Errorf("loopback scrape: %d\n%s", resp.StatusCode, b)
	}
	if _, err := Serve(ctx, ServeOptions{Addr: addr.String(), Registry: NewRegistry("x", "y")}); err == nil ||
		!strings.Contains(err.Error(), addr.String()) {
		t.Errorf("a second Serve on a bound address: %v, want an error naming it", err)
	}
	cancel()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := http.Get("http://" + addr.String() + "/metrics"); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("still serving after its context ended")
}

func TestFrontendCycle(t *testing.T) {
	reg := NewRegistry("frontend", "v")
	m := NewFrontend(reg)
	m.Cycle(3*time.Millisecond, 5, 2, 1)
	got := testutil.ToFloat64(m.jobs)
	if diff := cmp.Diff(5.0, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
}

// TestKeepRetriesABusyAddress: an address in use is logged and retried; metrics are
// served once it is free.
func TestKeepRetriesABusyAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	oldCtx, stopOld := context.WithCancel(ctx)
	busy, err := Serve(oldCtx, ServeOptions{Addr: "127.0.0.1:0", Registry: NewRegistry("daemon", "old"), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	err = Keep(ctx, ServeOptions{Addr: busy.String(), Registry: NewRegistry("daemon", "new"), Log: zerolog.New(&logs)}, 50*time.Millisecond)
	if err == nil || !strings.Contains(logs.String(), "the address is retried") {
		t.Fatalf("Keep on a busy address: %v, log %s", err, logs.String())
	}
	stopOld()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + busy.String() + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `version="new"`) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("the new metrics were not served once the address was free")
}
