package exporter

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/collectors/treeauth/tlstest"
	"github.com/persyst/persyst/internal/docsection"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"
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

// TestServeWebConfig: with a web configuration file (the exporter toolkit's format),
// /metrics takes only the scrapers it names: basic auth with a bcrypt hash (401 without
// or with the wrong password), or a client certificate of its CA (no TLS session without
// one). A bad file serves nothing and says which file.
func TestServeWebConfig(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.New("metrics CA")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(dir, "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Issue(dir, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	basic := filepath.Join(dir, "basic.yml")
	testenv.Write(t, basic, "basic_auth_users:\n  prometheus: "+string(hash)+"\n")
	mtls := filepath.Join(dir, "mtls.yml")
	testenv.Write(t, mtls, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n",
		server.Cert, server.Key, server.CA))
	serve := func(t *testing.T, config string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		addr, err := Serve(ctx, ServeOptions{Addr: "127.0.0.1:0", WebConfig: config, Registry: NewRegistry("daemon", "v"), Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		return addr.String()
	}
	get := func(c *http.Client, url, user, pass string) (int, error) {
		r, _ := http.NewRequest("GET", url, nil)
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		resp, err := c.Do(r)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	t.Run("basic auth", func(t *testing.T) {
		url := "http://" + serve(t, basic) + "/metrics"
		for _, tc := range []struct {
			user, pass string
			want       int
		}{{"", "", 401}, {"prometheus", "wrong", 401}, {"root", "s3cret", 401}, {"prometheus", "s3cret", 200}} {
			if got, err := get(http.DefaultClient, url, tc.user, tc.pass); err != nil || got != tc.want {
				t.Errorf("as %q with %q: %d, %v; want %d", tc.user, tc.pass, got, err, tc.want)
			}
		}
	})
	t.Run("client certificates", func(t *testing.T) {
		url := "https://" + serve(t, mtls) + "/metrics"
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(server.CA)
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			t.Fatalf("CA: %v", err)
		}
		with := func(f *tlstest.Files) *http.Client {
			cfg := &tls.Config{RootCAs: pool}
			if f != nil {
				c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Certificates = []tls.Certificate{c}
			}
			return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
		}
		if got, err := get(with(&client), url, "", ""); err != nil || got != 200 {
			t.Errorf("with the CA's client certificate: %d, %v; want 200", got, err)
		}
		for name, f := range map[string]*tlstest.Files{"no certificate": nil, "another CA's": &stranger} {
			if got, err := get(with(f), url, "", ""); err == nil {
				t.Errorf("%s: %d, want no TLS session", name, got)
			}
		}
		if got, err := get(http.DefaultClient, "http://"+strings.TrimPrefix(url, "https://"), "", ""); err == nil && got == 200 {
			t.Errorf("plain HTTP on the TLS port: %d", got)
		}
	})
	t.Run("bad file", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.yml")
		testenv.Write(t, bad, "basic_auth_users: [\n")
		var logs bytes.Buffer
		_, err := Serve(context.Background(), ServeOptions{Addr: "127.0.0.1:0", WebConfig: bad, Registry: NewRegistry("x", "y"), Log: zerolog.Nop()})
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Serve with a bad web config: %v, want an error naming %s", err, bad)
		}
		if err := Keep(context.Background(), ServeOptions{Addr: "127.0.0.1:0", WebConfig: bad, Registry: NewRegistry("x", "y"), Log: zerolog.New(&logs)}, time.Millisecond); err == nil ||
			strings.Contains(logs.String(), "retried") || !strings.Contains(logs.String(), "metrics not served") {
			t.Errorf("Keep with a bad web config: %v, log %s; want it not served, not retried", err, logs.String())
		}
	})
}

// TestErrorLogBounded: a client that fails a thousand TLS handshakes makes one log line a
// minute, with the count.
func TestErrorLogBounded(t *testing.T) {
	var logs bytes.Buffer
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	l := ErrorLog(zerolog.New(&logs), func() time.Time { return now }, "web")
	for range 1000 {
		l.Printf("http: TLS handshake error from 10.0.0.1:1: tls: client didn't provide a certificate")
	}
	now = now.Add(time.Minute)
	l.Printf("http: TLS handshake error from 10.0.0.1:2: EOF")
	if n := strings.Count(logs.String(), "connections failed"); n != 2 || !strings.Contains(logs.String(), `"connections":1000`) {
		t.Errorf("%d lines, want 2, the second counting 1000:\n%s", n, logs.String())
	}
}
