package store

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMySQLRewrite: the forms SQLite and MariaDB spell differently, rewritten; strings,
// quoted names and the rest left alone.
func TestMySQLRewrite(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		order          []int
		err            string
	}{
		{name: "plain parameters keep their order", in: "SELECT a FROM t WHERE b = ? AND c = ?", want: "SELECT a FROM t WHERE b = ? AND c = ?"},
		{name: "numbered parameters", in: "SELECT ?2, ?1 * x, ?1", want: "SELECT ?, ? * x, ?", order: []int{1, 0, 0}},
		{name: "a plain parameter after numbered ones", in: "SELECT ?2, ?", want: "SELECT ?, ?", order: []int{1, 2}},
		{
			name: "reserved names quoted, strings and capitals left alone",
			in:   `SELECT key, j.key, partition FROM jobs j WHERE schema = 'key' AND "partition" = ? -- key`,
			want: `SELECT "key", j."key", "partition" FROM jobs j WHERE "schema" = 'key' AND "partition" = ?`,
		},
		{name: "INSERT OR IGNORE", in: "INSERT OR IGNORE INTO t (a) VALUES (?)", want: "INSERT IGNORE INTO t (a) VALUES (?)"},
		{
			name: "ON CONFLICT DO NOTHING",
			in:   "INSERT INTO mails_sent (period, kind) VALUES (?, ?)\n\t\tON CONFLICT DO NOTHING",
			want: "INSERT IGNORE INTO mails_sent (period, kind) VALUES (?, ?)",
		},
		{
			name: "an upsert that adds, from a join",
			in: `INSERT INTO findings_daily (day, cluster, jobs, cpu_h) SELECT j.day, j.cluster, ?1, ?1 * f.cpu_h
				FROM jobs j JOIN job_findings f ON f.job = j.key WHERE j.key = ?2
				ON CONFLICT (day, cluster) DO UPDATE SET jobs = jobs + excluded.jobs, cpu_h = cpu_h + excluded.cpu_h`,
			want: `INSERT INTO findings_daily (day, cluster, jobs, cpu_h) SELECT j.day, j.cluster, ?, ? * f.cpu_h
				FROM jobs j JOIN job_findings f ON f.job = j."key" WHERE j."key" = ?
				ON DUPLICATE KEY UPDATE findings_daily.jobs = findings_daily.jobs + VALUES(jobs), findings_daily.cpu_h = findings_daily.cpu_h + VALUES(cpu_h)`,
			order: []int{0, 0, 1},
		},
		{
			name: "an upsert's WHERE dropped, its functions kept",
			in:   "INSERT INTO finding_names (finding, name) VALUES (?, ?) ON CONFLICT (finding) DO UPDATE SET name = coalesce(excluded.name, name) WHERE name != excluded.name",
			want: "INSERT INTO finding_names (finding, name) VALUES (?, ?) ON DUPLICATE KEY UPDATE finding_names.name = coalesce(VALUES(name), finding_names.name)",
		},
		{
			name: "a reserved name in an upsert",
			in:   "INSERT INTO reports (job, schema) VALUES (?, ?) ON CONFLICT (job) DO UPDATE SET schema = excluded.schema",
			want: `INSERT INTO reports (job, "schema") VALUES (?, ?) ON DUPLICATE KEY UPDATE reports."schema" = VALUES("schema")`,
		},
		{
			name: "scalar min and max, aggregates kept",
			in:   "SELECT max(a), min(b), max(min(c, 1), 0), max(x) OVER (PARTITION BY y), count(DISTINCT z) FROM t",
			want: "SELECT max(a), min(b), GREATEST(LEAST(c, 1), 0), max(x) OVER (PARTITION BY y), count(DISTINCT z) FROM t",
		},
		{
			name: "an upsert's scalar min",
			in:   "INSERT INTO notices (job, told_ts) VALUES (?, ?) ON CONFLICT (job) DO UPDATE SET told_ts = min(told_ts, excluded.told_ts)",
			want: "INSERT INTO notices (job, told_ts) VALUES (?, ?) ON DUPLICATE KEY UPDATE notices.told_ts = LEAST(notices.told_ts, VALUES(told_ts))",
		},
		{
			name: "decimal numbers are doubles, as in SQLite",
			in:   "SELECT req_mem_mb / 1024.0 * seconds / 3600, 1e-6 * x, 2.5E+3, 7 FROM jobs",
			want: "SELECT req_mem_mb / 1024.0e0 * seconds / 3600, 1e-6 * x, 2.5E+3, 7 FROM jobs",
		},
		{
			name: "an index named",
			in:   "SELECT user FROM finding_users_daily d INDEXED BY finding_users_daily_user WHERE d.user = ?",
			want: "SELECT user FROM finding_users_daily d FORCE INDEX (finding_users_daily_user) WHERE d.user = ?",
		},
		{name: "a string that looks like SQL", in: "SELECT 'ON CONFLICT DO NOTHING', 'it''s ?1'", want: "SELECT 'ON CONFLICT DO NOTHING', 'it''s ?1'"},
		{name: "INSERT OR REPLACE", in: "INSERT OR REPLACE INTO t VALUES (1)", err: "INSERT OR REPLACE"},
		{name: "an open string", in: "SELECT 'a", err: "unterminated '"},
		{name: "an open parenthesis", in: "SELECT max(a, b", err: "unbalanced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mysqlRewrite(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
			if diff := cmp.Diff(flat(tc.want), flat(got.text)); diff != "" {
				t.Errorf("text (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.order, got.order); diff != "" {
				t.Errorf("argument order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMySQLArgs(t *testing.T) {
	q := rewritten{order: []int{1, 0, 1}}
	got, err := q.args([]any{"a", "b"})
	if diff := cmp.Diff([]any{"b", "a", "b"}, got); diff != "" || err != nil {
		t.Errorf("args (-want +got):\n%s%v", diff, err)
	}
	if _, err := q.args([]any{"a"}); err == nil {
		t.Error("one argument for a query that takes two: no error")
	}
}
