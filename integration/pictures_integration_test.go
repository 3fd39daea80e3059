package integration

// Pictures in a real browser: headless Chromium (Debian's) renders a 4-node job's HTML
// report and the web view over the frontend's database; the tests check the DOM and keep
// screenshots under build/test-artifacts.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromium renders url headless: its DOM after load, and a screenshot kept as an
// artifact (name.png).
func chromium(t *testing.T, url, name string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not installed (Debian package chromium; run scripts/deps.sh)")
	}
	arts, err := artifacts()
	if err != nil {
		t.Fatal(err)
	}
	profile := t.TempDir()
	common := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + profile, "--window-size=1200,2600", "--hide-scrollbars"}
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(append([]string{}, common...), args...)...)
		cmd.Env = append(os.Environ(), "HOME="+profile)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, tail(errb.String(), 20))
		}
		return out.String()
	}
	dom := run("--dump-dom", url)
	shot := filepath.Join(arts, name+".png")
	run("--screenshot="+shot, url)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Errorf("screenshot %s: %v (%d bytes)", shot, err, st.Size())
	} else {
		t.Logf("screenshot: %s (%d KB)", shot, st.Size()>>10)
	}
	return dom
}

var (
	heatRE   = regexp.MustCompile(`id="heatmap" data-cpus="(\d+)" data-rows="(\d+)"`)
	findRE   = regexp.MustCompile(`<li class="finding" data-key="([a-z_:]+)"`)
	chartsRE = regexp.MustCompile(`<section class="chart" id="chart-([a-z_]+)"`)
	rowsRE   = regexp.MustCompile(`<tr class="job" data-job="(\d+)" data-user="([^"]*)"`)
)

func testPictures(t *testing.T, c *cluster, id uint32) {
	job := strconv.FormatUint(uint64(id), 10)
	info := c.jobInfo(t, id)
	cpus, _ := strconv.Atoi(info["NumCPUs"])

	// The job's report from its 4 nodes' daemons (this host is none of them).
	page := filepath.Join(t.TempDir(), "job-"+job+".html")
	out, errOut, err := c.run(t, nil, persystBin(), "report", "--html", job)
	if err != nil {
		t.Fatalf("persyst report --html %s: %v\n%s", job, err, errOut)
	}
	if err := os.WriteFile(page, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := chromium(t, "file://"+page, "job-"+job+"-report")
	if m := heatRE.FindStringSubmatch(dom); m == nil || m[1] != strconv.Itoa(cpus) || m[2] != strconv.Itoa(cpus) {
		t.Errorf("heat map %v, want the job's %d CPUs in %d rows", m, cpus, cpus)
	}
	if f := findRE.FindAllStringSubmatch(dom, -1); len(f) == 0 || f[0][1] != "inter_node_imbalance" {
		t.Errorf("findings %v, want inter_node_imbalance first", f)
	}
	charts := map[string]bool{}
	for _, m := range chartsRE.FindAllStringSubmatch(dom, -1) {
		charts[m[1]] = true
	}
	if !charts["cpu"] || !charts["memory"] {
		t.Errorf("charts %v: want CPU use and memory over time", charts)
	}
	if n := strings.Count(dom, `<polyline class="line"`); n < 4 {
		t.Errorf("%d lines drawn, want one per node at least on the CPU chart", n)
	}
	if !strings.Contains(dom, `id="timeline"`) || !strings.Contains(dom, `id="nodes"`) {
		t.Error("no findings timeline or per-node table")
	}

	// The web view over the frontend's database, which kept every job's final report.
	db := filepath.Join(c.dir, "run", "frontend.db")
	all := startWeb(t, c, db, "--all")
	dom = chromium(t, "http://"+all+"/", "web-jobs")
	listed := map[string]string{}
	for _, m := range rowsRE.FindAllStringSubmatch(dom, -1) {
		listed[m[1]] = m[2]
	}
	if listed[job] == "" {
		t.Errorf("the web view does not list job %s with its user: %v", job, listed)
	}
	dom = chromium(t, "http://"+all+"/job/"+job, "web-job-"+job)
	if f := findRE.FindAllStringSubmatch(dom, -1); len(f) == 0 {
		t.Errorf("the web view's page of job %s has no findings", job)
	}
	dom = chromium(t, "http://"+all+"/site", "web-site")
	if !strings.Contains(dom, `data-key="inter_node_imbalance"`) {
		t.Errorf("the site page does not count the imbalance finding")
	}

	// Behind a proxy: the job's user sees it, another user does not, root sees all.
	proxied := startWeb(t, c, db, "--user-header", "X-Remote-User")
	owner := listed[job]
	for _, tc := range []struct {
		user, path string
		code       int
		has        bool
	}{
		{owner, "/", 200, true},
		{"someone-else", "/", 200, false},
		{"root", "/", 200, true},
		{owner, "/job/" + job, 200, true},
		{"someone-else", "/job/" + job, 404, false},
		{"", "/", 401, false},
	} {
		code, body := getAs(t, "http://"+proxied+tc.path, tc.user)
		if code != tc.code || strings.Contains(body, `data-job="`+job+`"`) != (tc.has && tc.path == "/") {
			t.Errorf("%s as %q: %d, job listed %v; want %d, %v", tc.path, tc.user, code, strings.Contains(body, `data-job="`+job+`"`), tc.code, tc.has)
		}
	}
}

// startWeb starts persyst web over db with args on a free loopback port until the test
// ends, and returns its address.
func startWeb(t *testing.T, c *cluster, db string, args ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(persystBin(), append([]string{"web", "--db", db, "--listen", addr, "--config", filepath.Join(c.dir, "etc", "persyst.conf")}, args...)...)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitFor(t, 15*time.Second, "persyst web "+strings.Join(args, " "), func() (bool, string) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return false, fmt.Sprintf("%v\n%s", err, logs.String())
		}
		conn.Close()
		return true, ""
	})
	return addr
}

func getAs(t *testing.T, url, user string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.Header.Set("X-Remote-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
