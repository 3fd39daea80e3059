package web

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/collectors/treeauth/tlstest"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sitesim"
)

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// site is a database with four jobs: alice's 1 (idle CPUs, 4 CPUs, 1 h) and 2 (no
// findings), bob's 3 (small writes, 2 nodes), and carol's 4 (idle CPUs, updated 8 days
// ago).
func site(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	clock := now
	st := storetest.Open(t, store.Options{Now: func() time.Time { return clock }})
	add := func(id uint32, user string, nnodes, cpus int, age time.Duration, findings ...properties.Result) {
		clock = now.Add(-age)
		nodes := []string{"node1", "node2"}[:nnodes]
		if err := st.PutJob(ctx, store.Job{ID: id, User: user, Nodes: strings.Join(nodes, ","), NNodes: nnodes}); err != nil {
			t.Fatal(err)
		}
		if findings == nil {
			findings = []properties.Result{}
		}
		if err := st.PutReport(ctx, digest.Report{Schema: digest.SchemaVersion, JobID: id, Nodes: nodes, NNodes: nnodes, CPUs: cpus,
			Seconds: 3600, Samples: 60, Findings: findings}); err != nil {
			t.Fatal(err)
		}
	}
	idle := properties.Result{Key: "idle_cores", Name: "Allocated CPUs left idle", TimeShare: 0.5, MeanSeverity: 0.4, Finding: true}
	writes := properties.Result{Key: "io_write_request_size", Name: "Small writes", TimeShare: 1, MeanSeverity: 0.9, Finding: true}
	add(1, "alice", 1, 4, time.Hour, idle)
	add(2, "alice", 1, 2, 2*time.Hour)
	add(3, "bob", 2, 8, 3*time.Hour, writes, idle)
	add(4, "carol", 1, 4, 8*24*time.Hour, idle)
	return st
}

var jobRE = regexp.MustCompile(`data-job="(\d+)"`)

// get asks for path from remote as user ("" : no header) and returns the status and the
// jobs listed. A remote "unix:UID" is a process of that user on the view's unix socket.
func get(t *testing.T, o Options, remote, user, path string) (int, string, []string) {
	t.Helper()
	o.Now = func() time.Time { return now }
	o.Log, o.Source = zerolog.Nop(), "front.db"
	h, err := Handler(o)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = remote
	if uid, ok := strings.CutPrefix(remote, "unix:"); ok {
		n, err := strconv.ParseUint(uid, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		r.RemoteAddr = "@"
		r = r.WithContext(context.WithValue(r.Context(), peerKey{}, peer{unix: true, uid: uint32(n)}))
	}
	if user != "" {
		r.Header.Set("X-Remote-User", user)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var jobs []string
	for _, m := range jobRE.FindAllStringSubmatch(w.Body.String(), -1) {
		jobs = append(jobs, m[1])
	}
	return w.Code, w.Body.String(), jobs
}

func TestWhoSeesWhat(t *testing.T) {
	st := site(t)
	o := Options{Store: st, UserHeader: "X-Remote-User", ProxyUIDs: []uint32{33}, IsAdmin: func(u string) bool { return u == "root" }}
	const proxy = "127.0.0.1:40000"
	cases := []struct {
		name, remote, user, path string
		code                     int
		jobs                     []string
	}{
		{"a user sees their own jobs", proxy, "alice", "/", 200, []string{"1", "2"}},
		{"and gets nothing of another's", proxy, "alice", "/?user=bob", 200, []string{}},
		{"an admin sees every job", proxy, "root", "/", 200, []string{"1", "2", "3", "4"}},
		{"an admin filters by user", proxy, "root", "/?user=bob", 200, []string{"3"}},
		{"by finding", proxy, "root", "/?finding=idle_cores", 200, []string{"1", "3", "4"}},
		{"by time", proxy, "root", "/?since=7d", 200, []string{"1", "2", "3"}},
		{"by size", proxy, "root", "/?min_nodes=2", 200, []string{"3"}},
		{"a user's own job page", proxy, "alice", "/job/1", 200, nil},
		{"another user's job is not found", proxy, "alice", "/job/3", 404, nil},
		{"a job that does not exist", proxy, "root", "/job/99", 404, nil},
		{"not through the proxy", "10.1.2.3:5000", "root", "/", 403, nil},
		{"the proxy on the unix socket", "unix:33", "alice", "/", 200, []string{"1", "2"}},
		{"root on the unix socket", "unix:0", "root", "/", 200, []string{"1", "2", "3", "4"}},
		{"a local user on the unix socket, naming root", "unix:65534", "root", "/", 403, nil},
		{"a local user on the unix socket, naming themselves", "unix:1000", "alice", "/job/1", 403, nil},
		{"no user named", proxy, "", "/", 401, nil},
		{"a user name that is no name", proxy, "alice bob", "/", 401, nil},
		{"a bad filter", proxy, "root", "/?since=yesterday", 400, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body, jobs := get(t, o, c.remote, c.user, c.path)
			if code != c.code {
				t.Fatalf("%s: %d, want %d\n%s", c.path, code, c.code, body)
			}
			if c.jobs != nil {
				if diff := cmp.Diff(c.jobs, sorted(jobs)); diff != "" {
					t.Errorf("%s as %s: jobs (-want +got):\n%s", c.path, c.user, diff)
				}
			}
		})
	}
}

func sorted(xs []string) []string {
	out := append([]string{}, xs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestSite: this week's findings, by the core-hours they held for.
func TestSite(t *testing.T) {
	st := site(t)
	code, body, _ := get(t, Options{Store: st, All: true}, "unix:0", "", "/site")
	if code != 200 {
		t.Fatalf("%d\n%s", code, body)
	}
	// Small writes: bob's job 3, 8 CPUs × 1 h × 100% = 8.0; idle CPUs: alice's 1 (4 × 1 ×
	// 0.5 = 2.0) and bob's 3 (8 × 1 × 0.5 = 4.0): 6.0 (carol's is older than a week).
	for _, want := range []string{
		`data-key="io_write_request_size" data-jobs="1" data-cpu-hours="8.000000"><td><a href="/?finding=io_write_request_size&amp;period=7d">Small writes</a></td><td class="num">1</td><td class="num">8</td>`,
		`data-key="idle_cores" data-jobs="2" data-cpu-hours="6.000000"><td><a href="/?finding=idle_cores&amp;period=7d">Allocated CPUs left idle</a></td><td class="num">2</td><td class="num">6</td>`,
		"<td>bob (4), alice (2)</td>",
		`<td class="num" id="jobs">3</td><td class="num" id="cpu-hours">14</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the site page lacks %q:\n%s", want, body)
		}
	}
	if strings.Index(body, "Small writes") > strings.Index(body, "Allocated CPUs left idle") {
		t.Error("findings are not ordered by core-hours")
	}
	if !strings.Contains(body, "None in these days.") {
		t.Errorf("the site page lists episodes there were none of:\n%s", body)
	}
	// A user's site page counts their own jobs only.
	_, body, _ = get(t, Options{Store: st, UserHeader: "X-Remote-User"}, "127.0.0.1:1", "alice", "/site")
	if strings.Contains(body, "bob") || !strings.Contains(body, "The site: alice's jobs") {
		t.Errorf("alice's site page shows others' jobs:\n%s", body)
	}
	// The week's site-wide I/O episodes, to every viewer; last week's not.
	for _, e := range []episodes.Episode{{From: now.Add(-3 * time.Hour), To: now.Add(-3*time.Hour + 8*time.Minute), Jobs: 120, Stalled: 37, Peak: 0.3},
		{From: now.Add(-9 * 24 * time.Hour), To: now.Add(-9*24*time.Hour + time.Minute), Jobs: 10, Stalled: 5, Peak: 0.5}} {
		if err := st.PutEpisode(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	_, body, _ = get(t, Options{Store: st, UserHeader: "X-Remote-User"}, "127.0.0.1:1", "alice", "/site")
	if n := strings.Count(body, `<tr class="episode">`); n != 1 || !strings.Contains(body, `<td class="num">37</td><td class="num">120</td><td class="num">30%</td>`) {
		t.Errorf("alice's site page shows %d episodes, want this week's one:\n%s", n, body)
	}
	// One cluster's episodes name no cluster; several clusters' each name theirs.
	if !strings.Contains(body, `<table id="episodes"><tr><th>from</th>`) {
		t.Errorf("one cluster's episodes with a cluster column:\n%s", body)
	}
	for _, tc := range []struct {
		clusters []string
		want     bool
	}{{nil, false}, {[]string{"a"}, false}, {[]string{"a", "a"}, false}, {[]string{"a", "b"}, true}, {[]string{"", "b"}, true}} {
		var eps []episodes.Episode
		for _, c := range tc.clusters {
			eps = append(eps, episodes.Episode{Cluster: c})
		}
		if got := severalClusters(eps); got != tc.want {
			t.Errorf("severalClusters(%q) = %v", tc.clusters, got)
		}
	}
}

var (
	siteJobsRE    = regexp.MustCompile(`id="jobs">(\d+)<`)
	siteCPUHRE    = regexp.MustCompile(`data-cpu-hours="([0-9.]+)"`)
	siteFindingRE = regexp.MustCompile(`data-key="([a-z0-9_:]+)" data-jobs="(\d+)" data-cpu-hours="([0-9.]+)"`)
)

// TestSiteManyJobs: with more jobs in the week than a list holds, the site page counts
// every one: its totals and each finding's equal the sums over every job stored.
func TestSiteManyJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 10,500 jobs")
	}
	st := storetest.Open(t, store.Options{Now: func() time.Time { return now }})
	tot, err := sitesim.Fill(context.Background(), st, sitesim.FillOptions{Jobs: 10500, Now: now, Seed: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The jobs ended within 7 × 24 hours before noon: 8 UTC days.
	code, body, _ := get(t, Options{Store: st, All: true}, "unix:0", "", "/site?days=8")
	if code != 200 {
		t.Fatalf("%d\n%s", code, body)
	}
	if m := siteJobsRE.FindStringSubmatch(body); m == nil || m[1] != strconv.FormatInt(tot.Jobs, 10) {
		t.Errorf("the site page counts %v jobs, %d were stored", m, tot.Jobs)
	}
	if strings.Contains(body, "Only the newest") || strings.Contains(body, "only the newest") {
		t.Error("the site page says it counts a part")
	}
	if !strings.Contains(body, `id="trend-energy"`) {
		t.Error("the site page draws no energy trend, yet the jobs' energy was measured")
	}
	got := map[string]sitesim.FindingTotal{}
	for _, m := range siteFindingRE.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		h, _ := strconv.ParseFloat(m[3], 64)
		got[m[1]] = sitesim.FindingTotal{Jobs: n, CPUHours: h}
	}
	if len(got) != len(tot.Findings) {
		t.Errorf("the site page shows %d findings, the jobs had %d", len(got), len(tot.Findings))
	}
	for k, w := range tot.Findings {
		g := got[k]
		if g.Jobs != w.Jobs || math.Abs(g.CPUHours-w.CPUHours) > 1e-6*math.Max(1, w.CPUHours) {
			t.Errorf("finding %s: page %d jobs, %.6f CPU-hours; stored %d, %.6f", k, g.Jobs, g.CPUHours, w.Jobs, w.CPUHours)
		}
	}
}

// TestSameIDTwice: two jobs with one Slurm id (two clusters, or an id given out again)
// are both listed; the id's link lists them, each one's own link shows it.
func TestSameIDTwice(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{Now: func() time.Time { return now }})
	for i, c := range []string{"alpha", "beta", "alpha"} {
		start := now.Add(-time.Duration(10*(3-i)) * time.Hour)
		r := digest.Report{Schema: digest.SchemaVersion, JobID: 77, Nodes: []string{"n1"}, NNodes: 1, CPUs: 2 + i,
			Start: start, End: start.Add(time.Hour), Seconds: 3600, Findings: []properties.Result{}}
		if err := st.Keep(ctx, store.Job{Cluster: c, User: "alice", Start: start}, r); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{Store: st, UserHeader: "X-Remote-User"}
	const proxy = "127.0.0.1:40000"
	code, body, jobs := get(t, o, proxy, "alice", "/?job=77")
	if code != 200 || len(jobs) != 3 {
		t.Fatalf("the list of job 77: %d, %v\n%s", code, jobs, body)
	}
	keys := regexp.MustCompile(`href="/job/77\?key=(\d+)"`).FindAllStringSubmatch(body, -1)
	if len(keys) != 3 || keys[0][1] == keys[1][1] || keys[1][1] == keys[2][1] {
		t.Fatalf("links %v", keys)
	}
	for _, k := range keys {
		if code, body, _ := get(t, o, proxy, "alice", "/job/77?key="+k[1]); code != 200 {
			t.Errorf("job 77 key %s: %d\n%s", k[1], code, body)
		}
		if code, _, _ := get(t, o, proxy, "bob", "/job/77?key="+k[1]); code != 404 {
			t.Errorf("bob sees alice's job 77 key %s: %d", k[1], code)
		}
	}
	if code, _, _ := get(t, o, proxy, "alice", "/job/77"); code != http.StatusSeeOther {
		t.Errorf("/job/77 with three jobs: %d, want a redirect to their list", code)
	}
	site, err := st.Rollups().Site(ctx, store.SiteFilter{From: now.AddDate(0, 0, -6), To: now, Scope: store.Scope{All: true}})
	if err != nil || site.Jobs != 3 || site.CPUHours != 2+3+4 {
		t.Errorf("the site counts %+v, %v; want 3 jobs, 9 CPU-hours", site, err)
	}
}

// TestAllIsRootsOnTheSocket: every job is shown to root on the view's unix socket, and
// to no one else: not the proxy's user, not a TCP client.
func TestAllIsRootsOnTheSocket(t *testing.T) {
	o := Options{Store: site(t), All: true, ProxyUIDs: []uint32{33}}
	for remote, want := range map[string]int{"unix:0": 200, "unix:33": 403, "unix:1000": 403, "127.0.0.1:1": 403} {
		if code, body, _ := get(t, o, remote, "root", "/"); code != want {
			t.Errorf("from %s: %d, want %d\n%s", remote, code, want, body)
		}
	}
}

// TestCheck: a view that names users from a header serves on TCP only where the proxy
// proves itself; every job to whoever connects is refused on TCP. The messages say what
// to use instead.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("proxy-secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	basic, plainTLS, clientCerts := filepath.Join(dir, "basic.yml"), filepath.Join(dir, "tls.yml"), filepath.Join(dir, "mtls.yml")
	testenv.Write(t, basic, "basic_auth_users:\n  nginx: "+string(hash)+"\n")
	ca, err := tlstest.New("web CA")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Issue(dir, "web")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Write(t, plainTLS, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", f.Cert, f.Key))
	testenv.Write(t, clientCerts, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n", f.Cert, f.Key, f.CA))
	header := Options{UserHeader: "X-Remote-User"}
	for _, tc := range []struct {
		name string
		o    Options
		l    ListenOptions
		want string // in the error; "": none
	}{
		{"header on the unix socket", header, ListenOptions{Addr: "unix:/run/persyst-web/web.sock"}, ""},
		{"header on systemd's socket", header, ListenOptions{Addr: "systemd"}, ""},
		{"header on TCP, nothing more", header, ListenOptions{Addr: "127.0.0.1:8080"}, "every local user can connect"},
		{"header on TCP, TLS without client certificates", header, ListenOptions{Addr: "127.0.0.1:8080", WebConfig: plainTLS}, "does not prove itself"},
		{"header on TCP, client certificates", header, ListenOptions{Addr: "127.0.0.1:8080", WebConfig: clientCerts}, ""},
		{"header on TCP, basic auth", header, ListenOptions{Addr: "127.0.0.1:8080", WebConfig: basic}, ""},
		{"header on TCP, a web config that is not there", header, ListenOptions{Addr: "127.0.0.1:8080", WebConfig: filepath.Join(dir, "none.yml")}, "none.yml"},
		{"all on TCP", Options{All: true}, ListenOptions{Addr: "127.0.0.1:8080", WebConfig: basic}, "only on a unix socket"},
		{"all on the unix socket", Options{All: true}, ListenOptions{Addr: "unix:/run/x.sock"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.o, tc.l)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOptionsMustSayWhoSeesWhat(t *testing.T) {
	st := site(t)
	for _, o := range []Options{{Store: st}, {Store: st, All: true, UserHeader: "X-User"}, {}} {
		if _, err := Handler(o); err == nil {
			t.Errorf("Handler(%+v) made a view", o)
		}
	}
}

// accounts is a database with jobs of two accounts, one of them named as no site should
// (markup, quotes, a comma): chem's 11 (alice) and 12 (bob), and 13 of carol in the
// other; every job 4 CPUs for an hour.
func accounts(t *testing.T) (*store.Store, string) {
	t.Helper()
	ctx := context.Background()
	st := storetest.Open(t, store.Options{Now: func() time.Time { return now }})
	const odd = `<b>phys</b>, "q"`
	for _, j := range []store.Job{
		{ID: 11, User: "alice", Account: "chem", JobName: "<i>run</i>, \"1\""},
		{ID: 12, User: "bob", Account: "chem"},
		{ID: 13, User: "carol", Account: odd},
	} {
		j.Nodes, j.NNodes, j.Start, j.End = "node1", 1, now.Add(-2*time.Hour), now.Add(-time.Hour)
		if err := st.PutJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		if err := st.PutReport(ctx, digest.Report{Schema: digest.SchemaVersion, JobID: j.ID, Nodes: []string{"node1"}, NNodes: 1, CPUs: 4,
			Start: j.Start, End: j.End, Seconds: 3600, Samples: 60, Findings: []properties.Result{}}); err != nil {
			t.Fatal(err)
		}
	}
	return st, odd
}

// chemOptions are the view's options over st behind a proxy's user header: root is an
// admin, alice coordinates account chem.
func chemOptions(st *store.Store) Options {
	return Options{Store: st, UserHeader: "X-Remote-User", IsAdmin: func(u string) bool { return u == "root" },
		Coordinated: func(_ context.Context, u string) []string {
			if u == "alice" {
				return []string{"chem"}
			}
			return nil
		}}
}

var groupRE = regexp.MustCompile(`<tr class="group" data-name="([^"]*)" data-jobs="(\d+)" data-cpu-hours="([0-9.]+)"`)

// TestSiteByWhom: the site by account, an account's users, a coordinator's view of
// their account (and nothing of another's), names escaped in HTML and intact in CSV.
func TestSiteByWhom(t *testing.T) {
	st, odd := accounts(t)
	o := chemOptions(st)
	const proxy = "127.0.0.1:40000"
	groups := func(user, path string) map[string]string {
		t.Helper()
		code, body, _ := get(t, o, proxy, user, path)
		if code != 200 {
			t.Fatalf("%s as %s: %d\n%s", path, user, code, body)
		}
		out := map[string]string{}
		for _, m := range groupRE.FindAllStringSubmatch(body, -1) {
			out[m[1]] = m[2] + " jobs, " + m[3]
		}
		return out
	}
	escaped := "&lt;b&gt;phys&lt;/b&gt;, &#34;q&#34;"
	for _, c := range []struct {
		name, user, path string
		want             map[string]string
	}{
		{"an admin by account", "root", "/site", map[string]string{"chem": "2 jobs, 8.000000", escaped: "1 jobs, 4.000000"}},
		{"an account's users", "root", "/site?account=chem", map[string]string{"alice": "1 jobs, 4.000000", "bob": "1 jobs, 4.000000"}},
		{"a coordinator by account", "alice", "/site", map[string]string{"chem": "2 jobs, 8.000000"}},
		{"a coordinator's account", "alice", "/site?account=chem&by=user", map[string]string{"alice": "1 jobs, 4.000000", "bob": "1 jobs, 4.000000"}},
		{"another account, to a coordinator", "alice", "/site?account=" + url.QueryEscape(odd), map[string]string{}},
		{"a user", "bob", "/site", map[string]string{"chem": "1 jobs, 4.000000"}},
		{"another user, to a user", "bob", "/site?user=alice", map[string]string{}},
		{"by partition", "root", "/site?by=partition", map[string]string{"": "3 jobs, 12.000000"}},
	} {
		if d := cmp.Diff(c.want, groups(c.user, c.path)); d != "" {
			t.Errorf("%s: %s (-want +got):\n%s", c.name, c.path, d)
		}
	}
	// Drill-down: an account leads to its users, a user to their jobs, a job to its page.
	_, body, _ := get(t, o, proxy, "root", "/site")
	if !strings.Contains(body, `href="/site?account=chem&amp;by=user&amp;period=7d"`) {
		t.Errorf("no link from account chem to its users:\n%s", body)
	}
	_, body, _ = get(t, o, proxy, "root", "/site?account=chem")
	if !strings.Contains(body, `href="/?account=chem&amp;period=7d&amp;user=alice"`) {
		t.Errorf("no link from alice to her jobs of chem:\n%s", body)
	}
	if strings.Contains(body, "<b>phys") || strings.Contains(body, "<i>run") {
		t.Errorf("a name's markup is in the page:\n%s", body)
	}
	for _, c := range []struct {
		user, path string
		code       int
		jobs       []string
	}{
		{"root", "/?account=chem&period=7d&user=alice", 200, []string{"11"}},
		{"alice", "/?account=chem", 200, []string{"11", "12"}},
		{"alice", "/job/12", 200, nil},
		{"alice", "/job/13", 404, nil},
		{"bob", "/job/11", 404, nil},
		{"bob", "/?account=chem", 200, []string{"12"}},
		{"root", "/?account=a%0Ab", 400, nil},
	} {
		code, body, jobs := get(t, o, proxy, c.user, c.path)
		if code != c.code || c.jobs != nil && !cmp.Equal(c.jobs, sorted(jobs)) {
			t.Errorf("%s as %s: %d, jobs %v; want %d, %v\n%s", c.path, c.user, code, jobs, c.code, c.jobs, body)
		}
	}
	// The same figures as CSV and JSON, names intact.
	code, body, _ := get(t, o, proxy, "root", "/site?format=csv")
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if code != 200 || err != nil || len(recs) != 3 || recs[0][2] != "account" || recs[2][2] != odd || recs[2][3] != "1" || recs[2][4] != "4" {
		t.Errorf("CSV by account: %d, %v\n%q", code, err, recs)
	}
	code, body, _ = get(t, o, proxy, "root", "/site?format=json&table=jobs&account=chem")
	var jobs []struct {
		JobID int    `json:"job_id"`
		Name  string `json:"name"`
	}
	if err := json.Unmarshal([]byte(body), &jobs); code != 200 || err != nil || len(jobs) != 2 || jobs[1].Name != "<i>run</i>, \"1\"" {
		t.Errorf("JSON jobs of chem: %d, %v, %+v\n%s", code, err, jobs, body)
	}
	code, body, _ = get(t, o, proxy, "bob", "/site?format=csv&table=jobs&user=alice")
	if recs, err := csv.NewReader(strings.NewReader(body)).ReadAll(); code != 200 || err != nil || len(recs) != 1 {
		t.Errorf("alice's jobs as CSV, to bob: %d, %v, %q", code, err, recs)
	}
}

var runningRE = regexp.MustCompile(`<tr class="running" data-running-job="(\d+)" data-reason="([a-z_]+)" data-user="([^"]*)"`)

// TestSiteRunning: the site page lists the running jobs told they hold idle GPUs or CPUs,
// as far as the viewer may see them; one whose reason stopped holding, whose batch host
// stopped saying it, or that ended is not listed; names are escaped, and the CSV has them.
func TestSiteRunning(t *testing.T) {
	ctx := context.Background()
	st, odd := accounts(t)
	start := now.Add(-5 * time.Hour)
	for _, n := range []struct {
		job     store.Job
		reason  string
		seenAgo time.Duration
		until   bool
	}{
		{store.Job{ID: 21, User: "alice", Account: "chem", JobName: "<i>train</i>", GPUs: 4, CPUs: 8}, digest.NoticeGPUIdle, time.Minute, false},
		{store.Job{ID: 22, User: "bob", Account: "chem", CPUs: 16}, digest.NoticeCPUIdle, 2 * time.Minute, false},
		{store.Job{ID: 23, User: "carol", Account: odd, CPUs: 4}, digest.NoticeCPUIdle, 3 * time.Minute, false},
		{store.Job{ID: 24, User: "bob", Account: "chem", CPUs: 4}, digest.NoticeCPUIdle, time.Minute, true}, // busy again
		{store.Job{ID: 25, User: "bob", Account: "chem", CPUs: 4}, digest.NoticeCPUIdle, time.Hour, false},  // no word for an hour
	} {
		n.job.Start, n.job.Nodes, n.job.NNodes = start, "node1", 1
		x := digest.Notice{JobID: n.job.ID, Node: "node1", Reason: n.reason, Since: start.Add(time.Hour), Told: start.Add(2 * time.Hour), Seen: now.Add(-n.seenAgo)}
		if n.until {
			x.Until = x.Seen
		}
		if err := st.Admin().KeepNotice(ctx, n.job, x); err != nil {
			t.Fatal(err)
		}
	}
	o := chemOptions(st)
	const proxy = "127.0.0.1:40000"
	for _, c := range []struct {
		user string
		want []string
	}{
		{"root", []string{"21 gpu_idle alice", "22 cpu_idle bob", "23 cpu_idle carol"}},
		{"alice", []string{"21 gpu_idle alice", "22 cpu_idle bob"}},
		{"bob", []string{"22 cpu_idle bob"}},
		{"dave", nil},
	} {
		code, body, _ := get(t, o, proxy, c.user, "/site")
		var got []string
		for _, m := range runningRE.FindAllStringSubmatch(body, -1) {
			got = append(got, m[1]+" "+m[2]+" "+m[3])
		}
		if d := cmp.Diff(c.want, got); code != 200 || d != "" {
			t.Errorf("running jobs %s sees: %d (-want +got):\n%s", c.user, code, d)
		}
		if c.user == "root" && (strings.Contains(body, "<i>train") || !strings.Contains(body, "&lt;i&gt;train&lt;/i&gt;") || !strings.Contains(body, "holds GPUs that run nothing")) {
			t.Errorf("job 21's row: its name not escaped, or its reason not said:\n%s", body)
		}
	}
	// Job 22 ends: no longer running.
	if err := st.PutJob(ctx, store.Job{ID: 22, Start: start, End: now.Add(-time.Minute), State: "COMPLETED"}); err != nil {
		t.Fatal(err)
	}
	code, body, _ := get(t, o, proxy, "root", "/site?format=csv&table=running")
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if code != 200 || err != nil || len(recs) != 3 || recs[1][1] != "21" || recs[1][2] != "<i>train</i>" || recs[2][1] != "23" || recs[2][4] != odd {
		t.Errorf("running jobs as CSV: %d, %v\n%q", code, err, recs)
	}
}
