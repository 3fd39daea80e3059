package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/episodes"
)

// TestMakeReleaseFixture writes testdata/release-v2.db with the store of the release
// that made it (schema version 2, persyst at 08ba9d7): three jobs with rows, cycles and
// reports (one without a report, one without facts), and an episode. Run with
// PERSYST_MAKE_FIXTURE=1 only at that release; later schemas must migrate the file as it
// is (TestMigrateRelease).
func TestMakeReleaseFixture(t *testing.T) {
	if os.Getenv("PERSYST_MAKE_FIXTURE") == "" {
		t.Skip("makes the release fixture (PERSYST_MAKE_FIXTURE=1, at the release whose schema it records)")
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
