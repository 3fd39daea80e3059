package store_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/sitesim"
)

// TestCopy: a SQLite store's every row copied into an empty store (a MariaDB database
// under make test-mariadb, another SQLite file otherwise), as `persyst db copy` moves a
// site: every job, report, cycle, episode and roll-up the same, the site's figures the
// sums over the jobs; a second copy into it refused.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	opts := store.Options{Now: func() time.Time { return now }}
	src, err := store.Open(ctx, filepath.Join(t.TempDir(), "site.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tot, err := sitesim.Fill(ctx, src, sitesim.FillOptions{Jobs: 1200, Now: now, Seed: 11, Reused: 0.02}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inf := store.Result("inf", 1, 2)
	inf.Summary.Sum, inf.Summary.Mean = math.Inf(1), math.Inf(-1)
	if err := src.PutCycle(ctx, 77, now.Add(-time.Hour), []store.CycleResult{inf, store.Result("cpu_user_pct", 10, 20)}); err != nil {
		t.Fatal(err)
	}
	if err := src.PutEpisode(ctx, episodes.Episode{From: now.Add(-2 * time.Hour), To: now.Add(-time.Hour), Jobs: 3, Stalled: 2, Peak: 0.5}); err != nil {
		t.Fatal(err)
	}
	dst := storetest.Open(t, opts)
	n, err := store.Copy(ctx, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if n["jobs"] < 1200 || n["reports"] == 0 || n["cycles"] != 2 || n["usage_daily"] == 0 || n["findings_by_daily"] == 0 || n["episodes"] != 1 {
		t.Errorf("rows copied: %v", n)
	}
	checkSite(t, dst, now, tot)
	rollupsAgree(t, dst)
	if problems, err := dst.Admin().Check(ctx); err != nil || len(problems) > 0 {
		t.Errorf("the copy's check: %v, %v", problems, err)
	}

	// Every job as `persyst db export` writes it, and each one's report.
	export := func(s *store.Store) string {
		var b bytes.Buffer
		if _, err := s.Admin().Export(ctx, time.Unix(0, 0), now.AddDate(1, 0, 0), &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	all := export(src)
	if diff := cmp.Diff(all, export(dst)); diff != "" {
		t.Errorf("the jobs exported (-source +copy):\n%s", diff)
	}
	ids := map[uint32]bool{}
	for sc := bufio.NewScanner(bytes.NewBufferString(all)); sc.Scan(); {
		var e store.ExportedJob
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		ids[e.JobID] = true
	}
	for id := range ids {
		a, errA := src.Jobs(ctx, id)
		b, errB := dst.Jobs(ctx, id)
		if diff := cmp.Diff(a, b); diff != "" || errA != nil || errB != nil {
			t.Fatalf("job %d's rows (-source +copy):\n%s%v %v", id, diff, errA, errB)
		}
		for _, j := range a {
			ra, errA := src.ReportAt(ctx, j.Key)
			rb, errB := dst.ReportAt(ctx, j.Key)
			if diff := cmp.Diff(ra, rb, cmpopts.EquateNaNs()); diff != "" || (errA == nil) != (errB == nil) {
				t.Fatalf("%s's report (-source +copy):\n%s%v %v", j.Name(), diff, errA, errB)
			}
		}
	}
	for _, key := range []string{"inf", "cpu_user_pct"} {
		a, errA := src.Cycles(ctx, 77, key)
		b, errB := dst.Cycles(ctx, 77, key)
		if diff := cmp.Diff(a, b, cmpopts.EquateNaNs()); diff != "" || errA != nil || errB != nil || len(a) != 1 {
			t.Errorf("job 77's %s cycles (-source +copy):\n%s%v %v", key, diff, errA, errB)
		}
	}
	if _, err := store.Copy(ctx, src, dst); err == nil {
		t.Error("a second copy into the same store: no error")
	}
}
