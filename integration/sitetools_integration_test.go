package integration

// persyst's results where a site already looks: a real Prometheus server scraping every
// agent of the test cluster (node daemons, a collector, a sync agent, the frontend).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/persyst/persyst/collectors/treeauth/tlstest"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/internal/testenv"
)

// The test cluster's metrics ports (scripts/cluster.sh writes them into persyst.conf).
const (
	daemonMetricsPort    = 16840
	collectorMetricsPort = 16841
	syncMetricsPort      = 16842
	frontendMetricsPort  = 16843
)

func TestSiteTools(t *testing.T) {
	defer sideBySide(t)()
	if r := skipReason(); r != "" {
		t.Skip("integration test skipped: " + r)
	}
	mail := newMailbox(t)
	metrics := newMetricsAuth(t)
	// The site names jobs' users to its Prometheus (the default names job ids only).
	c := startCluster(t, 2, "ACCOUNTING=1", "PERSYST_COLLECTORS=1", "PERSYST_SYNCS=1", "PERSYST_MAILPROG="+mail.slurmMail,
		"PERSYST_CONF_EXTRA=MailProg="+mail.mailProg+"\nMetricsWebConfig="+metrics.webConfig+"\nMetricsJobLabels=user,jobid")
	mail.forCluster(t, c)
	_, load := binaries(t)
	t.Run("Prometheus scrapes every agent; a running job's series come and go", func(t *testing.T) {
		testPrometheus(t, c, load, metrics)
	})
	t.Run("end-of-job mails end with the digest", func(t *testing.T) {
		testMail(t, c, load, mail)
	})
	t.Run("the digest's summary in Slurm accounting, rendered after the daemons forgot the job", func(t *testing.T) {
		testAccounting(t, c, load)
	})
}

// mailbox is a real local mail system for the test: bsd-mailx handing mails to exim,
// which delivers them synchronously into mbox files under dir (a private configuration
// and spool: nothing in /etc or /var/mail is touched). Slurm's MailProg is persyst mail
// (slurmMail); persyst.conf's MailProg is mail(1) with that configuration (mailProg).
type mailbox struct {
	dir, slurmMail, mailProg string
}

func newMailbox(t *testing.T) *mailbox {
	t.Helper()
	for _, c := range []string{"/usr/bin/mail", "/usr/sbin/exim4"} {
		if _, err := os.Stat(c); err != nil {
			t.Fatalf("%s not installed (Debian packages bsd-mailx, exim4-daemon-light; run scripts/deps.sh)", c)
		}
	}
	// Under build/, beside the clusters, one per test (tests side by side have their
	// own); exim runs as Debian-exim (a -C configuration drops its privileges), so its
	// directories are open.
	d := filepath.Join(repoRoot, "build", "it-mail-"+strings.ToLower(strings.TrimPrefix(t.Name(), "Test")))
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"spool", "log", "mail"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(d, sub), 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"exim.conf": "primary_hostname = persyst.test\nqualify_domain = persyst.test\nspool_directory = " + d + "/spool\n" +
			"log_file_path = " + d + "/log/%slog\nhost_lookup =\nrfc1413_hosts =\n" +
			"begin routers\nlocal:\n  driver = accept\n  check_local_user\n  transport = mbox\n" +
			"begin transports\nmbox:\n  driver = appendfile\n  file = " + d + "/mail/$local_part_data\n  user = Debian-exim\n" +
			"  mode = 0644\n  current_directory = /\n  delivery_date_add\n  envelope_to_add\n  return_path_add\n",
		"sendmail": "#!/bin/sh\nexec /usr/sbin/exim4 -C " + d + "/exim.conf -odi \"$@\"\n",
		"mailrc":   "set sendmail=" + d + "/sendmail\nset sendwait\n",
		"mailprog": "#!/bin/sh\nMAILRC=" + d + "/mailrc exec /usr/bin/mail \"$@\"\n",
		// Until forCluster names the cluster's slurm.conf.
		"slurm-mail": "#!/bin/sh\nexit 1\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return &mailbox{dir: d, slurmMail: filepath.Join(d, "slurm-mail"), mailProg: filepath.Join(d, "mailprog")}
}

// forCluster writes Slurm's MailProg for cluster c (named in its slurm.conf before the
// cluster was up; slurmctld runs it only at a job's end).
func (m *mailbox) forCluster(t *testing.T, c *cluster) {
	t.Helper()
	text := "#!/bin/sh\nSLURM_CONF=" + filepath.Join(c.dir, "etc/slurm.conf") + " exec " + persystBin() + " mail \"$@\" 2>>" + m.dir + "/log/persyst-mail.log\n"
	if err := os.WriteFile(m.slurmMail, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// message returns the body of the first mail to user whose subject contains subject,
// once it arrived.
func (m *mailbox) message(t *testing.T, user, subject string) string {
	t.Helper()
	var body string
	waitFor(t, time.Minute, "a mail "+subject, func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(m.dir, "mail", user))
		if err != nil {
			return false, err.Error()
		}
		for _, msg := range strings.Split("\n"+string(b), "\nFrom ")[1:] {
			head, rest, _ := strings.Cut(msg, "\n\n")
			if strings.Contains(head, "Subject: ") && strings.Contains(head, subject) {
				body = rest
				return true, ""
			}
		}
		return false, string(b)
	})
	return body
}

func testMail(t *testing.T, c *cluster, load string, m *mailbox) {
	out := func(id uint32) string {
		b, _ := os.ReadFile(filepath.Join(c.work, fmt.Sprintf("mail-%d.out", id)))
		return string(b)
	}
	ended := c.sbatch(t, nil, "-N1", "-n1", "-c2", "--mail-type=END", "--mail-user=persyst-job",
		"-o", filepath.Join(c.work, "mail-%j.out"), "--wrap", load+" spin -seconds 4")
	failed := c.sbatch(t, nil, "-N1", "-n1", "-c1", "--mail-type=FAIL", "--mail-user=persyst-job",
		"-o", filepath.Join(c.work, "mail-%j.out"), "--wrap", "sleep 1; exit 3")
	for _, tc := range []struct {
		id           uint32
		subject, has string
	}{
		{ended, "Ended", "Allocated CPUs left idle"},
		{failed, "Failed", "exit code 3"},
	} {
		c.waitDone(t, tc.id, 2*time.Minute)
		body := m.message(t, "persyst-job", fmt.Sprintf("Job_id=%d ", tc.id))
		text := out(tc.id)
		i := strings.Index(text, "-- persyst: job")
		if i < 0 {
			t.Fatalf("job %d's output has no digest:\n%s", tc.id, text)
		}
		dig := strings.TrimSpace(text[i:])
		if !strings.HasSuffix(strings.TrimSpace(body), dig) {
			log, _ := os.ReadFile(filepath.Join(m.dir, "log", "persyst-mail.log"))
			t.Errorf("the %s mail of job %d does not end with its digest:\n%s\nwant the end:\n%s\npersyst mail said:\n%s", tc.subject, tc.id, body, dig, log)
		}
		if !strings.Contains(body, tc.has) {
			t.Errorf("the %s mail of job %d does not say %q:\n%s", tc.subject, tc.id, tc.has, body)
		}
	}
}

// sacctComment is a job's AdminComment in Slurm's accounting, once it holds persyst's
// summary (or after a minute, whatever it holds).
func (c *cluster) sacctComment(t *testing.T, id uint32) string {
	t.Helper()
	job := strconv.FormatUint(uint64(id), 10)
	var comment string
	waitFor(t, time.Minute, "job "+job+"'s summary in accounting", func() (bool, string) {
		out, errOut, err := c.run(t, nil, "sacct", "-j", job, "-X", "-n", "-P", "-o", "AdminComment")
		comment = strings.TrimSpace(out)
		return err == nil && strings.Contains(comment, "persyst:v2:"), fmt.Sprintf("%q %s %v", comment, errOut, err)
	})
	return comment
}

func testAccounting(t *testing.T, c *cluster, load string) {
	out := func(id uint32) string {
		b, _ := os.ReadFile(filepath.Join(c.work, fmt.Sprintf("acct-%d.out", id)))
		return string(b)
	}
	// One thread on 2 CPUs: a finding (idle CPUs) the digest states.
	id := c.sbatch(t, nil, "-N1", "-n1", "-c2", "-o", filepath.Join(c.work, "acct-%j.out"), "--wrap", load+" spin -seconds 5")
	// A second job whose AdminComment a site wrote while it ran: it is kept.
	site := c.sbatch(t, nil, "-N1", "-n1", "-c1", "-o", filepath.Join(c.work, "acct-%j.out"), "--wrap", "sleep 4")
	c.waitRunning(t, site)
	if _, errOut, err := c.run(t, nil, "scontrol", "update", "JobId="+strconv.FormatUint(uint64(site), 10), "AdminComment=checked by the site; ticket 42"); err != nil {
		t.Fatalf("scontrol update AdminComment: %v %s", err, errOut)
	}
	for _, j := range []uint32{id, site} {
		if st := c.waitDone(t, j, 2*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", j, st)
		}
	}
	comment := c.sacctComment(t, id)
	if !strings.HasPrefix(comment, "persyst:v2:") || len(comment) > 2048 || strings.ContainsAny(comment, " ,=") {
		t.Errorf("AdminComment of job %d: %q, want one persyst:v2: token of at most 2048 bytes", id, comment)
	}
	if sc := c.sacctComment(t, site); !strings.HasPrefix(sc, "checked by the site; ticket 42 persyst:v2:") {
		t.Errorf("AdminComment of job %d: %q, want the site's text kept before persyst's summary", site, sc)
	}
	// A job that ended while its node's daemon was down: its late digest's summary goes
	// into the database (slurmctld refuses to change a finished job).
	late := c.sbatch(t, nil, "-N1", "-n1", "-c1", "-o", filepath.Join(c.work, "acct-%j.out"), "--wrap", "sleep 3")
	c.waitRunning(t, late)
	host := c.jobInfo(t, late)["BatchHost"]
	// Stopped once it has seen the batch script start: Slurm says RUNNING before
	// slurmstepd starts the script (a daemon stopped in between never measured the job).
	c.waitJob(t, host, late, "running its batch step", func(j *daemon.Job) bool {
		for _, s := range j.Steps {
			if s.ID == "batch" {
				return true
			}
		}
		return false
	})
	c.harness(t, "daemon-stop", host)
	c.waitDone(t, late, 2*time.Minute)
	c.harness(t, "daemon-start", host)
	if lc := c.sacctComment(t, late); !strings.HasPrefix(lc, "persyst:v2:") {
		t.Errorf("AdminComment of job %d, ended while its daemon was down: %q", late, lc)
	}
	// Each summary reads back, whichever way it went into accounting (slurmctld, or the
	// database through sacctmgr, which lowercases it).
	for _, j := range []uint32{id, site, late} {
		if o, errOut, err := c.run(t, nil, persystBin(), "report", "--sacct", strconv.FormatUint(uint64(j), 10)); err != nil || !strings.Contains(o, fmt.Sprintf("persyst: job %d", j)) {
			t.Errorf("persyst report --sacct %d: %v\n%s%s", j, err, o, errOut)
		}
	}

	digestText := out(id)
	i := strings.Index(digestText, "-- persyst: job")
	if i < 0 || !strings.Contains(digestText, "Allocated CPUs left idle") {
		t.Fatalf("job %d's digest has no idle-CPU finding:\n%s", id, digestText)
	}

	// Every daemon restarted with empty state: only accounting knows the job now.
	for _, n := range c.nodes {
		c.harness(t, "daemon-stop", n)
		if err := os.RemoveAll(filepath.Join(c.dir, "run", n)); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(c.dir, "run", n), 0o755); err != nil {
			t.Fatal(err)
		}
		c.harness(t, "daemon-start", n)
	}
	job := strconv.FormatUint(uint64(id), 10)
	if o, _, err := c.run(t, nil, persystBin(), "report", "--node", c.jobInfo(t, id)["BatchHost"], job); err == nil {
		t.Fatalf("the restarted daemons still know job %d:\n%s", id, o)
	}
	// The job's user reads it (sacct shows users their own jobs), as a user would.
	o, errOut, err := c.run(t, nil, "setpriv", "--reuid", strconv.Itoa(jobUser), "--regid", strconv.Itoa(jobUser), "--clear-groups",
		persystBin(), "report", "--sacct", job)
	if err != nil {
		t.Fatalf("persyst report --sacct %s: %v\n%s%s", job, err, o, errOut)
	}
	// The rendered digest says what the job's digest said: its facts line and findings.
	want := strings.Split(strings.TrimSpace(digestText[i:]), "\n")
	got := strings.Split(strings.TrimSpace(o), "\n")
	if len(got) < 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("persyst report --sacct %s:\n%s\nwant it to begin as the job's digest:\n%s", job, o, digestText[i:])
	}
	if !strings.Contains(o, "Allocated CPUs left idle") || !strings.Contains(o, "request fewer CPUs") {
		t.Errorf("persyst report --sacct %s lacks the finding or its recommendation:\n%s", job, o)
	}
	jo, _, err := c.run(t, nil, persystBin(), "report", "--sacct", "--json", job)
	if err != nil || !strings.Contains(jo, `"key": "idle_cores"`) {
		t.Errorf("persyst report --sacct --json %s: %v\n%s", job, err, jo)
	}
}

// metricsAuth is the cluster's metrics web configuration (the exporter toolkit's format):
// TLS with a certificate of a CA of the test's, and a basic-auth user with a bcrypt hash;
// and what Prometheus scrapes with.
type metricsAuth struct {
	webConfig, ca, user, password string
}

func newMetricsAuth(t *testing.T) metricsAuth {
	t.Helper()
	dir, err := os.MkdirTemp("", "persyst-metrics-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca, err := tlstest.New("persyst metrics CA")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Issue(dir, "agents")
	if err != nil {
		t.Fatal(err)
	}
	m := metricsAuth{webConfig: filepath.Join(dir, "metrics-web.yml"), ca: f.CA, user: "prometheus", password: "scrape-s3cret"}
	hash, err := bcrypt.GenerateFromPassword([]byte(m.password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Write(t, m.webConfig, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n", f.Cert, f.Key, m.user, hash))
	return m
}

// scrape is Prometheus's scrape configuration for the agents: TLS (the certificate names
// localhost, not the agents' addresses) and the basic-auth user.
func (m metricsAuth) scrape() string {
	return fmt.Sprintf("    scheme: https\n    tls_config:\n      ca_file: %s\n      server_name: localhost\n    basic_auth:\n      username: %s\n      password: %s\n",
		m.ca, m.user, m.password)
}

// get scrapes url over TLS with the password given or not: the status.
func (m metricsAuth) get(t *testing.T, url string, withPassword bool) int {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(m.ca)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("CA %s: %v", m.ca, err)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	req, _ := http.NewRequest("GET", url, nil)
	if withPassword {
		req.SetBasicAuth(m.user, m.password)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func testPrometheus(t *testing.T, c *cluster, load string, auth metricsAuth) {
	net3 := c.netPrefix(t)
	targets := map[string][]string{
		"daemon":    {fmt.Sprintf("%s.11:%d", net3, daemonMetricsPort), fmt.Sprintf("%s.12:%d", net3, daemonMetricsPort)},
		"collector": {fmt.Sprintf("%s.101:%d", net3, collectorMetricsPort)},
		"sync":      {fmt.Sprintf("%s.91:%d", net3, syncMetricsPort)},
		"frontend":  {fmt.Sprintf("%s.99:%d", net3, frontendMetricsPort)},
	}
	// Without the password a scrape gets 401; with it, the metrics.
	for _, ts := range targets {
		url := "https://" + ts[0] + "/metrics"
		if got := auth.get(t, url, false); got != 401 {
			t.Errorf("%s without the password: %d, want 401", url, got)
		}
		if got := auth.get(t, url, true); got != 200 {
			t.Errorf("%s with the password: %d, want 200", url, got)
		}
	}
	p := startPrometheus(t, targets, auth.scrape())

	// Every agent is up within a few scrapes.
	waitFor(t, 30*time.Second, "every agent scraped", func() (bool, string) {
		res := p.query(t, `up`)
		up := 0
		for _, r := range res {
			if r.value == 1 {
				up++
			}
		}
		return up == 5, fmt.Sprintf("up: %v", res)
	})
	if res := p.query(t, `persyst_build_info{role="sync"}`); len(res) != 1 {
		t.Errorf("persyst_build_info of the sync agent: %v", res)
	}

	// A 2-node job with one busy thread on each node's 2 CPUs: its CPU metrics are the
	// job's values on each node (and its records reach the collector). The thread keeps
	// at most one CPU busy, and with the tests beside this one on the machine's two cores
	// it may get much less of one than all of it, and for a while nothing: the series are
	// judged over the job's life (the range functions keep their labels and outlive the
	// job's end), the busiest moment a tenth of a CPU at least (a quarter was too much
	// once: 0.24 on both nodes, with the bookworm root's tests beside it).
	id := c.sbatch(t, nil, "-N2", "--ntasks-per-node=1", "-c2", "-o", filepath.Join(c.work, "prom-%j.out"),
		"--wrap", "srun "+load+" spin -seconds 8")
	c.waitRunning(t, id)
	job := strconv.FormatUint(uint64(id), 10)
	over := func(fn, metric string) []promResult {
		return p.query(t, fn+`(`+metric+`{jobid="`+job+`"}[10m])`)
	}
	var res []promResult
	waitFor(t, 60*time.Second, "the job's CPU metric on both nodes", func() (bool, string) {
		res = over("max_over_time", "persyst_job_cpus_busy")
		ok := len(res) == 2 && res[0].labels["node"] != res[1].labels["node"] && res[0].labels["user"] != ""
		for _, r := range res {
			ok = ok && r.value > 0.1
		}
		return ok, fmt.Sprintf("busiest: %v", res)
	})
	for _, r := range res {
		if r.value > 1.3 {
			t.Errorf("job %d keeps %.2f CPUs busy on %s by Prometheus, want about 1 (one spinning thread)", id, r.value, r.labels["node"])
		}
	}
	if res := over("last_over_time", "persyst_job_cpus"); len(res) != 2 || res[0].value != 2 || res[1].value != 2 {
		t.Errorf("persyst_job_cpus of job %d (-c2 on each node): %v", id, res)
	}
	// One thread leaves at least about half of the job's 2 CPUs idle, more when the tests
	// beside this one take some of its CPU; at its busiest (a tenth of a CPU at least,
	// above) never all of them.
	if res := over("min_over_time", "persyst_job_idle_ratio"); len(res) != 2 || res[0].value < 0.3 || res[0].value > 0.96 || res[1].value < 0.3 || res[1].value > 0.96 {
		t.Errorf("persyst_job_idle_ratio of job %d at its least (1 thread on 2 CPUs): %v", id, res)
	}
	if res := p.query(t, `max_over_time(persyst_daemon_perf_counters[10m]) > 0`); len(res) == 0 {
		t.Errorf("no daemon had perf counters open for a running job")
	}

	// After the job's end its series are gone; the events that ended it were counted.
	if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
		t.Fatalf("job %d ended %s", id, st)
	}
	waitFor(t, 20*time.Second, "the job's series gone", func() (bool, string) {
		res := p.query(t, `{jobid="`+job+`"}`)
		return len(res) == 0, fmt.Sprintf("%v", res)
	})
	// A daemon ends the job's series when its job_end arrives, and counts the event once
	// the sender has its answer (the batch host's after the digest is written): a scrape
	// between the two has the series gone and the event not yet counted.
	for _, q := range []string{
		`sum(persyst_daemon_events_total{event="job_end",result="ok"})`,
		`sum(persyst_daemon_digests_total{result="written"})`,
	} {
		waitFor(t, 20*time.Second, q, func() (bool, string) {
			res := p.query(t, q)
			return len(res) == 1 && res[0].value >= 1, fmt.Sprintf("%v", res)
		})
	}
	if res := p.query(t, `persyst_collector_records_total`); len(res) != 1 || res[0].value < 1 {
		t.Errorf("the collector's records: %v", res)
	}
	if res := p.query(t, `persyst_frontend_balance_duration_seconds_count`); len(res) != 1 || res[0].value < 1 {
		t.Errorf("the frontend's balancing cycles: %v", res)
	}
}

// prometheus is a Prometheus server the test started.
type prometheus struct {
	addr string
}

// startPrometheus starts Debian's Prometheus on loopback, scraping targets (job name ->
// host:port) every second with the scrape configuration's lines scrape (TLS,
// authentication); it is stopped when the test ends.
func startPrometheus(t *testing.T, targets map[string][]string, scrape string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not installed (Debian package prometheus; run scripts/deps.sh)")
	}
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n")
	for name, ts := range targets {
		fmt.Fprintf(&cfg, "  - job_name: persyst-%s\n%s    static_configs:\n      - targets: [%s]\n", name, scrape, strings.Join(ts, ", "))
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	p := &prometheus{addr: addr}
	waitFor(t, 30*time.Second, "Prometheus ready", func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return p
}

// promResult is one series of an instant query.
type promResult struct {
	labels map[string]string
	value  float64
}

func (r promResult) String() string { return fmt.Sprintf("%v=%g", r.labels, r.value) }

// query runs an instant query through Prometheus's HTTP API.
func (p *prometheus) query(t *testing.T, q string) []promResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.addr+"/api/v1/query?query="+url.QueryEscape(q), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if body.Status != "success" {
		t.Fatalf("query %s: %s %s", q, body.Status, body.Error)
	}
	var out []promResult
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %s: value %v", q, r.Value)
		}
		out = append(out, promResult{labels: r.Metric, value: v})
	}
	return out
}

// waitFor polls ok until it holds or timeout passes (then fails with its last words):
// at once, then every 5 ms, twice as long each time up to 250 ms (a moment is not
// missed, and a slow one is not asked too often).
func waitFor(t *testing.T, timeout time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	var why string
	if !poll(time.Now().Add(timeout), func() (done bool) { done, why = ok(); return done }) {
		t.Fatalf("%s: not within %v: %s", what, timeout, why)
	}
}
