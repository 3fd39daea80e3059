package integration

// The admin's view on the test cluster: jobs of two accounts and three users in Slurm's
// accounting (slurmdbd with MariaDB), CPU and GPU jobs (a FAKE NVIDIA driver: no machine
// here has a GPU), some idle. `persyst site` gives each account's and user's CPU- and
// GPU-hours allocated and used, equal to the sums over the jobs' own reports; the web
// view shows the same behind nginx, rendered in Chromium, to an admin all of it, to an
// account's coordinator (sacctmgr) their account, to a user their own jobs.

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/nvml/nvmltest"
	"github.com/persyst/persyst/properties"
)

func TestAdminView(t *testing.T) {
	defer sideBySide(t)()
	// GPU 0 busy, the others idle: a 2-GPU job leaves one idle.
	busy := "at 0 gpu=0 util=98 sm=95 occupancy=40 tensor=80 dram=50 power=600 mem=64424509440\n"
	gs := newGPUSite(t, gpuDevices+busy, "ACCOUNTING=1")
	c, mail := gs.c, gs.mail
	_, load := binaries(t)

	// Two accounts, three users (system users of every Debian: nobody, daemon, bin);
	// daemon coordinates chem.
	for _, args := range [][]string{
		{"add", "account", "chem,phys", "cluster=persyst"},
		{"add", "user", "nobody,daemon", "account=chem", "cluster=persyst"},
		{"add", "user", "bin", "account=phys", "cluster=persyst"},
		{"add", "coordinator", "account=chem", "names=daemon"},
	} {
		if out, errOut, err := c.run(t, nil, "sacctmgr", append([]string{"-i"}, args...)...); err != nil {
			t.Fatalf("sacctmgr %v: %v\n%s%s", args, err, out, errOut)
		}
	}
	const oddName = `<b>train</b>, "v2"`
	type job struct {
		user, account string
		uid           int
		args          []string
	}
	jobs := []job{
		{"nobody", "chem", 65534, []string{"-c", "1", "--wrap", load + " spin -seconds 6"}},
		{"daemon", "chem", 1, []string{"-c", "1", "--gres=gpu:2", "-J", oddName, "--wrap", "sleep 7"}},
		{"bin", "phys", 2, []string{"-c", "2", "--wrap", "sleep 6"}},
		{"nobody", "chem", 65534, []string{"-c", "1", "--mem=200M", "--time=10", "--wrap", "sleep 5"}},
	}
	ids := make([]uint32, len(jobs))
	for i, j := range jobs {
		args := append([]string{"--parsable", "--uid", strconv.Itoa(j.uid), "--gid", strconv.Itoa(j.uid), "-D", "/tmp", "-o", "/dev/null",
			"-A", j.account, "-w", c.nodes[i%2]}, j.args...)
		out, errOut, err := c.run(t, nil, "sbatch", args...)
		if err != nil {
			t.Fatalf("sbatch %v: %v\n%s%s", args, err, out, errOut)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(strings.Split(strings.TrimSpace(out), ";")[0]), 10, 32)
		if err != nil {
			t.Fatalf("sbatch: %q", out)
		}
		ids[i] = uint32(id)
	}
	for _, id := range ids {
		if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", id, st)
		}
	}
	db, site := gs.db, gs.site(t)
	waitFor(t, time.Minute, "every job's report in the frontend's database", func() (bool, string) {
		recs := site("--table", "total")
		return len(recs) == 2 && recs[1][2] == strconv.Itoa(len(jobs)), fmt.Sprint(recs)
	})

	// The sums over the jobs' own reports: CPUs (GPUs) × measured hours, used as the
	// mean of the CPU use (the GPUs' share running kernels) over the job.
	// Where a job's use was not assessed, its hours count as allocated, not measured.
	type sums struct{ jobs, cpuH, cpuMeas, cpuUsed, gpuH, gpuMeas, gpuUsed float64 }
	byAccount, byUser := map[string]*sums{}, map[string]*sums{}
	for i, id := range ids {
		r := c.jobReport(t, id)
		h := r.Seconds / 3600
		cpuH, gpuH := float64(r.CPUs)*h, float64(r.GPUs)*h
		var cpuMeas, cpuUsed, gpuMeas, gpuUsed float64
		if u, ok := mean(r, "cpu_user_pct"); ok {
			sys, _ := mean(r, "cpu_system_pct")
			cpuMeas, cpuUsed = cpuH, cpuH*math.Max(math.Min((u+sys)/100, 1), 0)
		}
		if u, ok := mean(r, "gpu_unused"); ok && gpuH > 0 {
			gpuMeas, gpuUsed = gpuH, gpuH*math.Max(math.Min(1-u, 1), 0)
		}
		for _, s := range []*sums{at(byAccount, jobs[i].account), at(byUser, jobs[i].user)} {
			s.jobs++
			s.cpuH, s.cpuMeas, s.cpuUsed = s.cpuH+cpuH, s.cpuMeas+cpuMeas, s.cpuUsed+cpuUsed
			s.gpuH, s.gpuMeas, s.gpuUsed = s.gpuH+gpuH, s.gpuMeas+gpuMeas, s.gpuUsed+gpuUsed
		}
	}
	if s := byUser["nobody"]; s == nil || s.cpuMeas <= 0 || s.cpuUsed <= 0 {
		t.Errorf("the CPU jobs' reports: %+v, want CPU use measured", s)
	}
	if s := byUser["daemon"]; s == nil || s.gpuH <= 0 || s.gpuUsed <= 0 || s.gpuUsed > 0.6*s.gpuH {
		t.Errorf("the GPU job's reports: %+v, want 2 GPUs, one of them idle", s)
	}
	for _, by := range []struct {
		name string
		want map[string]*sums
	}{{"account", byAccount}, {"user", byUser}} {
		recs := site("--by", by.name)
		if len(recs)-1 != len(by.want) {
			t.Errorf("persyst site --by %s: %d rows, want %d: %q", by.name, len(recs)-1, len(by.want), recs)
		}
		col := map[string]int{}
		for i, c := range recs[0] {
			col[c] = i
		}
		for _, rec := range recs[1:] {
			w := by.want[rec[col[by.name]]]
			if w == nil {
				t.Errorf("persyst site --by %s: %q is none of the jobs'", by.name, rec[col[by.name]])
				continue
			}
			for _, f := range []struct {
				col  string
				want float64
			}{{"jobs", w.jobs}, {"cpu_hours", w.cpuH}, {"cpu_used_hours", w.cpuUsed}, {"cpu_measured_hours", w.cpuMeas},
				{"cpu_idle_hours", w.cpuMeas - w.cpuUsed}, {"gpu_hours", w.gpuH}, {"gpu_used_hours", w.gpuUsed},
				{"gpu_measured_hours", w.gpuMeas}, {"gpu_idle_hours", w.gpuMeas - w.gpuUsed}} {
				got, err := strconv.ParseFloat(rec[col[f.col]], 64)
				if err != nil || math.Abs(got-f.want) > 1e-6*math.Max(1e-3, f.want) {
					t.Errorf("%s %s: %s %s, the jobs' reports sum to %.9f", by.name, rec[col[by.name]], f.col, rec[col[f.col]], f.want)
				}
			}
		}
	}
	// The job with a memory request and a time limit: requested and unused.
	recs := site("--table", "jobs", "--user", "nobody")
	if len(recs) != 3 {
		t.Fatalf("nobody's jobs: %q", recs)
	}
	col := map[string]int{}
	for i, c := range recs[0] {
		col[c] = i
	}
	for _, rec := range recs[1:] {
		if rec[col["job_id"]] != strconv.FormatUint(uint64(ids[3]), 10) {
			continue
		}
		mem, _ := strconv.ParseFloat(rec[col["mem_unused_gib_hours"]], 64)
		limit, _ := strconv.ParseFloat(rec[col["limit_unused_cpu_hours"]], 64)
		if mem <= 0 || limit < 0.09 || limit > 10.0/60 {
			t.Errorf("job %d (200 MiB, 10 minutes, 5 s): memory unused %s GiB-h, time limit not run %s CPU-h", ids[3], rec[col["mem_unused_gib_hours"]], rec[col["limit_unused_cpu_hours"]])
		}
	}

	// The efficiency reports by mail (every user's jobs here left some seconds idle: the
	// threshold is set below them): a dry run prints one per user and one to chem's
	// coordinator; the real run hands them to the MTA, which delivers them; a second run
	// sends none.
	mailRun := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := c.run(t, nil, persystBin(), append([]string{"site", "--mail", "--db", db, "--period", "7d", "--min-wasted", "0.000001",
			"--config", filepath.Join(c.dir, "etc", "persyst.conf")}, args...)...)
		if err != nil {
			t.Fatalf("persyst site --mail %v: %v\n%s%s", args, err, out, errOut)
		}
		return out, errOut
	}
	out, _ := mailRun("--dry-run")
	if n := strings.Count(out, "\nSubject: persyst: your jobs"); n != 3 || strings.Count(out, "Subject: persyst: account chem") != 1 ||
		!strings.Contains(out, "To: daemon\nSubject: persyst: account chem") {
		t.Errorf("the dry run prints %d users' mails, want 3 and one to chem's coordinator daemon:\n%s", n, out)
	}
	if _, errOut := mailRun(); !strings.Contains(errOut, "4 mails sent, 0 sent before, 0 failed") {
		t.Errorf("the mails sent: %s", errOut)
	}
	for _, u := range []string{"nobody", "daemon", "bin"} {
		if body := mail.message(t, u, "persyst: your jobs"); !strings.Contains(body, "https://hpc.persyst.test/persyst/?period=") {
			t.Errorf("%s's report:\n%s", u, body)
		}
	}
	if body := mail.message(t, "daemon", "persyst: account chem"); !strings.Contains(body, "nobody") {
		t.Errorf("chem's report to its coordinator:\n%s", body)
	}
	if _, errOut := mailRun(); !strings.Contains(errOut, "0 mails sent, 4 sent before") {
		t.Errorf("a second run: %s", errOut)
	}

	// The web view behind nginx: the admin's (root) login, and users' with passwords.
	sock := startWeb(t, c, db, "--user-header", "X-Remote-User", "--proxy-user", "www-data")
	admin, login := startNginx(t, sock, map[string]string{"daemon": "d-pw", "bin": "b-pw", "nobody": "n-pw"})
	dom := chromium(t, "http://"+admin+"/site", "admin-site")
	if g := groupNames(dom); !(g["chem"] == "3" && g["phys"] == "1") {
		t.Errorf("the site page by account: %v, want chem's 3 jobs and phys's 1", g)
	}
	if !strings.Contains(dom, `id="trend-cpu"`) || !strings.Contains(dom, `id="trend-gpu"`) {
		t.Error("the site page draws no CPU or GPU trend")
	}
	dom = chromium(t, "http://"+admin+"/site?account=chem", "admin-site-chem")
	if g := groupNames(dom); !(g["nobody"] == "2" && g["daemon"] == "1") {
		t.Errorf("chem's users: %v", g)
	}
	dom = chromium(t, "http://"+admin+"/?account=chem&period=7d&user=daemon", "admin-jobs-daemon")
	if !strings.Contains(dom, "&lt;b&gt;train&lt;/b&gt;, \"v2\"") && !strings.Contains(dom, "&lt;b&gt;train&lt;/b&gt;, &quot;v2&quot;") {
		t.Errorf("the job list lacks the job's name, escaped")
	}
	for _, tc := range []struct {
		user, pass, path string
		want             map[string]string // groups
		code             int
	}{
		{"daemon", "d-pw", "/site", map[string]string{"chem": "3"}, 200},
		{"daemon", "d-pw", "/site?account=chem&by=user", map[string]string{"nobody": "2", "daemon": "1"}, 200},
		{"daemon", "d-pw", "/site?account=phys", map[string]string{}, 200},
		{"bin", "b-pw", "/site", map[string]string{"phys": "1"}, 200},
		{"bin", "b-pw", "/site?account=chem", map[string]string{}, 200},
		{"nobody", "n-pw", "/site?by=user", map[string]string{"nobody": "2"}, 200},
		{"bin", "b-pw", fmt.Sprintf("/job/%d", ids[0]), nil, 404},
		{"daemon", "d-pw", fmt.Sprintf("/job/%d", ids[0]), nil, 200},
	} {
		code, body := getThrough(t, "http://"+login+tc.path, tc.user, tc.pass, "root")
		if code != tc.code || tc.want != nil && fmt.Sprint(groupNames(body)) != fmt.Sprint(tc.want) {
			t.Errorf("%s as %s: %d, groups %v; want %d, %v", tc.path, tc.user, code, groupNames(body), tc.code, tc.want)
		}
	}
	// The jobs as CSV through the proxy: the name as it was given.
	code, body := getThrough(t, "http://"+login+"/site?format=csv&table=jobs&account=chem", "daemon", "d-pw", "")
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if code != 200 || err != nil || len(recs) != 4 || !strings.Contains(body, `"<b>train</b>, ""v2"""`) {
		t.Errorf("chem's jobs as CSV: %d, %v\n%s", code, err, body)
	}
}

// gpuSite is a 2-node cluster with a collector, 4 fake GPUs a node (their scenario in a
// file: fake NVML, named so; no machine here has a GPU), a mailbox as the MTA, the site's
// URL, a NoticeCommand that logs its calls and idle-GPU notices after 3 s.
type gpuSite struct {
	c       *cluster
	mail    *mailbox
	notices string // NoticeCommand's log
	db      string // the frontend's store
}

func newGPUSite(t *testing.T, scenario string, env ...string) *gpuSite {
	t.Helper()
	if r := skipReason(); r != "" {
		t.Skip("integration test skipped: " + r)
	}
	b := nvmltest.Build(t)
	dir := t.TempDir()
	gs := &gpuSite{mail: newMailbox(t), notices: filepath.Join(dir, "notices.log")}
	file, procs, noticeCmd := filepath.Join(dir, "scenario"), filepath.Join(dir, "procs"), filepath.Join(dir, "notice.sh")
	for p, s := range map[string]string{file: scenario, procs: "", noticeCmd: "#!/bin/sh\necho \"$@\" >> " + gs.notices + "\n"} {
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gs.c = startCluster(t, 2, append([]string{"PERSYST_COLLECTORS=1", "PERSYST_GPUS=4", "PERSYST_FAKE_NVML_LIB=" + filepath.Dir(b.Fake),
		"PERSYST_FAKE_NVML=" + file, "PERSYST_FAKE_NVML_PROCS=" + procs,
		"PERSYST_CONF_EXTRA=MailProg=" + gs.mail.mailProg + "\nWebURL=https://hpc.persyst.test/persyst\nNoticeIdleGPUAfter=3s\nNoticeCommand=" + noticeCmd}, env...)...)
	gs.db = filepath.Join(gs.c.dir, "run", "frontend.db")
	return gs
}

// site runs `persyst site --csv` over the last 7 days with ARGS on the frontend's store.
func (gs *gpuSite) site(t *testing.T) func(args ...string) [][]string {
	c := gs.c
	return func(args ...string) [][]string {
		t.Helper()
		out, errOut, err := c.run(t, nil, persystBin(), append([]string{"site", "--db", gs.db, "--period", "7d", "--csv",
			"--config", filepath.Join(c.dir, "etc", "persyst.conf")}, args...)...)
		if err != nil {
			t.Fatalf("persyst site %v: %v\n%s", args, err, errOut)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatalf("persyst site %v: %v\n%s", args, err, out)
		}
		return recs
	}
}

var groupRowRE = regexp.MustCompile(`<tr class="group" data-name="([^"]*)" data-jobs="(\d+)"`)

// groupNames are the site page's groups and their jobs.
func groupNames(page string) map[string]string {
	out := map[string]string{}
	for _, m := range groupRowRE.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func at[T any](m map[string]*T, k string) *T {
	if m[k] == nil {
		m[k] = new(T)
	}
	return m[k]
}

// mean is a property's mean over the job, from the report's deciles (the trapezoid rule
// over the quantile function), if it was assessed.
func mean(r *digest.Report, key string) (float64, bool) {
	var p *properties.Result
	for i := range r.Properties {
		if r.Properties[i].Key == key {
			p = &r.Properties[i]
		}
	}
	for i := range r.Findings {
		if r.Findings[i].Key == key {
			p = &r.Findings[i]
		}
	}
	if p == nil || !p.Assessed || len(p.Deciles) < 2 {
		return 0, false
	}
	sum := 0.0
	for i := 1; i < len(p.Deciles); i++ {
		sum += (p.Deciles[i-1] + p.Deciles[i]) / 2
	}
	return sum / float64(len(p.Deciles)-1), true
}

// TestNotices: a job whose GPU runs nothing for 3 s (NoticeIdleGPUAfter=3s) is told
// while it runs, once: a line in its output, a mail, the site's command; a job that opted
// out is not. Apart from TestAdminView (a cluster of its own, without accounting) so that
// the two run side by side; nothing here is judged by CPU time.
func TestNotices(t *testing.T) {
	defer sideBySide(t)()
	gs := newGPUSite(t, gpuDevices) // every GPU idle
	c, mail, site := gs.c, gs.mail, gs.site(t)
	out := filepath.Join(c.work, "idle-%j.out")
	id := c.sbatch(t, nil, "--gres=gpu:1", "-w", c.nodes[0], "-o", out, "--wrap", "sleep 20")
	off := c.sbatch(t, nil, "--gres=gpu:1", "-w", c.nodes[1], "--persyst=off", "-o", out, "--wrap", "sleep 20")
	file := func(id uint32) string {
		b, _ := os.ReadFile(strings.ReplaceAll(out, "%j", strconv.FormatUint(uint64(id), 10)))
		return string(b)
	}
	line := fmt.Sprintf("persyst: job %d (holds GPUs that run nothing): its 1 GPU ran nothing for", id)
	waitFor(t, 30*time.Second, "the notice in the job's output", func() (bool, string) {
		return strings.Contains(file(id), line), file(id)
	})
	if st := c.jobInfo(t, id)["JobState"]; st != "RUNNING" {
		t.Errorf("job %d was told once it was %s, not while it ran", id, st)
	}
	// The admins see it running, through the tree's frontend; once it ended, no more.
	running := func() []string {
		var out []string
		for _, r := range site("--table", "running")[1:] {
			out = append(out, r[1]+" "+r[3]+" "+r[9])
		}
		return out
	}
	want := []string{fmt.Sprintf("%d nobody gpu_idle", id)}
	waitFor(t, 15*time.Second, "the running job told in persyst site", func() (bool, string) {
		got := running()
		return slices.Equal(got, want), fmt.Sprint(got)
	})
	for _, j := range []uint32{id, off} {
		if st := c.waitDone(t, j, time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", j, st)
		}
	}
	waitFor(t, time.Minute, "the ended job no longer running in persyst site", func() (bool, string) {
		got := running()
		return len(got) == 0, fmt.Sprint(got)
	})
	if n := strings.Count(file(id), "(holds GPUs that run nothing)"); n != 1 {
		t.Errorf("%d notices in job %d's output, want 1:\n%s", n, id, file(id))
	}
	if strings.Contains(file(off), "persyst") {
		t.Errorf("the job that opted out was told:\n%s", file(off))
	}
	b, _ := os.ReadFile(gs.notices)
	calls := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(calls) != 1 || !strings.HasPrefix(calls[0], fmt.Sprintf("%d nobody gpu_idle ", id)) {
		t.Errorf("NoticeCommand called with %q, want once for job %d", calls, id)
	}
	if body := mail.message(t, "nobody", fmt.Sprintf("persyst: job %d holds GPUs", id)); !strings.Contains(body, "scancel") {
		t.Errorf("the notice by mail:\n%s", body)
	}
}
