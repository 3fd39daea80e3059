package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// schemaOf returns the schema's SQL, by object name.
func schemaOf(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT name, coalesce(sql, '') FROM sqlite_schema`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, s string
		if err := rows.Scan(&n, &s); err != nil {
			t.Fatal(err)
		}
		out[n] = s
	}
	return out
}

func pragma(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v string
	if err := db.QueryRow(`PRAGMA ` + name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConstants(t *testing.T) {
	if SchemaVersion != len(migrations) {
		t.Errorf("SchemaVersion %d, %d migrations", SchemaVersion, len(migrations))
	}
	if !strings.Contains(migrations[0].steps[len(migrations[0].steps)-1], "1347572564") || applicationID != 1347572564 {
		t.Errorf("application_id step does not set %d", applicationID)
	}
}

func TestOpenFresh(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "persyst.db"), Options{Now: FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	v, err := s.Admin().Version(ctx)
	if err != nil || v != SchemaVersion {
		t.Fatalf("version %d, %v; want %d", v, err, SchemaVersion)
	}
	for name, want := range map[string]string{
		"journal_mode":   "wal",
		"foreign_keys":   "1",
		"busy_timeout":   "5000",
		"synchronous":    "1", // NORMAL
		"application_id": "1347572564",
	} {
		if got := pragma(t, s.w.db, name); got != want {
			t.Errorf("PRAGMA %s = %s, want %s", name, got, want)
		}
	}
	if got := pragma(t, s.r.db, "query_only"); got != "1" {
		t.Errorf("read pool: query_only = %s", got)
	}
	if _, err := s.r.db.Exec(`DELETE FROM jobs`); err == nil {
		t.Error("read pool accepted a write")
	}
	var n int
	var desc string
	if err := s.w.db.QueryRow(`SELECT count(*), (SELECT description FROM schema_version ORDER BY version DESC LIMIT 1) FROM schema_version`).Scan(&n, &desc); err != nil || n != SchemaVersion || desc != migrations[SchemaVersion-1].description {
		t.Errorf("schema_version: %d rows, %q, %v", n, desc, err)
	}
	sch := schemaOf(t, s.w.db)
	for _, tbl := range []string{"schema_version", "jobs", "cycles", "reports", "episodes"} {
		if sch[tbl] == "" {
			t.Errorf("no table %s", tbl)
		}
	}
}

func TestReopenIsNoop(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(ctx, path, Options{Now: FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutCycle(ctx, 7, T0, []CycleResult{Result("a", 1, 2, 3)}); err != nil {
		t.Fatal(err)
	}
	before := schemaOf(t, s.w.db)
	s.Close()

	later := func() time.Time { return T0.Add(time.Hour) }
	s, err = Open(ctx, path, Options{Now: later})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if d := cmp.Diff(before, schemaOf(t, s.w.db)); d != "" {
		t.Errorf("schema changed on re-open (-before +after):\n%s", d)
	}
	var n int
	var applied int64
	if err := s.w.db.QueryRow(`SELECT count(*), max(applied_ts) FROM schema_version`).Scan(&n, &applied); err != nil || n != SchemaVersion || applied != T0.Unix() {
		t.Errorf("schema_version after re-open: %d rows applied at %d, %v", n, applied, err)
	}
	cs, err := s.Cycles(ctx, 7, "a")
	if err != nil || len(cs) != 1 {
		t.Errorf("data after re-open: %v, %v", cs, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.db.Exec(`INSERT INTO schema_version VALUES (?, 0, 'from the future')`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(ctx, path, Options{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open of a newer database: %v", err)
	}
	for _, want := range []string{path, fmt.Sprintf("schema version %d", SchemaVersion+1), fmt.Sprintf("versions up to %d", SchemaVersion), "newer persyst"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Log(err)
}

func TestFailingMigrationKeepsVersion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	broken := append(migrations[:len(migrations):len(migrations)], migration{
		description: "broken",
		steps: []string{
			`CREATE TABLE extra (x INTEGER)`,
			`ALTER TABLE jobs ADD COLUMN broken_column TEXT`,
			`INSERT INTO no_such_table VALUES (1)`,
		},
	})
	_, err := open(ctx, path, Options{}, broken, nil)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("migration to schema version %d (broken): step 3", SchemaVersion+1)) {
		t.Fatalf("open with a broken migration: %v", err)
	}
	t.Log(err)
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.Admin().Version(ctx); v != SchemaVersion {
		t.Errorf("version %d after the failed migration, want %d", v, SchemaVersion)
	}
	sch := schemaOf(t, s.w.db)
	if sch["extra"] != "" || strings.Contains(sch["jobs"], "broken_column") {
		t.Errorf("the failed migration's first steps were kept: %q, %q", sch["extra"], sch["jobs"])
	}

	// A fresh database whose first migration fails has version 0 and no tables
	// but schema_version.
	path2 := filepath.Join(t.TempDir(), "q.db")
	_, err = open(ctx, path2, Options{}, []migration{{description: "bad", steps: []string{`CREATE TABLE a (x)`, `bogus`}}}, nil)
	if err == nil {
		t.Fatal("no error")
	}
	s2, err := open(ctx, path2, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if v, _ := s2.Admin().Version(ctx); v != 0 {
		t.Errorf("version %d, want 0", v)
	}
	if sch := schemaOf(t, s2.w.db); len(sch) != 1 || sch["schema_version"] == "" {
		t.Errorf("tables %v", sch)
	}
}

func TestNotAStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mk := func(name string, stmts ...string) string {
		p := filepath.Join(dir, name)
		db, err := sql.Open("sqlite", p)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, q := range stmts {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	for _, p := range []string{
		mk("other.db", `CREATE TABLE t (x)`),
		mk("app.db", `PRAGMA application_id = 42`),
	} {
		if _, err := Open(ctx, p, Options{}); !errors.Is(err, ErrNotStore) {
			t.Errorf("%s: %v", p, err)
		} else {
			t.Log(err)
		}
	}
	for _, p := range []string{"", ":memory:", "file:x.db", filepath.Join(dir, "a?b.db")} {
		if _, err := Open(ctx, p, Options{}); err == nil {
			t.Errorf("Open(%q) accepted", p)
		}
	}
}

// TestMigrateFromVersion1: a database of the first schema, with a job in it, is brought
// to the current one; the job stays, and the episodes table is there.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := open(ctx, path, Options{Now: FixedNow}, migrations[:1], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO jobs (job_id, user, updated_ts) VALUES (7, 'alice', 0)`,
		`INSERT INTO cycles VALUES (7, 1740830400, 'a', 3, 0, 6, 1, 3, 2, '[1,2,3]', 3, 0, 0, 0, 0, 0, 3, 0)`,
	} {
		if _, err := s.w.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = Open(ctx, path, Options{Now: FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.Admin().Version(ctx); v != SchemaVersion {
		t.Errorf("version %d, want %d", v, SchemaVersion)
	}
	if cs, err := s.Cycles(ctx, 7, "a"); err != nil || len(cs) != 1 {
		t.Errorf("job 7's cycles after the migration: %v, %v", cs, err)
	}
	if schemaOf(t, s.w.db)["episodes"] == "" {
		t.Error("no episodes table after the migration")
	}
}

// TestMigrateRelease: the database the release before keyed jobs wrote
// (testdata/release-v2.db, made by TestMakeReleaseFixture at that release) is brought to
// the current schema with every job, cycle, report and episode, its report rolled up.
func TestMigrateRelease(t *testing.T) {
	ctx := context.Background()
	b, err := os.ReadFile("testdata/release-v2.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path, Options{Now: FixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.Admin().Version(ctx); v != SchemaVersion {
		t.Errorf("version %d, want %d", v, SchemaVersion)
	}
	for _, id := range []uint32{101, 102, 103} {
		js, err := s.Jobs(ctx, id)
		if err != nil || len(js) != 1 || js[0].Key != Key(id) {
			t.Errorf("job %d after the migration: %+v, %v", id, js, err)
		}
	}
	if j, _ := s.Job(ctx, 101); j == nil || j.User != "alice" || j.CPUs != 64 || j.Nodes != "node[1-2]" || j.Samples != 3 || j.Start.IsZero() || j.End.IsZero() {
		t.Errorf("job 101's facts: %+v", j)
	}
	for id, want := range map[uint32]int{101: 3, 102: 3, 103: 1} {
		k := "idle_cores"
		if id == 103 {
			k = "io_wait"
		}
		if cs, err := s.Cycles(ctx, id, k); err != nil || len(cs) != want {
			t.Errorf("job %d's %s cycles: %d, %v; want %d", id, k, len(cs), err, want)
		}
	}
	if r, err := s.Report(ctx, 101); err != nil || r.JobID != 101 {
		t.Errorf("job 101's report: %v", err)
	}
	if _, err := s.Report(ctx, 102); !errors.Is(err, ErrNotFound) {
		t.Errorf("job 102 had no report: %v", err)
	}
	if eps, err := s.Episodes(ctx, T0.Add(-2*time.Hour), ""); err != nil || len(eps) != 1 || eps[0].Stalled != 3 {
		t.Errorf("episodes: %+v, %v", eps, err)
	}
	site, err := s.Rollups().Site(ctx, SiteFilter{From: T0.AddDate(0, 0, -1), To: T0, Scope: Scope{All: true}})
	if err != nil {
		t.Fatal(err)
	}
	// Job 101: 64 CPUs for the report's hour, idle_cores over its whole time.
	if site.Jobs != 1 || site.CPUHours != 64 || len(site.Findings) != 1 || site.Findings[0].CPUHours != 64 || site.Findings[0].Users[0].User != "alice" {
		t.Errorf("site after the migration: %+v", site)
	}
	// A job written after the migration with a migrated job's id and another start is a
	// job of its own.
	if err := s.PutJob(ctx, Job{ID: 101, User: "bob", Start: T0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if js, _ := s.Jobs(ctx, 101); len(js) != 2 || js[0].User != "bob" || js[1].User != "alice" {
		t.Errorf("job 101 reused: %+v", js)
	}
}
