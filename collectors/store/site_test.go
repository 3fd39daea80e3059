package store_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sitesim"
)

// near says whether two sums of many float terms agree (summed in different orders).
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// checkSite compares the site's figures over every day with what was stored.
func checkSite(t *testing.T, s *store.Store, now time.Time, want sitesim.Totals) {
	t.Helper()
	site, err := s.Rollups().Site(context.Background(), store.SiteFilter{From: now.AddDate(0, 0, -30), To: now, Top: 3, Scope: store.Scope{All: true}})
	if err != nil {
		t.Fatal(err)
	}
	if site.Jobs != want.Jobs || !near(site.CPUHours, want.CPUHours) || !near(site.GPUHours, want.GPUHours) {
		t.Errorf("site: %d jobs, %.6f CPU-hours, %.6f GPU-hours; stored %d, %.6f, %.6f",
			site.Jobs, site.CPUHours, site.GPUHours, want.Jobs, want.CPUHours, want.GPUHours)
	}
	if len(site.Findings) != len(want.Findings) {
		t.Errorf("site: %d findings, stored %d", len(site.Findings), len(want.Findings))
	}
	for i, f := range site.Findings {
		w := want.Findings[f.Key]
		if f.Jobs != w.Jobs || !near(f.CPUHours, w.CPUHours) {
			t.Errorf("finding %s: %d jobs, %.6f CPU-hours; stored %d, %.6f", f.Key, f.Jobs, f.CPUHours, w.Jobs, w.CPUHours)
		}
		if i > 0 && f.CPUHours > site.Findings[i-1].CPUHours {
			t.Errorf("finding %s above %s: not ordered by CPU-hours", site.Findings[i-1].Key, f.Key)
		}
		if f.Name == "" || f.Name == f.Key || len(f.Users) == 0 || len(f.TopJobs) == 0 || len(f.TopJobs) > 3 {
			t.Errorf("finding %s: name %q, %d users, %d top jobs", f.Key, f.Name, len(f.Users), len(f.TopJobs))
		}
		for j := 1; j < len(f.TopJobs); j++ {
			if f.TopJobs[j].CPUHours > f.TopJobs[j-1].CPUHours {
				t.Errorf("finding %s: top jobs not ordered", f.Key)
			}
		}
	}
}

// rollupsAgree checks that the findings' roll-up of each dimension alone sums what
// findings_daily keeps per value of it.
func rollupsAgree(t *testing.T, s *store.Store) {
	t.Helper()
	for _, d := range []string{"account", "user", "partition", "qos"} {
		var n int
		// Both sides by (day, cluster, value, finding), written for SQLite and MariaDB alike
		// (no FULL JOIN, no scalar max, the dimension's name quoted).
		err := s.Reader().QueryRow(`SELECT count(*) FROM (
			SELECT sum(an) an, sum(bn) bn, sum(aj) aj, sum(bj) bj, sum(ah) ah, sum(bh) bh FROM (
				SELECT day, cluster, "`+d+`" AS value, finding, 1 an, 0 bn, jobs aj, 0 bj, cpu_h ah, 0e0 bh FROM findings_daily
				UNION ALL
				SELECT day, cluster, value, finding, 0, 1, 0, jobs, 0e0, cpu_h FROM findings_by_daily WHERE dim = ?) x
			GROUP BY day, cluster, value, finding) y
			WHERE (an > 0) != (bn > 0) OR aj != bj OR abs(ah - bh) > 1e-6 * (CASE WHEN abs(ah) > 1 THEN abs(ah) ELSE 1 END)`, d).Scan(&n)
		if err != nil || n != 0 {
			t.Errorf("findings by %s: %d rows differ from findings_daily's sums (%v)", d, n, err)
		}
	}
}

// TestSiteExact: the site's figures are the sums over every job stored (the roll-ups,
// whatever their number: web's TestSiteManyJobs has more than a list holds), and stay
// exact as the same reports come again.
func TestSiteExact(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := storetest.Open(t, store.Options{Now: func() time.Time { return now }})
	n := storetest.Jobs(4000)
	tot, err := sitesim.Fill(ctx, s, sitesim.FillOptions{Jobs: n, Now: now, Seed: 7, Reused: 0.02}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Jobs != int64(n) {
		t.Fatalf("stored %d jobs", tot.Jobs)
	}
	checkSite(t, s, now, tot)

	// Every job is kept, those with a reused id and those of the two clusters that share
	// ids among them: the site counts n jobs, the list by id shows each.
	var both int
	for id := uint32(1_000_000); id < 1_000_050; id++ {
		js, err := s.Jobs(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(js) >= 2 {
			both++
		}
	}
	if both == 0 {
		t.Error("no job id is kept twice among the first 50 ids of two clusters")
	}

	// The same reports again (a batch host that resent them): nothing changes.
	again, err := sitesim.Fill(ctx, s, sitesim.FillOptions{Jobs: n / 8, Now: now, Seed: 7, Reused: 0.02}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = again
	checkSite(t, s, now, tot)
	rollupsAgree(t, s)
}

// TestRollupsFollowChanges: a replaced report and changed facts move a job's figures in
// the roll-ups; nothing is counted twice or left behind.
func TestRollupsFollowChanges(t *testing.T) {
	ctx := context.Background()
	s := storetest.Open(t, store.Options{Now: store.FixedNow, Cluster: "c1"})
	r := testReport(11) // 64 CPUs for an hour, idle_cores over all of it
	facts := store.Job{User: "alice", Account: "a1", Partition: "cpu", Start: r.Start}
	if err := s.Keep(ctx, facts, r); err != nil {
		t.Fatal(err)
	}
	site := func(user string) *store.Site {
		t.Helper()
		st, err := s.Rollups().Site(ctx, store.SiteFilter{From: store.T0.AddDate(0, 0, -1), To: store.T0.AddDate(0, 0, 1), User: user, Scope: store.Scope{All: true}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	type fig struct {
		Jobs       int64
		CPUHours   float64
		Findings   map[string]float64
		EnergyKWh  float64
		EnergyJobs int64
	}
	figOf := func(st *store.Site) fig {
		f := fig{Jobs: st.Jobs, CPUHours: st.CPUHours, Findings: map[string]float64{}, EnergyKWh: st.EnergyKWh, EnergyJobs: st.EnergyJobs}
		for _, c := range st.Findings {
			f.Findings[c.Key] = c.CPUHours
		}
		return f
	}
	// The report replaced gives the job an energy; the same report again does not
	// count it twice; one without takes it out.
	withEnergy := func() digest.Report {
		r2 := testReport(11)
		r2.Findings[0].Key, r2.Findings[0].TimeShare, r2.Seconds = "io_wait", 0.5, 7200
		r2.Energy = &digest.Energy{Joules: 9e6, KWh: 2.5, Parts: map[string]float64{"cpu": 9e6}}
		return r2
	}
	none := fig{0, 0, map[string]float64{}, 0, 0}
	for _, step := range []struct {
		name       string
		change     func() error
		alice, bob fig
	}{
		{"kept", func() error { return nil }, fig{1, 64, map[string]float64{"idle_cores": 64}, 0, 0}, none},
		{"user changed", func() error { return s.PutJob(ctx, store.Job{ID: 11, User: "bob", Start: r.Start}) },
			none, fig{1, 64, map[string]float64{"idle_cores": 64}, 0, 0}},
		{"report replaced", func() error { return s.Keep(ctx, store.Job{}, withEnergy()) },
			none, fig{1, 128, map[string]float64{"io_wait": 64}, 2.5, 1}},
		{"same report again", func() error { return s.Keep(ctx, store.Job{Start: r.Start}, withEnergy()) },
			none, fig{1, 128, map[string]float64{"io_wait": 64}, 2.5, 1}},
		{"a report without energy", func() error {
			r2 := withEnergy()
			r2.Energy = nil
			return s.Keep(ctx, store.Job{Start: r.Start}, r2)
		}, none, fig{1, 128, map[string]float64{"io_wait": 64}, 0, 0}},
		{"a multi-node job's energy of one node: not the job's", func() error {
			r2 := withEnergy()
			r2.NNodes, r2.Energy.Nodes = 2, []string{"node1"}
			return s.Keep(ctx, store.Job{Start: r.Start}, r2)
		}, none, fig{1, 128, map[string]float64{"io_wait": 64}, 0, 0}},
		{"the energy of all its nodes", func() error {
			r2 := withEnergy()
			r2.NNodes, r2.Energy.Nodes = 2, []string{"node1", "node2"}
			return s.Keep(ctx, store.Job{Start: r.Start}, r2)
		}, none, fig{1, 128, map[string]float64{"io_wait": 64}, 2.5, 1}},
	} {
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if d := cmp.Diff(step.alice, figOf(site("alice"))); d != "" {
			t.Errorf("%s: alice (-want +got):\n%s", step.name, d)
		}
		if d := cmp.Diff(step.bob, figOf(site("bob"))); d != "" {
			t.Errorf("%s: bob (-want +got):\n%s", step.name, d)
		}
		if all := figOf(site("")); all.Jobs != 1 {
			t.Errorf("%s: the site counts %d jobs", step.name, all.Jobs)
		}
	}
	var rows, byDim int
	if err := s.Reader().QueryRow(`SELECT (SELECT count(*) FROM usage_daily) + (SELECT count(*) FROM findings_daily),
			(SELECT count(*) FROM findings_by_daily)`).Scan(&rows, &byDim); err != nil || rows != 2 || byDim != 4 {
		t.Errorf("roll-up rows left: %d and %d by dimension, %v; want 2 (the job's day, its one finding) and 4 (its finding by account, user, partition, QOS)", rows, byDim, err)
	}
	rollupsAgree(t, s)
}

// TestAdmin: stats count what is stored, check finds a damaged roll-up and nothing in a
// sound database, export writes every job of the days asked.
func TestAdmin(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := storetest.Open(t, store.Options{Now: func() time.Time { return now }})
	tot, err := sitesim.Fill(ctx, s, sitesim.FillOptions{Jobs: 800, Now: now, Seed: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Admin().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows["jobs"] != tot.Jobs || st.Rows["reports"] != tot.Jobs || st.Reports["zstd"] != tot.Jobs ||
		st.Clusters["alpha"]+st.Clusters["beta"] != tot.Jobs || st.Bytes["reports"] <= 0 || st.FileBytes < st.Bytes["reports"] {
		t.Errorf("stats: %+v", st)
	}
	if p, err := s.Admin().Check(ctx); err != nil || len(p) != 0 {
		t.Errorf("check of a sound database: %v, %v", p, err)
	}
	if _, err := s.Writer().Exec(`UPDATE usage_daily SET jobs = jobs + 1 WHERE day = (SELECT max(day) FROM usage_daily)`); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Admin().Check(ctx); err != nil || len(p) == 0 || !strings.Contains(p[0], "roll-up of") {
		t.Errorf("check of a damaged roll-up: %v, %v", p, err)
	}
	var b strings.Builder
	n, err := s.Admin().Export(ctx, now.AddDate(0, 0, -30), now.AddDate(0, 0, 1), &b)
	if err != nil || int64(n) != tot.Jobs || strings.Count(b.String(), "\n") != n {
		t.Errorf("export: %d jobs, %v; stored %d", n, err, tot.Jobs)
	}
	var e store.ExportedJob
	if err := json.Unmarshal([]byte(b.String()[:strings.IndexByte(b.String(), '\n')]), &e); err != nil || e.Cluster == "" || e.User == "" || e.Account == "" || e.CPUHours <= 0 {
		t.Errorf("an exported job: %+v, %v", e, err)
	}
	if err := st.Write(&b); err != nil || !strings.Contains(b.String(), "cluster alpha") {
		t.Errorf("stats as text: %v", err)
	}
}

// TestSiteByAccount: each account's figures are the sums over its jobs' facts and
// reports (sitesim's own sums: hours, memory requested and unused, time limits
// requested and not run), and its CPU- and GPU-hours used the sums of its jobs'
// listed figures; the weeks add up to the period; a scope sees what it may, nothing
// else.
func TestSiteByAccount(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := storetest.Open(t, store.Options{Now: func() time.Time { return now }})
	n := storetest.Jobs(3000)
	tot, err := sitesim.Fill(ctx, s, sitesim.FillOptions{Jobs: n, Now: now, Seed: 11, Accounts: 6, Users: 30}, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := store.SiteFilter{From: now.AddDate(0, 0, -30), To: now, Scope: store.Scope{All: true}}
	groups, err := s.Rollups().By(ctx, all, store.ByAccount)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != len(tot.ByAccount) {
		t.Errorf("%d accounts, stored %d", len(groups), len(tot.ByAccount))
	}
	list, err := s.ListJobs(ctx, store.JobFilter{Scope: store.Scope{All: true}})
	if err != nil || len(list) != n {
		t.Fatalf("%d jobs listed, %v", len(list), err)
	}
	used := map[string][2]float64{}
	for _, l := range list {
		u := used[l.Job.Account]
		u[0] += l.Summary.Usage.CPUUsedHours
		u[1] += l.Summary.Usage.GPUUsedHours
		used[l.Job.Account] = u
	}
	for i, g := range groups {
		w := tot.ByAccount[g.Name]
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"jobs", float64(g.Jobs), float64(w.Jobs)}, {"CPU-hours", g.CPUHours, w.CPUHours}, {"GPU-hours", g.GPUHours, w.GPUHours},
			{"memory GiB-hours", g.MemGiBHours, w.MemGiBHours}, {"memory unused", g.MemUnusedGiBHours, w.MemUnusedGiBHours},
			{"time limit CPU-hours", g.LimitCPUHours, w.LimitCPUHours}, {"time limit not run", g.LimitUnusedCPUHours, w.LimitUnusedCPUHours},
			{"CPU-hours used", g.CPUUsedHours, used[g.Name][0]}, {"GPU-hours used", g.GPUUsedHours, used[g.Name][1]},
			{"kWh", g.EnergyKWh, w.EnergyKWh}, {"jobs with energy", float64(g.EnergyJobs), float64(w.EnergyJobs)},
		} {
			if !near(c.got, c.want) {
				t.Errorf("account %s: %s %.6f, its jobs sum to %.6f", g.Name, c.what, c.got, c.want)
			}
		}
		if g.MemUnusedGiBHours <= 0 || g.LimitUnusedCPUHours <= 0 || g.Top == nil || g.CPUIdleHours() <= 0 || g.EnergyKWh <= 0 {
			t.Errorf("account %s: nothing unused, or no finding: %+v", g.Name, g)
		}
		if i > 0 && g.CPUHours+g.GPUHours > groups[i-1].CPUHours+groups[i-1].GPUHours {
			t.Errorf("account %s above %s: not ordered by hours", groups[i-1].Name, g.Name)
		}
	}
	site, err := s.Rollups().Site(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	weeks, err := s.Rollups().Weeks(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	var jobs int64
	var cpuH float64
	for i, w := range weeks {
		jobs, cpuH = jobs+w.Jobs, cpuH+w.CPUHours
		if w.From.Weekday() != time.Monday || i > 0 && w.From.Sub(weeks[i-1].From) != 7*24*time.Hour {
			t.Errorf("week %d begins %s", i, w.From)
		}
	}
	// The days from Saturday 2026-10-31 to Monday 2026-11-30: 6 weeks from Monday 10-26.
	if jobs != site.Jobs || !near(cpuH, site.CPUHours) || len(weeks) != 6 || !weeks[0].From.Equal(time.Date(2026, 10, 26, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("%d weeks sum to %d jobs, %.3f CPU-hours; the period has %d, %.3f", len(weeks), jobs, cpuH, site.Jobs, site.CPUHours)
	}

	// Scopes: a user sees their own; a coordinator their accounts' and their own; the
	// zero scope nothing; a filter outside the scope nothing.
	var user string
	for _, l := range list {
		if l.Job.Account != groups[0].Name {
			user = l.Job.User
			break
		}
	}
	for _, c := range []struct {
		name  string
		f     store.SiteFilter
		want  float64
		empty bool
	}{
		{"a user", store.SiteFilter{Scope: store.Scope{User: user}}, tot.ByUser[user], false},
		{"a coordinator", store.SiteFilter{Scope: store.Scope{User: "nobody", Accounts: []string{groups[0].Name}}}, groups[0].CPUHours, false},
		{"a coordinator and their own", store.SiteFilter{Scope: store.Scope{User: user, Accounts: []string{groups[0].Name}}}, groups[0].CPUHours + tot.ByUser[user], false},
		{"nobody", store.SiteFilter{}, 0, true},
		{"another's account", store.SiteFilter{Scope: store.Scope{User: user}, Account: groups[0].Name}, 0, true},
		{"another user in a coordinated account", store.SiteFilter{Scope: store.Scope{User: "nobody", Accounts: []string{groups[0].Name}}, User: user}, 0, true},
	} {
		c.f.From, c.f.To = all.From, all.To
		st, err := s.Rollups().Site(ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		if !near(st.CPUHours, c.want) || c.empty && (st.Jobs != 0 || len(st.Findings) != 0) {
			t.Errorf("%s: %d jobs, %.3f CPU-hours, %d findings; want %.3f", c.name, st.Jobs, st.CPUHours, len(st.Findings), c.want)
		}
		for _, f := range st.Findings {
			for _, j := range f.TopJobs {
				if j.Job.User != c.f.Scope.User && !slices.Contains(c.f.Scope.Accounts, j.Job.Account) {
					t.Errorf("%s: finding %s lists job %d of %s (%s)", c.name, f.Key, j.Job.ID, j.Job.User, j.Job.Account)
				}
			}
			for _, u := range f.Users {
				if c.name == "a user" && u.User != user {
					t.Errorf("%s: finding %s lists user %s", c.name, f.Key, u.User)
				}
			}
		}
		l, err := s.ListJobs(ctx, store.JobFilter{Scope: c.f.Scope, Account: c.f.Account, User: c.f.User})
		if err != nil {
			t.Fatal(err)
		}
		var h float64
		for _, j := range l {
			h += j.Summary.Usage.CPUHours
		}
		if !near(h, c.want) {
			t.Errorf("%s: the jobs listed hold %.3f CPU-hours, want %.3f", c.name, h, c.want)
		}
	}
}

// TestWasteFollowsFacts: a job's memory and time limit, written after its report, move
// what the roll-ups count as requested and unused.
func TestWasteFollowsFacts(t *testing.T) {
	ctx := context.Background()
	s := storetest.Open(t, store.Options{Now: store.FixedNow})
	r := testReport(12) // 64 CPUs for an hour
	r.Properties = append(r.Properties, properties.Result{Key: "memory_unused", Assessed: true, Deciles: []float64{0.25, 0.25}})
	if err := s.Keep(ctx, store.Job{User: "alice", Account: "a", Start: r.Start, End: r.End}, r); err != nil {
		t.Fatal(err)
	}
	f := store.SiteFilter{From: store.T0.AddDate(0, 0, -1), To: store.T0.AddDate(0, 0, 1), Scope: store.Scope{All: true}}
	usage := func() store.Usage {
		t.Helper()
		st, err := s.Rollups().Site(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return st.Usage
	}
	if u := usage(); u.MemGiBHours != 0 || u.LimitCPUHours != 0 {
		t.Errorf("no request known: %+v", u)
	}
	// 8 GiB and a 4 h limit for a job of an hour: 8 GiB-hours, 6 unused; 256 CPU-hours
	// of limit, 192 not run.
	if err := s.PutJob(ctx, store.Job{ID: 12, Start: r.Start, ReqMemMB: 8192, TimeLimit: 4 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	u := usage()
	got := [4]float64{u.MemGiBHours, u.MemUnusedGiBHours, u.LimitCPUHours, u.LimitUnusedCPUHours}
	if want := [4]float64{8, 6, 256, 192}; !near(got[0], want[0]) || !near(got[1], want[1]) || !near(got[2], want[2]) || !near(got[3], want[3]) {
		t.Errorf("memory and limit: %v, want %v", got, want)
	}
	if u.Jobs != 1 || u.MemMeasuredGiBHours != u.MemGiBHours {
		t.Errorf("usage %+v", u)
	}
}
