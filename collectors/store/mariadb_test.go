package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/episodes"
)

// onMariaDB skips a test of MariaDB's own where the tests' stores are SQLite files: it
// runs in `make test-mariadb` (PERSYST_TEST_STORE=mariadb), which CI runs in every root.
func onMariaDB(t *testing.T) {
	t.Helper()
	if !storetest.MariaDB() {
		t.Skip("the stores are SQLite files here: " + storetest.EnvStore + "=mariadb runs this")
	}
}

// column is a table's column as both databases' catalogs tell it.
type column struct {
	Name    string
	NotNull bool
	Key     int // its place in the primary key (0: none)
}

// catalog is every table's columns and every index's columns, by name.
type catalog struct {
	Tables  map[string][]column
	Indexes map[string]string // "table(col, col)", unique or not
}

func sqliteCatalog(t *testing.T, db *sql.DB) catalog {
	t.Helper()
	c := catalog{Tables: map[string][]column{}, Indexes: map[string]string{}}
	names := query(t, db, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite%'`)
	for _, n := range names {
		rows, err := db.Query(`SELECT name, "notnull", pk FROM pragma_table_info(?)`, n[0])
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var col column
			if err := rows.Scan(&col.Name, &col.NotNull, &col.Key); err != nil {
				t.Fatal(err)
			}
			col.NotNull = col.NotNull || col.Key > 0
			c.Tables[n[0]] = append(c.Tables[n[0]], col)
		}
		rows.Close()
		for _, ix := range query(t, db, `SELECT name FROM pragma_index_list(?) WHERE origin = 'c'`, n[0]) {
			var cols []string
			for _, ic := range query(t, db, `SELECT coalesce(name, '(expression)') FROM pragma_index_xinfo(?) WHERE key = 1 ORDER BY seqno`, ix[0]) {
				cols = append(cols, ic[0])
			}
			c.Indexes[ix[0]] = n[0] + "(" + strings.Join(cols, ", ") + ")"
		}
	}
	return c
}

func mariadbCatalog(t *testing.T, db *sql.DB) catalog {
	t.Helper()
	c := catalog{Tables: map[string][]column{}, Indexes: map[string]string{}}
	for _, r := range query(t, db, `SELECT c.table_name, c.column_name, c.is_nullable,
			coalesce((SELECT s.seq_in_index FROM information_schema.statistics s WHERE s.table_schema = c.table_schema
				AND s.table_name = c.table_name AND s.index_name = 'PRIMARY' AND s.column_name = c.column_name), 0)
		FROM information_schema.columns c WHERE c.table_schema = DATABASE() ORDER BY c.table_name, c.ordinal_position`) {
		var key int
		fmt.Sscan(r[3], &key)
		c.Tables[r[0]] = append(c.Tables[r[0]], column{Name: r[1], NotNull: r[2] == "NO", Key: key})
	}
	idx := map[string][]string{}
	table := map[string]string{}
	for _, r := range query(t, db, `SELECT table_name, index_name, column_name FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND index_name != 'PRIMARY' ORDER BY table_name, index_name, seq_in_index`) {
		idx[r[1]] = append(idx[r[1]], r[2])
		table[r[1]] = r[0]
	}
	for n, cols := range idx {
		c.Indexes[n] = table[n] + "(" + strings.Join(cols, ", ") + ")"
	}
	return c
}

// mariadbColumns is every column's table, name, type, nullability and default.
func mariadbColumns(t *testing.T, db *sql.DB) [][]string {
	return query(t, db, `SELECT table_name, column_name, column_type, is_nullable, coalesce(column_default, 'none')
		FROM information_schema.columns WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position`)
}

func query(t *testing.T, db *sql.DB, q string, args ...any) [][]string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = v.String
		}
		out = append(out, row)
	}
	return out
}

// TestSchemasAgree: MariaDB's schema (made at once) has SQLite's tables (made by the
// migrations), with the same columns, nullability, primary keys and indexes; where
// SQLite indexes coalesce(end_ts, updated_ts), MariaDB indexes its generated column
// ended_ts, and its foreign keys add an index of their own on the referring column.
func TestSchemasAgree(t *testing.T) {
	onMariaDB(t)
	ctx := context.Background()
	lite, err := store.Open(ctx, filepath.Join(t.TempDir(), "persyst.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	maria := storetest.Open(t, store.Options{})
	want, got := sqliteCatalog(t, lite.Reader()), mariadbCatalog(t, maria.Reader())
	if len(want.Tables) < 15 || len(want.Indexes) < 10 {
		t.Fatalf("SQLite's catalog: %d tables, %d indexes; want the store's 15 and its indexes", len(want.Tables), len(want.Indexes))
	}
	for i, c := range got.Tables["jobs"] {
		if c.Name == "ended_ts" {
			got.Tables["jobs"] = append(got.Tables["jobs"][:i:i], got.Tables["jobs"][i+1:]...)
			break
		}
	}
	for n, ix := range want.Indexes {
		want.Indexes[n] = strings.ReplaceAll(ix, "(expression)", "ended_ts")
	}
	for n, ix := range got.Indexes {
		if _, ok := want.Indexes[n]; !ok && !strings.Contains(n, "_ibfk_") && strings.HasSuffix(ix, "(job)") {
			delete(got.Indexes, n) // a foreign key's own index (InnoDB makes one where none leads with job)
		}
	}
	for _, c := range []catalog{want, got} {
		for n := range c.Tables {
			sort.Slice(c.Tables[n], func(a, b int) bool { return c.Tables[n][a].Name < c.Tables[n][b].Name })
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MariaDB's schema against SQLite's (-sqlite +mariadb):\n%s", diff)
	}
}

// TestMariaDBOutage: the server stopped and started again under an open store: the
// store's next writes and reads work on new connections, and what was written before
// is there.
func TestMariaDBOutage(t *testing.T) {
	onMariaDB(t)
	ctx := context.Background()
	s := storetest.Open(t, store.Options{Now: store.FixedNow})
	if err := s.PutJob(ctx, store.Job{ID: 7, User: "alice", Start: store.T0}); err != nil {
		t.Fatal(err)
	}
	storetest.Stop(t, time.Second)
	if err := s.PutJob(ctx, store.Job{ID: 8, User: "bob", Start: store.T0}); err != nil {
		t.Fatalf("a write after the server came back: %v", err)
	}
	for id, user := range map[uint32]string{7: "alice", 8: "bob"} {
		if j, err := s.Job(ctx, id); err != nil || j.User != user {
			t.Errorf("job %d after the outage: %+v, %v", id, j, err)
		}
	}
}

// database is a new database on the tests' server: its target, and its name for the
// statements Root runs.
func database(t *testing.T) (to, name string) {
	t.Helper()
	to = storetest.Target(t)
	u, err := url.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	return to, strings.TrimPrefix(u.Path, "/")
}

// TestMariaDBPassword: a user with a password connects with it from a root-only file;
// a wrong one is refused with an error that names the user and the server, never the
// password, and a password in the URL is refused before anything connects.
func TestMariaDBPassword(t *testing.T) {
	onMariaDB(t)
	ctx := context.Background()
	_, db := database(t)
	const secret = "Zq9-correct-horse"
	storetest.Root(t, "CREATE USER IF NOT EXISTS 'persyst_pw'@'localhost' IDENTIFIED BY '"+secret+"'",
		"GRANT ALL ON "+db+".* TO 'persyst_pw'@'localhost'")
	t.Cleanup(func() { storetest.Root(t, "DROP USER IF EXISTS 'persyst_pw'@'localhost'") })
	dir := t.TempDir()
	file := func(name, pw string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withFile := func(pwFile string) string {
		return "mysql://persyst_pw@localhost/" + db + "?socket=" + storetest.Socket() + "&password-file=" + pwFile
	}
	s, err := store.Open(ctx, withFile(file("good", secret)), store.Options{})
	if err != nil {
		t.Fatalf("with the right password: %v", err)
	}
	if err := s.PutJob(ctx, store.Job{ID: 1, Start: store.T0}); err != nil {
		t.Error(err)
	}
	s.Close()
	_, err = store.Open(ctx, withFile(file("bad", "wrong-"+secret)), store.Options{})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "persyst_pw") {
		t.Errorf("with a wrong password: %v; want a refusal naming the user, not the password", err)
	}
	_, err = store.Open(ctx, "mysql://persyst_pw:"+secret+"@localhost/"+db+"?socket="+storetest.Socket(), store.Options{})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("a password in the URL: %v", err)
	}
	var refused *os.PathError
	if _, err := store.Open(ctx, withFile(filepath.Join(dir, "missing")), store.Options{}); !errors.As(err, &refused) {
		t.Errorf("a missing password file: %v", err)
	}
}

// TestMariaDBLater: a store opened with Later on a database that refuses it (a wrong
// password here, as an unreachable server) opens all the same; it says why it is not
// open (naming the user, never the password), fails its uses, and opens at the first
// use after the database takes it, at most once per RetryEvery. Without Later the same
// refusal is Open's error.
func TestMariaDBLater(t *testing.T) {
	onMariaDB(t)
	ctx := context.Background()
	_, db := database(t)
	const secret, first = "Lt7-battery-staple", "Lt7-old-password"
	storetest.Root(t, "CREATE USER IF NOT EXISTS 'persyst_later'@'localhost' IDENTIFIED BY '"+first+"'",
		"GRANT ALL ON "+db+".* TO 'persyst_later'@'localhost'")
	t.Cleanup(func() { storetest.Root(t, "DROP USER IF EXISTS 'persyst_later'@'localhost'") })
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	to := "mysql://persyst_later@localhost/" + db + "?socket=" + storetest.Socket() + "&password-file=" + pw
	if _, err := store.Open(ctx, to, store.Options{}); err == nil {
		t.Fatal("a refused user opened without Later")
	}
	now := store.T0
	clock := func() time.Time { return now }
	s, err := store.Open(ctx, to, store.Options{Later: true, RetryEvery: time.Minute, Now: clock})
	if err != nil {
		t.Fatalf("Later: %v", err)
	}
	defer s.Close()
	why := s.Admin().Pending()
	if why == nil || !strings.Contains(why.Error(), "persyst_later") || strings.Contains(why.Error(), secret) {
		t.Errorf("Pending() = %v; want the refusal, naming the user and not the password", why)
	}
	if err := s.PutJob(ctx, store.Job{ID: 1, Start: store.T0}); err == nil {
		t.Error("a write to a store not open yet succeeded")
	}
	// The site fixes the user's password: the next use after RetryEvery opens the store.
	storetest.Root(t, "ALTER USER 'persyst_later'@'localhost' IDENTIFIED BY '"+secret+"'")
	if err := s.PutJob(ctx, store.Job{ID: 1, Start: store.T0}); err == nil {
		t.Error("tried again before RetryEvery")
	}
	now = now.Add(time.Minute)
	if err := s.PutJob(ctx, store.Job{ID: 1, User: "alice", Start: store.T0}); err != nil {
		t.Fatalf("a write after the database took the user: %v", err)
	}
	if err := s.Admin().Pending(); err != nil {
		t.Errorf("Pending() after opening: %v", err)
	}
	if j, err := s.Job(ctx, 1); err != nil || j.User != "alice" {
		t.Errorf("job 1: %+v, %v", j, err)
	}
	if err := s.Admin().Ping(ctx); err != nil {
		t.Error(err)
	}
}

// TestMariaDBMigrates: a MariaDB store of schema 6 (its episodes without a cluster)
// is brought to the newest schema by the migrations' MariaDB steps: the same catalog as
// a new store's, and its episodes kept, as the unnamed cluster's.
func TestMariaDBMigrates(t *testing.T) {
	onMariaDB(t)
	ctx := context.Background()
	to, db := database(t)
	s, err := store.Open(ctx, to, store.Options{Cluster: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	want, wantCols := mariadbCatalog(t, s.Reader()), mariadbColumns(t, s.Reader())
	s.Close()
	storetest.Root(t, "ALTER TABLE "+db+".mails_sent MODIFY period VARCHAR(64) NOT NULL, MODIFY kind VARCHAR(32) NOT NULL",
		"DROP TABLE "+db+".episodes",
		"CREATE TABLE "+db+`.episodes (from_ts BIGINT PRIMARY KEY, to_ts BIGINT NOT NULL CHECK (to_ts >= from_ts),
			jobs BIGINT NOT NULL, stalled BIGINT NOT NULL, peak DOUBLE NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin`,
		"INSERT INTO "+db+".episodes VALUES (100, 200, 10, 3, 0.5)",
		"ALTER TABLE "+db+".jobs DROP COLUMN energy_kwh",
		"ALTER TABLE "+db+".usage_daily DROP COLUMN energy_kwh, DROP COLUMN energy_jobs",
		"ALTER TABLE "+db+".usage_site_daily DROP COLUMN energy_kwh, DROP COLUMN energy_jobs",
		"DELETE FROM "+db+".schema_version WHERE version > 6")
	s, err = store.Open(ctx, to, store.Options{Cluster: "c1"})
	if err != nil {
		t.Fatalf("schema 6 to %d: %v", store.SchemaVersion, err)
	}
	defer s.Close()
	if v, err := s.Admin().Version(ctx); err != nil || v != store.SchemaVersion {
		t.Errorf("schema %d, %v; want %d", v, err, store.SchemaVersion)
	}
	if diff := cmp.Diff(want, mariadbCatalog(t, s.Reader())); diff != "" {
		t.Errorf("the migrated schema against a new store's (-new +migrated):\n%s", diff)
	}
	if diff := cmp.Diff(wantCols, mariadbColumns(t, s.Reader())); diff != "" {
		t.Errorf("the migrated columns' types and defaults against a new store's (-new +migrated):\n%s", diff)
	}
	// An account's mail key as long as Slurm's account names (the store's 128).
	long := "account:" + strings.Repeat("a", 128)
	if ok, err := s.Admin().ClaimMail(ctx, "2026-11 cluster="+strings.Repeat("c", 64), long, "someone"); !ok || err != nil {
		t.Errorf("claiming a mail of a 128-character account in a named cluster: %v, %v", ok, err)
	}
	// The old episode is the unnamed cluster's; c1's of the same second is another.
	if err := s.PutEpisode(ctx, episodes.Episode{From: time.Unix(100, 0), To: time.Unix(300, 0), Jobs: 20, Stalled: 5, Peak: 0.25}); err != nil {
		t.Fatal(err)
	}
	eps, err := s.Episodes(ctx, time.Unix(0, 0), "")
	if err != nil || len(eps) != 2 {
		t.Fatalf("episodes %+v, %v; want the unnamed cluster's and c1's", eps, err)
	}
	got := map[string]int{}
	for _, e := range eps {
		got[e.Cluster] = e.Stalled
	}
	if got[""] != 3 || got["c1"] != 5 {
		t.Errorf("stalled by cluster %v, want the old episode's 3 and c1's 5", got)
	}
	if one, err := s.Episodes(ctx, time.Unix(0, 0), "c1"); err != nil || len(one) != 1 || one[0].Cluster != "c1" {
		t.Errorf("c1's episodes: %+v, %v", one, err)
	}
}
