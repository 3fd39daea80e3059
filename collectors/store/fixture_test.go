package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/properties"
)

// TestMakeReleaseFixture writes testdata/release-v2.db with the store of the release
// that made it (schema version 2, persyst at 08ba9d7): three jobs with rows, cycles and
// reports (one without a report, one without facts), and an episode. Run with
// PERSYST_MAKE_FIXTURE=v2 only at that release; later schemas must migrate the file as it
// is (TestMigrateRelease).
func TestMakeReleaseFixture(t *testing.T) {
	if os.Getenv("PERSYST_MAKE_FIXTURE") != "v2" {
		t.Skip("makes the release fixture (PERSYST_MAKE_FIXTURE=v2, at the release whose schema it records)")
	}
	path, err := filepath.Abs("testdata/release-v2.db")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	ctx := context.Background()
	s, err := store.Open(ctx, path, store.Options{Now: store.FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []uint32{101, 102} {
		r := testReport(id)
		r.Start, r.End = store.T0.Add(-2*time.Hour), store.T0.Add(-time.Hour)
		if err := s.PutJob(ctx, store.Job{ID: id, User: "alice", Nodes: "node[1-2]", NNodes: 2, CPUs: 64, Start: r.Start, End: r.End}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			cyc := []store.CycleResult{store.Result("idle_cores", 0.5, 0.75, float64(i)), store.Result("cpu_user_pct", 10, 20, 30)}
			if err := s.PutCycle(ctx, id, r.Start.Add(time.Duration(i)*time.Minute), cyc); err != nil {
				t.Fatal(err)
			}
		}
		if id == 101 {
			if err := s.PutReport(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.PutCycle(ctx, 103, store.T0, []store.CycleResult{store.Result("io_wait", 1, 2)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEpisode(ctx, episodes.Episode{From: store.T0.Add(-time.Hour), To: store.T0.Add(-50 * time.Minute), Jobs: 4, Stalled: 3, Peak: 0.75}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Writer().Exec(`VACUUM`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Writer().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
}

// keepV3Jobs stores the jobs of testdata/release-v3.db: two accounts' jobs with memory
// requests, time limits and measured memory peaks, one without a limit, one without a
// request. It uses only what the release of schema 3 had, so that it makes the fixture
// there and the same jobs in a fresh store here.
func keepV3Jobs(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	for i, j := range []struct {
		account, user string
		memMB         int64
		limit         time.Duration
		peak          float64
	}{
		{"chem", "alice", 65536, 4 * time.Hour, 0.25},
		{"chem", "bob", 8192, 0, 0.9},
		{"phys", "carol", 0, 2 * time.Hour, 0},
	} {
		id := uint32(201 + i)
		r := testReport(id)
		r.Start, r.End = store.T0.Add(-3*time.Hour), store.T0.Add(-2*time.Hour)
		if j.peak > 0 {
			r.Properties = append(r.Properties, properties.Result{Key: "memory_unused", Assessed: true, Deciles: []float64{j.peak, j.peak}})
		}
		facts := store.Job{User: j.user, Account: j.account, Partition: "cpu", QOS: "normal", ReqMemMB: j.memMB, TimeLimit: j.limit,
			Start: r.Start, End: r.End, State: "COMPLETED"}
		if err := s.Keep(ctx, facts, r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMakeReleaseV3Fixture writes testdata/release-v3.db with the store of the release
// that made it (schema version 3, persyst at dce37d3): keepV3Jobs's jobs. Run with
// PERSYST_MAKE_FIXTURE=v3 only at that release (TestMigrateReleaseV3 reads it).
func TestMakeReleaseV3Fixture(t *testing.T) {
	if os.Getenv("PERSYST_MAKE_FIXTURE") != "v3" {
		t.Skip("makes the release fixture (PERSYST_MAKE_FIXTURE=v3, at the release whose schema it records)")
	}
	path, err := filepath.Abs("testdata/release-v3.db")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	s, err := store.Open(context.Background(), path, store.Options{Now: store.FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keepV3Jobs(t, s)
	if _, err := s.Writer().Exec(`VACUUM`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Writer().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateReleaseV3: the database of the release before memory and time limits were
// rolled up (testdata/release-v3.db, TestMakeReleaseV3Fixture at that release) is
// brought to the current schema with the same figures as the same jobs kept now: the
// memory peaks read from the reports, memory and time limits in the roll-ups.
func TestMigrateReleaseV3(t *testing.T) {
	ctx := context.Background()
	b, err := os.ReadFile("testdata/release-v3.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	migrated, err := store.Open(ctx, path, store.Options{Now: store.FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer migrated.Close()
	fresh, err := store.Open(ctx, filepath.Join(t.TempDir(), "fresh.db"), store.Options{Now: store.FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	keepV3Jobs(t, fresh)
	f := store.SiteFilter{From: store.T0.AddDate(0, 0, -1), To: store.T0.AddDate(0, 0, 1), Scope: store.Scope{All: true}}
	rollupsAgree(t, migrated)
	for _, by := range []store.Dim{store.ByAccount, store.ByUser, store.ByPartition, store.ByQOS, store.ByCluster} {
		got, err := migrated.Rollups().By(ctx, f, by)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Rollups().By(ctx, f, by)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("by %s after the migration (-fresh +migrated):\n%s", by, d)
		}
	}
	// alice's job: 64 GiB for an hour, peak a quarter; a 4 h limit on 64 CPUs for 1 h.
	g, err := migrated.Rollups().By(ctx, f, store.ByUser)
	if err != nil || len(g) != 3 {
		t.Fatalf("%+v, %v", g, err)
	}
	for _, u := range g {
		if u.Name == "alice" && (u.MemGiBHours != 64 || u.MemUnusedGiBHours != 48 || u.LimitCPUHours != 256 || u.LimitUnusedCPUHours != 192) {
			t.Errorf("alice after the migration: %+v", u.Usage)
		}
	}
	if p, err := migrated.Admin().Check(ctx); err != nil || len(p) > 0 {
		t.Errorf("check after the migration: %v, %v", p, err)
	}
}
