package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
)

func TestCycleRoundTrip(t *testing.T) {
	s := storetest.Open(t, store.Options{Now: store.FixedNow})
	ctx := context.Background()
	empty, _ := quantile.Summarize(nil, 4)
	empty.NonFinite = 3
	pct, _ := quantile.Summarize([]float64{1e-300, -2.5, 1e300, 0, 1.0 / 3, math.Pi, 7}, 100)
	inf := store.Result("inf", 1, 2)
	inf.Summary.Sum, inf.Summary.Mean = math.Inf(1), math.Inf(1)
	inf.Summary.Quantiles[10] = math.Inf(1)
	inf.Summary.Quantiles[0] = math.Inf(-1)
	bad := store.Result("bad", 1, 2, 3)
	bad.Severity.Invalid = 2
	bad.Severity.Counts[4] = 5
	bad.Devices = 64
	bad.TimeShare = 0.125

	cycle1 := []store.CycleResult{
		store.Result("cpu_user_pct", 0.1, 0.9, 0.5, 0.25, 0.75, 0.3),
		{Key: "empty", Summary: empty},
		{Key: "percentiles", Summary: pct, Devices: 7},
		inf,
		bad,
	}
	cycle2 := []store.CycleResult{store.Result("cpu_user_pct", 1, 2, 3)}
	ts1 := store.T0.Add(500 * time.Millisecond) // stored as whole seconds
	ts2 := store.T0.Add(time.Minute).In(time.FixedZone("CET", 3600))
	if err := s.PutCycle(ctx, 42, ts1, cycle1); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCycle(ctx, 42, ts2, cycle2); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCycle(ctx, 43, ts1, cycle2); err != nil {
		t.Fatal(err)
	}

	opts := cmp.Options{cmpopts.EquateNaNs()}
	want := []store.StoredCycle{{Time: store.T0, CycleResult: cycle1[0]}, {Time: store.T0.Add(time.Minute), CycleResult: cycle2[0]}}
	got, err := s.Cycles(ctx, 42, "cpu_user_pct")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got, opts); d != "" {
		t.Errorf("Cycles (-want +got):\n%s", d)
	}
	for _, r := range cycle1[1:] {
		got, err := s.Cycles(ctx, 42, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]store.StoredCycle{{Time: store.T0, CycleResult: r}}, got, opts); d != "" {
			t.Errorf("Cycles %s (-want +got):\n%s", r.Key, d)
		}
	}
	if got, err := s.Cycles(ctx, 42, "nope"); err != nil || len(got) != 0 {
		t.Errorf("unknown key: %v, %v", got, err)
	}
	j, err := s.Job(ctx, 42)
	if err != nil {
		t.Fatal(err)
	}
	if j.Samples != 2 || !j.Updated.Equal(store.T0) {
		t.Errorf("job row %+v", j)
	}
	// The quantiles column is JSON that the database's json functions read (SQLite's and
	// MariaDB's json_extract), an empty summary's quantiles nulls.
	var median float64
	if err := s.Reader().QueryRow(`SELECT json_extract(quantiles, '$[5]') FROM cycles WHERE job = (SELECT "key" FROM jobs WHERE job_id = 42) AND "key" = 'cpu_user_pct' AND ts = ?`, store.T0.Unix()).Scan(&median); err != nil || median != cycle1[0].Summary.Quantiles[5] {
		t.Errorf("json median %v, %v; want %v", median, err, cycle1[0].Summary.Quantiles[5])
	}
	var text string
	var qs []*float64
	if err := s.Reader().QueryRow(`SELECT quantiles FROM cycles WHERE "key" = 'empty'`).Scan(&text); err != nil || json.Unmarshal([]byte(text), &qs) != nil ||
		len(qs) != 5 || slices.ContainsFunc(qs, func(q *float64) bool { return q != nil }) {
		t.Errorf("empty summary: quantiles %s, %v; want 5 nulls", text, err)
	}
}

func TestPutCycleRefuses(t *testing.T) {
	s := storetest.Open(t, store.Options{Now: store.FixedNow})
	ctx := context.Background()
	ok := store.Result("a", 1)
	noQ := ok
	noQ.Summary.Quantiles = []float64{1}
	share := ok
	share.TimeShare = math.NaN()
	neg := ok
	neg.Severity.Counts[2] = -1
	for name, c := range map[string]struct {
		job uint32
		rs  []store.CycleResult
	}{
		"job 0":      {0, []store.CycleResult{ok}},
		"no key":     {1, []store.CycleResult{{Summary: ok.Summary}}},
		"q 0":        {1, []store.CycleResult{noQ}},
		"time share": {1, []store.CycleResult{share}},
		"negative":   {1, []store.CycleResult{neg}},
		"twice":      {1, []store.CycleResult{ok, ok}},
	} {
		if err := s.PutCycle(ctx, c.job, store.T0, c.rs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := s.Job(ctx, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused cycle created the job: %v", err)
	}
}

func TestPutCycleUpsert(t *testing.T) {
	s := storetest.Open(t, store.Options{Now: store.FixedNow})
	ctx := context.Background()
	rs := []store.CycleResult{store.Result("a", 1, 2, 3), store.Result("b", 4, 5)}
	for range 3 {
		if err := s.PutCycle(ctx, 9, store.T0, rs); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	if err := s.Reader().QueryRow(`SELECT count(*) FROM cycles`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("%d rows after 3 identical puts, %v", rows, err)
	}
	if j, _ := s.Job(ctx, 9); j.Samples != 1 {
		t.Errorf("samples %d after 3 puts of one cycle", j.Samples)
	}
	// A resent cycle with new values replaces the old row; a new key at the
	// same ts adds one and is not a new sample.
	rs2 := []store.CycleResult{store.Result("a", 10, 20), store.Result("c", 1)}
	if err := s.PutCycle(ctx, 9, store.T0, rs2); err != nil {
		t.Fatal(err)
	}
	opts := cmpopts.EquateNaNs()
	for key, want := range map[string]store.CycleResult{"a": rs2[0], "b": rs[1], "c": rs2[1]} {
		got, err := s.Cycles(ctx, 9, key)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]store.StoredCycle{{Time: store.T0, CycleResult: want}}, got, opts); d != "" {
			t.Errorf("%s (-want +got):\n%s", key, d)
		}
	}
	if j, _ := s.Job(ctx, 9); j.Samples != 1 {
		t.Errorf("samples %d", j.Samples)
	}
}

func testReport(job uint32) digest.Report {
	thr := 0.25
	cet := time.FixedZone("CET", 3600)
	return digest.Report{
		Schema: digest.SchemaVersion, JobID: job,
		Nodes: []string{"node1", "node2"}, NNodes: 2, CPUs: 64,
		Start: time.Date(2025, 3, 1, 13, 0, 0, 123456789, cet), End: time.Date(2025, 3, 1, 14, 0, 0, 0, cet),
		Seconds: 3600, Samples: 61, MinSeconds: 300,
		Findings: []properties.Result{{
			Key: "idle_cores", ID: "idle_cores", Name: "Allocated CPUs left idle", Unit: "%", Domain: properties.Core,
			Assessed: true, Count: 3904, Deciles: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
			Threshold: &thr, TimeShare: 1, MeanSeverity: 0.66, MaxSeverity: 1, Score: 0.66, Finding: true,
			Recommendation: "request fewer CPUs",
		}},
		Properties:  []properties.Result{{Key: "instruction_rate", NotAssessed: "instructions: not available"}},
		NotAssessed: []digest.NotAssessed{{Reason: "not available", Properties: []string{"instruction_rate"}}},
	}
}

func TestReportRoundTrip(t *testing.T) {
	s := storetest.Open(t, store.Options{Now: store.FixedNow})
	ctx := context.Background()
	if _, err := s.Report(ctx, 5); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing report: %v", err)
	}
	r := testReport(5)
	r.Properties = append(r.Properties, r.Findings...)
	if err := s.PutReport(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.Report(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&r, got); d != "" {
		t.Errorf("Report (-want +got):\n%s", d)
	}
	// The report fills the job facts the row lacks and keeps those it has.
	if err := s.PutJob(ctx, store.Job{ID: 6, User: "alice", CPUs: 8}); err != nil {
		t.Fatal(err)
	}
	r6 := testReport(6)
	if err := s.PutReport(ctx, r6); err != nil {
		t.Fatal(err)
	}
	r6.Samples = 99 // a replaced report
	if err := s.PutReport(ctx, r6); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Report(ctx, 6); got.Samples != 99 {
		t.Errorf("replaced report: samples %d", got.Samples)
	}
	j, err := s.Job(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	want := &store.Job{Key: j.Key, ID: 6, User: "alice", Nodes: "node1,node2", NNodes: 2, CPUs: 8,
		Start: time.Unix(r6.Start.Unix(), 0).UTC(), End: r6.End.UTC(), Updated: store.T0}
	if d := cmp.Diff(want, j); d != "" {
		t.Errorf("job row (-want +got):\n%s", d)
	}

	for name, bad := range map[string]digest.Report{
		"job 0":     {Schema: 1},
		"no schema": {JobID: 3},
		"NaN":       {Schema: 1, JobID: 3, Seconds: math.NaN()},
	} {
		if err := s.PutReport(ctx, bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := s.Writer().Exec(`UPDATE reports SET "schema" = ? WHERE job = (SELECT "key" FROM jobs WHERE job_id = 5)`, digest.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Report(ctx, 5); err == nil {
		t.Error("a report of a newer schema was read")
	}
}

func TestPutJobAndReuse(t *testing.T) {
	s := storetest.Open(t, store.Options{Now: store.FixedNow, Cluster: "c1"})
	ctx := context.Background()
	start := testReport(3).Start.Truncate(time.Second).UTC() // Slurm's start, the report's within a second
	if err := s.PutJob(ctx, store.Job{ID: 3, Cluster: "c1", User: "bob", Nodes: "n[1-4]", NNodes: 4, CPUs: 128, Start: start}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCycle(ctx, 3, store.T0, []store.CycleResult{store.Result("a", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutReport(ctx, testReport(3)); err != nil {
		t.Fatal(err)
	}
	// The end, later: other facts stay.
	if err := s.PutJob(ctx, store.Job{ID: 3, End: store.T0, Samples: 1000}); err != nil {
		t.Fatal(err)
	}
	j, err := s.Job(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := &store.Job{Key: j.Key, ID: 3, Cluster: "c1", User: "bob", Nodes: "n[1-4]", NNodes: 4, CPUs: 128, Start: start, End: store.T0, Samples: 1, Updated: store.T0}
	if d := cmp.Diff(want, j); d != "" {
		t.Errorf("job (-want +got):\n%s", d)
	}
	// The same id with another start: a new job; the earlier one is kept whole.
	if err := s.PutJob(ctx, store.Job{ID: 3, User: "carol", Start: store.T0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	j, _ = s.Job(ctx, 3)
	want = &store.Job{Key: j.Key, Cluster: "c1", ID: 3, User: "carol", Start: store.T0.Add(time.Hour), Updated: store.T0}
	if d := cmp.Diff(want, j); d != "" {
		t.Errorf("reused id (-want +got):\n%s", d)
	}
	all, err := s.Jobs(ctx, 3)
	if err != nil || len(all) != 2 || all[1].User != "bob" || all[1].Start != start {
		t.Fatalf("jobs with id 3: %+v, %v; want carol's and bob's", all, err)
	}
	if cs, _ := s.CyclesAt(ctx, all[1].Key, "a"); len(cs) != 1 {
		t.Errorf("the earlier job's cycles: %v", cs)
	}
	if _, err := s.ReportAt(ctx, all[1].Key); err != nil {
		t.Errorf("the earlier job's report: %v", err)
	}
	if _, err := s.Report(ctx, 3); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the new job has no report yet: %v", err)
	}
	if _, err := s.Job(ctx, 4); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	now := store.T0
	s, err := store.Open(ctx, storetest.Target(t), store.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(job uint32, end time.Time) {
		t.Helper()
		if err := s.PutCycle(ctx, job, store.T0, []store.CycleResult{store.Result("a", 1, 2), store.Result("b", 3)}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutReport(ctx, testReport(job)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutJob(ctx, store.Job{ID: job, End: end}); err != nil {
			t.Fatal(err)
		}
	}
	put(1, store.T0.Add(-48*time.Hour))
	put(2, store.T0.Add(-25*time.Hour))
	put(3, store.T0.Add(-1*time.Hour))
	// Jobs 4 and 5 have no end: 4 was last written 30 h ago, 5 now.
	now = store.T0.Add(-30 * time.Hour)
	if err := s.PutCycle(ctx, 4, store.T0, []store.CycleResult{store.Result("a", 1)}); err != nil {
		t.Fatal(err)
	}
	now = store.T0
	if err := s.PutCycle(ctx, 5, store.T0, []store.CycleResult{store.Result("a", 1)}); err != nil {
		t.Fatal(err)
	}
	// Job 6's report came after the job map's end: the row keeps the job map's.
	if err := s.PutJob(ctx, store.Job{ID: 6, End: store.T0.Add(-72 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutReport(ctx, testReport(6)); err != nil {
		t.Fatal(err)
	}

	count := func(table string) (jobs []uint32) {
		t.Helper()
		q := `SELECT DISTINCT j.job_id FROM ` + table + ` t JOIN jobs j ON j.key = t.job ORDER BY j.job_id`
		if table == "jobs" {
			q = `SELECT DISTINCT job_id FROM jobs ORDER BY job_id`
		}
		rows, err := s.Reader().Query(q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var j uint32
			rows.Scan(&j)
			jobs = append(jobs, j)
		}
		return jobs
	}
	site := func() *store.Site {
		t.Helper()
		st, err := s.Rollups().Site(ctx, store.SiteFilter{From: store.T0.AddDate(0, 0, -10), To: store.T0.AddDate(0, 0, 1), Scope: store.Scope{All: true}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	before := site()
	if before.Jobs != 4 {
		t.Fatalf("site before pruning: %d jobs, want 4 (1, 2, 3, 6 have reports)", before.Jobs)
	}
	day := 24 * time.Hour
	for _, step := range []struct {
		name      string
		now       time.Time
		r         store.Retention
		want      store.Pruned
		remaining map[string][]uint32
		siteJobs  int64
	}{
		{"cycles", store.T0, store.Retention{Cycles: day}, store.Pruned{CycleJobs: 3, CycleRows: 5},
			map[string][]uint32{"jobs": {1, 2, 3, 4, 5, 6}, "cycles": {3, 5}, "reports": {1, 2, 3, 6}}, 4},
		{"again", store.T0, store.Retention{Cycles: day}, store.Pruned{},
			map[string][]uint32{"jobs": {1, 2, 3, 4, 5, 6}, "cycles": {3, 5}, "reports": {1, 2, 3, 6}}, 4},
		// Deleting jobs keeps their figures in the roll-ups.
		{"jobs", store.T0, store.Retention{Cycles: day, Jobs: day}, store.Pruned{Jobs: 4},
			map[string][]uint32{"jobs": {3, 5}, "cycles": {3, 5}, "reports": {3}, "job_findings": {3}}, 4},
		// A year later with roll-ups kept for 100 days: they go, the rest by its own tiers.
		{"rollups", store.T0.AddDate(1, 0, 0), store.Retention{Rollups: 100 * day}, store.Pruned{RollupRows: 18}, // 8 of them by dimension
			map[string][]uint32{"jobs": {3, 5}, "cycles": {3, 5}, "reports": {3}}, 0},
	} {
		got, err := s.Admin().Prune(ctx, step.now, step.r)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if d := cmp.Diff(step.want, got); d != "" {
			t.Errorf("%s: pruned (-want +got):\n%s", step.name, d)
		}
		for table, want := range step.remaining {
			if d := cmp.Diff(want, count(table)); d != "" {
				t.Errorf("%s: %s after prune (-want +got):\n%s", step.name, table, d)
			}
		}
		if after := site(); after.Jobs != step.siteJobs || step.siteJobs == before.Jobs && after.CPUHours != before.CPUHours {
			t.Errorf("%s: site after prune: %d jobs, %g CPU-hours; before %d, %g", step.name, after.Jobs, after.CPUHours, before.Jobs, before.CPUHours)
		}
	}
}

// TestConcurrentWriters: goroutines writing cycles of different jobs through
// one Store, and through two Stores on the same file (as two processes
// would), while a reader reads; WAL and the busy timeout make every write
// succeed.
func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	path := storetest.Target(t)
	a, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	const cycles, props = 40, 20
	rs := make([]store.CycleResult, props)
	for i := range rs {
		rs[i] = store.Result(fmt.Sprintf("prop%02d", i), float64(i), float64(i)*2, 3)
	}
	errs := make(chan error, 8)
	stop := make(chan struct{})
	var reader sync.WaitGroup
	var reads int
	reader.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.Cycles(ctx, 1, "prop03"); err != nil {
				errs <- fmt.Errorf("read: %w", err)
				return
			}
			reads++
		}
	})
	var writers sync.WaitGroup
	for job, s := range map[uint32]*store.Store{1: a, 2: a, 3: b, 4: b} {
		writers.Go(func() {
			for c := range cycles {
				if err := s.PutCycle(ctx, job, store.T0.Add(time.Duration(c)*time.Minute), rs); err != nil {
					errs <- fmt.Errorf("job %d cycle %d: %w", job, c, err)
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	reader.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for job := uint32(1); job <= 4; job++ {
		for _, key := range []string{"prop00", "prop19"} {
			cs, err := a.Cycles(ctx, job, key)
			if err != nil || len(cs) != cycles {
				t.Errorf("job %d %s: %d cycles, %v", job, key, len(cs), err)
			}
		}
	}
	t.Logf("%d reads during the writes", reads)
}

// TestEpisodes: an episode kept grows in place as it goes on, is listed newest first,
// and is pruned with the jobs of its time.
func TestEpisodes(t *testing.T) {
	ctx := context.Background()
	s := storetest.Open(t, store.Options{Now: store.FixedNow})
	t0 := time.Unix(1_800_000_000, 0)
	put := func(from, to time.Duration, stalled int) {
		t.Helper()
		if err := s.PutEpisode(ctx, episodes.Episode{From: t0.Add(from), To: t0.Add(to), Jobs: 100, Stalled: stalled, Peak: 0.3}); err != nil {
			t.Fatal(err)
		}
	}
	put(0, 2*time.Minute, 30)
	put(0, 5*time.Minute, 40) // the same episode, longer
	put(time.Hour, time.Hour+3*time.Minute, 12)
	got, err := s.Episodes(ctx, t0.Add(-time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	type ep struct{ From, To, Stalled int }
	var gs []ep
	for _, e := range got {
		gs = append(gs, ep{int(e.From.Sub(t0) / time.Minute), int(e.To.Sub(t0) / time.Minute), e.Stalled})
	}
	if diff := cmp.Diff([]ep{{60, 63, 12}, {0, 5, 40}}, gs); diff != "" {
		t.Errorf("episodes (-want +got):\n%s", diff)
	}
	if _, err := s.Admin().Prune(ctx, t0.Add(31*time.Minute), store.Retention{Jobs: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Episodes(ctx, t0.Add(-time.Hour), ""); len(got) != 1 || got[0].Stalled != 12 {
		t.Errorf("after pruning to 30 minutes in: %+v, want the second episode only", got)
	}
}

// TestEpisodesPerCluster: two clusters' frontends sharing a store keep their episodes
// apart, those that began in the same second too, and each is listed alone or with the
// other's.
func TestEpisodesPerCluster(t *testing.T) {
	ctx := context.Background()
	to := storetest.Target(t)
	t0 := time.Unix(1_800_000_000, 0)
	for i, c := range []string{"alpha", "beta"} {
		s, err := store.Open(ctx, to, store.Options{Cluster: c})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutEpisode(ctx, episodes.Episode{From: t0, To: t0.Add(time.Minute), Jobs: 10, Stalled: 3 + i, Peak: 0.3}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	s, err := store.Open(ctx, to, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := s.Episodes(ctx, t0.Add(-time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range all {
		got[e.Cluster] = e.Stalled
	}
	if diff := cmp.Diff(map[string]int{"alpha": 3, "beta": 4}, got); diff != "" {
		t.Errorf("every cluster's episodes (-want +got):\n%s", diff)
	}
	if one, err := s.Episodes(ctx, t0.Add(-time.Hour), "beta"); err != nil || len(one) != 1 || one[0].Stalled != 4 {
		t.Errorf("beta's: %+v, %v", one, err)
	}
}
