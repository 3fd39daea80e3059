package integration

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/digest"
)

// TestSiteClusters: two clusters, each with its own slurmctld, tree and frontend, keep
// their jobs in one MariaDB database (persyst.conf's SiteStore), and that database is
// down for a minute while both run jobs: the second frontend even starts while it is
// down. Nothing is lost (the batch hosts send their reports again), each frontend says
// once that the store does not answer and once that it answers again, job 1 of one
// cluster is not job 1 of the other, and the site's figures, per cluster and in all,
// are the sums over the jobs' own reports. Nothing here is judged by CPU time.
func TestSiteClusters(t *testing.T) {
	defer sideBySide(t)()
	if r := skipReason(); r != "" {
		t.Skip("integration test skipped: " + r)
	}
	srv := storetest.NewServer(t)
	db := srv.Database(t, "persyst")
	conf := func(name string) string { return "PERSYST_CONF_EXTRA=ClusterName=" + name + "\nSiteStore=" + db }
	alpha := startCluster(t, 2, "PERSYST_COLLECTORS=1", conf("alpha"))
	// alpha's frontend made the schema; beta's starts while the database is down.
	srv.Halt(t)
	down := time.Now()
	beta := startCluster(t, 2, "PERSYST_COLLECTORS=1", conf("beta"))
	clusters := []struct {
		name string
		c    *cluster
		cpus []int // job 1's and job 2's
	}{{"alpha", alpha, []int{1, 2}}, {"beta", beta, []int{2, 1}}}
	ids := map[string][]uint32{}
	for _, cl := range clusters {
		for i, cpus := range cl.cpus {
			ids[cl.name] = append(ids[cl.name], cl.c.sbatch(t, nil, "-c", strconv.Itoa(cpus), "-J", fmt.Sprintf("%s-%d", cl.name, i+1),
				"-o", "/dev/null", "--wrap", "sleep 3"))
		}
	}
	for _, cl := range clusters {
		if ids[cl.name][0] != ids["alpha"][0] {
			t.Fatalf("the clusters' first jobs have ids %v: the test wants one id in both", ids)
		}
		for _, id := range ids[cl.name] {
			if st := cl.c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
				t.Fatalf("%s: job %d ended %s", cl.name, id, st)
			}
		}
	}
	site := func(args ...string) [][]string {
		t.Helper()
		out, errOut, err := alpha.run(t, nil, persystBin(), append([]string{"site", "--db", db, "--period", "7d", "--csv"}, args...)...)
		if err != nil {
			t.Fatalf("persyst site %v: %v\n%s", args, err, errOut)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(recs) == 0 {
			t.Fatalf("persyst site %v: %v\n%s", args, err, out)
		}
		return recs
	}
	time.Sleep(time.Until(down.Add(time.Minute)))
	srv.Start(t)
	t.Logf("the database was down %.0f s", time.Since(down).Seconds())
	// The batch hosts try again after 2 s, doubling to a minute: every report within 2.
	waitFor(t, 2*time.Minute, "every job of both clusters in the store", func() (bool, string) {
		recs := site("--table", "jobs")
		return len(recs) == 5, fmt.Sprint(recs)
	})

	// The sums over the jobs' own reports, per cluster and in all.
	type sums struct{ jobs, cpuH float64 }
	want := map[string]*sums{"": {}}
	for _, cl := range clusters {
		want[cl.name] = &sums{}
		for _, id := range ids[cl.name] {
			r := cl.c.jobReport(t, id)
			for _, s := range []*sums{want[cl.name], want[""]} {
				s.jobs++
				s.cpuH += float64(r.CPUs) * r.Seconds / 3600
			}
		}
	}
	check := func(what string, recs [][]string, name func(rec []string, col map[string]int) string) {
		t.Helper()
		col := map[string]int{}
		for i, c := range recs[0] {
			col[c] = i
		}
		for _, rec := range recs[1:] {
			w := want[name(rec, col)]
			if w == nil {
				t.Errorf("%s: a row of %q", what, name(rec, col))
				continue
			}
			jobs, _ := strconv.ParseFloat(rec[col["jobs"]], 64)
			cpuH, err := strconv.ParseFloat(rec[col["cpu_hours"]], 64)
			if jobs != w.jobs || err != nil || math.Abs(cpuH-w.cpuH) > 1e-6*math.Max(1e-3, w.cpuH) {
				t.Errorf("%s %q: %v jobs, %s CPU-hours; the reports sum to %v jobs, %.9f CPU-hours", what, name(rec, col), jobs, rec[col["cpu_hours"]], w.jobs, w.cpuH)
			}
		}
	}
	byCluster := site("--by", "cluster", "--table", "groups")
	if len(byCluster) != 3 {
		t.Errorf("by cluster: %q, want alpha's and beta's rows", byCluster)
	}
	check("by cluster", byCluster, func(rec []string, col map[string]int) string { return rec[col["cluster"]] })
	check("every cluster", site("--table", "total"), func([]string, map[string]int) string { return "" })
	for _, cl := range clusters {
		check("--cluster "+cl.name, site("--cluster", cl.name, "--table", "total"), func([]string, map[string]int) string { return cl.name })
	}

	// The site page (the web view on the shared database) gives the same figures.
	sock := startWeb(t, alpha, db, "--all")
	page := func(path string) [][]string {
		t.Helper()
		cl := http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		resp, err := cl.Get("http://web" + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		recs, err := csv.NewReader(resp.Body).ReadAll()
		if resp.StatusCode != 200 || err != nil || len(recs) == 0 {
			t.Fatalf("GET %s: %s, %v", path, resp.Status, err)
		}
		return recs
	}
	check("the site page by cluster", page("/site?period=7d&by=cluster&format=csv&table=groups"),
		func(rec []string, col map[string]int) string { return rec[col["cluster"]] })
	check("the site page", page("/site?period=7d&format=csv&table=total"), func([]string, map[string]int) string { return "" })
	check("beta's site page", page("/site?period=7d&cluster=beta&format=csv&table=total"), func([]string, map[string]int) string { return "beta" })

	// Job 1 of each cluster, by its cluster: each its own report.
	first := ids["alpha"][0]
	for _, cl := range clusters {
		out, errOut, err := alpha.run(t, nil, persystBin(), "report", "--json", "--db", db, "--cluster", cl.name, strconv.FormatUint(uint64(first), 10))
		var r digest.Report
		if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.CPUs != cl.cpus[0] {
			t.Errorf("persyst report --cluster %s %d: %d CPUs, want %d: %v\n%s%s", cl.name, first, r.CPUs, cl.cpus[0], err, out, errOut)
		}
	}
	if _, errOut, _ := alpha.run(t, nil, persystBin(), "report", "--db", db, strconv.FormatUint(uint64(first), 10)); !strings.Contains(errOut, "2 jobs in") {
		t.Errorf("persyst report %d without --cluster does not say two clusters have the id:\n%s", first, errOut)
	}

	// Each frontend said once that the store does not answer, and once that it does again:
	// its watch asks every 10 s (collectors.storeCheckEvery), and the batch hosts' reports
	// may all be in before it asks again.
	for _, cl := range clusters {
		waitFor(t, 30*time.Second, cl.name+"'s frontend saying the store answers again", func() (bool, string) {
			log := cl.c.readLog(t, "frontend")
			return strings.Contains(log, "the site's store answers"), tail(log, 5)
		})
		log := cl.c.readLog(t, "frontend")
		lost := strings.Count(log, "the site's store cannot be opened") + strings.Count(log, "the site's store does not answer")
		if back := strings.Count(log, "the site's store answers"); lost != 1 || back != 1 {
			t.Errorf("%s's frontend said %d times that the store does not answer and %d times that it does, want once each:\n%s", cl.name, lost, back, tail(log, 20))
		}
	}
	// persyst check on the frontend's host names the store and says it answers.
	out, _, _ := alpha.run(t, nil, persystBin(), "check", "--config", filepath.Join(alpha.dir, "etc", "persyst.conf"))
	if !strings.Contains(out, "the site's store mysql://root@localhost/persyst") || !strings.Contains(out, "answers: MariaDB") {
		t.Errorf("persyst check does not name the store that answers:\n%s", out)
	}
}
