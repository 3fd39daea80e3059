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
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/internal/testenv"
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
	if f := findRE.FindAllStringSubmatch(dom, -1); len(f) == 0 || !(f[0][1] == "inter_node_imbalance" ||
		len(f) > 1 && f[1][1] == "inter_node_imbalance" && (f[0][1] == "cpu_pressure" || f[0][1] == "cpu_starved")) {
		t.Errorf("findings %v, want inter_node_imbalance first, or second after the wait for the shared core (TestTree)", f)
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

	// The web view over the frontend's database, which kept every job's final report,
	// deployed as docs/admin.md says: on its unix socket, which only the proxy's user
	// (www-data) may use, behind nginx. nginx's first server stands for an admin's login
	// (it names root), its second authenticates users itself (basic auth) and names them.
	db := filepath.Join(c.dir, "run", "frontend.db")
	sock := startWeb(t, c, db, "--user-header", "X-Remote-User", "--proxy-user", "www-data")
	owner, err := user.LookupId(strconv.Itoa(jobUser)) // whom the cluster runs jobs as
	if err != nil {
		t.Fatal(err)
	}
	admin, login := startNginx(t, sock, map[string]string{owner.Username: "owner-pw", "root": "root-pw", "someone-else": "else-pw"})
	dom = chromium(t, "http://"+admin+"/", "web-jobs")
	listed := map[string]string{}
	for _, m := range rowsRE.FindAllStringSubmatch(dom, -1) {
		listed[m[1]] = m[2]
	}
	if listed[job] == "" {
		t.Fatalf("the web view does not list job %s with its user: %v", job, listed)
	}
	dom = chromium(t, "http://"+admin+"/job/"+job, "web-job-"+job)
	if f := findRE.FindAllStringSubmatch(dom, -1); len(f) == 0 {
		t.Errorf("the web view's page of job %s has no findings", job)
	}
	dom = chromium(t, "http://"+admin+"/site", "web-site")
	if !strings.Contains(dom, `data-key="inter_node_imbalance"`) {
		t.Errorf("the site page does not count the imbalance finding")
	}

	// Through the proxy's login: the job's user sees it, another user does not, root sees
	// all; a header a client sends is replaced by the proxy's.
	if listed[job] != owner.Username {
		t.Errorf("job %s listed as %s's, want %s's", job, listed[job], owner.Username)
	}
	for _, tc := range []struct {
		user, pass, forged, path string
		code                     int
		has                      bool
	}{
		{owner.Username, "owner-pw", "", "/", 200, true},
		{owner.Username, "owner-pw", "", "/job/" + job, 200, true},
		{"root", "root-pw", "", "/", 200, true},
		{"someone-else", "else-pw", "", "/", 200, false},
		{"someone-else", "else-pw", "root", "/", 200, false},
		{"someone-else", "else-pw", owner.Username, "/job/" + job, 404, false},
		{"root", "root-pw", "", "/job/" + job, 200, true},
		{"", "", "root", "/", 401, false},
		{"someone-else", "wrong", "root", "/", 401, false},
	} {
		code, body := getThrough(t, "http://"+login+tc.path, tc.user, tc.pass, tc.forged)
		listedHere := strings.Contains(body, `data-job="`+job+`"`)
		if code != tc.code || (tc.path == "/" && listedHere != tc.has) {
			t.Errorf("%s as %q (forged header %q): %d, job listed %v; want %d, %v", tc.path, tc.user, tc.forged, code, listedHere, tc.code, tc.has)
		}
	}

	// A local user on the web host, forging the header on the view's socket itself: no
	// page, whether the socket's mode keeps them out (nobody) or only the view's check of
	// who connects does (a user in the proxy's group, not its user). The proxy's user and
	// root are served.
	for _, tc := range []struct {
		who  string
		args []string
		page bool
	}{
		{"nobody", []string{"--reuid=65534", "--regid=65534", "--clear-groups"}, false},
		{"a user in group www-data", []string{"--reuid=4242", "--regid=33", "--clear-groups"}, false},
		{"www-data, the proxy", []string{"--reuid=33", "--regid=33", "--clear-groups"}, true},
		{"root", []string{"--reuid=0", "--regid=0", "--keep-groups"}, true},
	} {
		code := curlSocket(t, sock, tc.args, "root")
		if (code == "200") != tc.page {
			t.Errorf("%s on the socket, naming root: HTTP %s; want a page: %v", tc.who, code, tc.page)
		}
	}
	// --all is root's alone, on the socket only.
	all := startWeb(t, c, db, "--all")
	for who, args := range map[string][]string{"www-data": {"--reuid=33", "--regid=33", "--clear-groups"}, "root": {"--reuid=0", "--regid=0", "--keep-groups"}} {
		if code := curlSocket(t, all, args, ""); (code == "200") != (who == "root") {
			t.Errorf("--all, %s on the socket: HTTP %s", who, code)
		}
	}
	refused, err := exec.Command(persystBin(), "web", "--db", db, "--listen", "127.0.0.1:0", "--user-header", "X-Remote-User",
		"--config", filepath.Join(c.dir, "etc", "persyst.conf")).CombinedOutput()
	if err == nil || !strings.Contains(string(refused), "every local user can connect") {
		t.Errorf("persyst web on TCP with --user-header alone: %v\n%s", err, refused)
	}
}

// startWeb starts persyst web over db with args on a unix socket of its own (group
// www-data, as the package's socket unit makes it) until the test ends, and returns the
// socket's path.
func startWeb(t *testing.T, c *cluster, db string, args ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "persyst-web-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "web.sock")
	cmd := exec.Command(persystBin(), append([]string{"web", "--db", db, "--listen", "unix:" + sock, "--socket-group", "www-data",
		"--config", filepath.Join(c.dir, "etc", "persyst.conf")}, args...)...)
	// The cluster's environment: sacctmgr, which names the accounts' coordinators, reads
	// its slurm.conf.
	cmd.Env = append(os.Environ(), c.env...)
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
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return false, fmt.Sprintf("%v\n%s", err, logs.String())
		}
		conn.Close()
		return true, ""
	})
	return sock
}

// startNginx runs Debian's nginx as the site's reverse proxy in front of the web view's
// socket, as docs/admin.md deploys it (its workers as www-data), until the test ends. It
// returns two loopback addresses: one whose login is root's (an admin's), and one that
// authenticates users (basic auth with users' passwords) and names them.
func startNginx(t *testing.T, sock string, users map[string]string) (admin, login string) {
	t.Helper()
	bin := testenv.Program(t, "nginx", "nginx")
	dir, err := os.MkdirTemp("/tmp", "persyst-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var pw strings.Builder
	for u, p := range users {
		fmt.Fprintf(&pw, "%s:{PLAIN}%s\n", u, p)
	}
	testenv.Write(t, filepath.Join(dir, "htpasswd"), pw.String())
	admin, login = freePort(t), freePort(t)
	conf := fmt.Sprintf(`daemon off;
user www-data;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fcgi;
    uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
    server {
        listen %[2]s;
        location / {
            proxy_set_header X-Remote-User root;
            proxy_pass http://unix:%[4]s:/;
        }
    }
    server {
        listen %[3]s;
        location / {
            auth_basic "persyst";
            auth_basic_user_file %[1]s/htpasswd;
            proxy_set_header X-Remote-User $remote_user;
            proxy_pass http://unix:%[4]s:/;
        }
    }
}
`, dir, admin, login, sock)
	testenv.Write(t, filepath.Join(dir, "nginx.conf"), conf)
	cmd := exec.Command(bin, "-c", filepath.Join(dir, "nginx.conf"), "-p", dir)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	waitFor(t, 15*time.Second, "nginx", func() (bool, string) {
		conn, err := net.Dial("tcp", login)
		if err != nil {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return false, fmt.Sprintf("%v\n%s\n%s", err, logs.String(), b)
		}
		conn.Close()
		return true, ""
	})
	return admin, login
}

// freePort is a loopback address no one listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// curlSocket asks the web view's socket for / as the process setpriv's args make, naming
// user in the header ("": none); it returns the HTTP status ("000": no connection).
func curlSocket(t *testing.T, sock string, args []string, user string) string {
	t.Helper()
	cmdArgs := append(append([]string{}, args...), "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", sock)
	if user != "" {
		cmdArgs = append(cmdArgs, "-H", "X-Remote-User: "+user)
	}
	out, _ := exec.Command("setpriv", append(cmdArgs, "http://persyst/")...).Output()
	return strings.TrimSpace(string(out))
}

// getThrough asks url through the proxy as user (basic auth; "": none), sending a forged
// X-Remote-User header ("": none).
func getThrough(t *testing.T, url, user, pass, forged string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if forged != "" {
		req.Header.Set("X-Remote-User", forged)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
