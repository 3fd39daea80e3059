package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Stats is what `persyst db stats` says of a database.
type Stats struct {
	Path    string
	Version int
	// FileBytes is the database's size (pages × page size, free pages included);
	// FreeBytes the free pages, reused by later writes (VACUUM gives them back).
	FileBytes, FreeBytes int64
	// Rows per table; Bytes per table and its indexes where SQLite's dbstat tells them.
	Rows  map[string]int64
	Bytes map[string]int64
	// Jobs by cluster; the oldest and newest job end; reports by codec.
	Clusters          map[string]int64
	Oldest, Newest    time.Time
	Reports           map[string]int64
	FirstDay, LastDay time.Time // of the roll-ups
}

// tables are the store's tables, in the order stats list them.
var tables = []string{"jobs", "cycles", "reports", "job_findings", "usage_daily", "findings_daily", "findings_site_daily", "finding_users_daily", "findings_by_daily", "finding_names",
	"usage_site_daily", "episodes", "mails_sent", "notices", "schema_version"}

// Admin is what an admin does with a database: its sizes, checks, retention and exports
// (`persyst db`).
type Admin struct{ s *Store }

// Admin returns the database's admin operations.
func (s *Store) Admin() Admin { return Admin{s} }

// Path is where the database is: its file, or its mysql:// target (no password in it).
func (a Admin) Path() string { return a.s.path }

// Stats reads the database's sizes and counts.
func (a Admin) Stats(ctx context.Context) (*Stats, error) {
	s := a.s
	st := &Stats{Path: s.path, Rows: map[string]int64{}, Bytes: map[string]int64{}, Clusters: map[string]int64{}, Reports: map[string]int64{}}
	var err error
	if st.Version, err = a.Version(ctx); err != nil {
		return nil, fmt.Errorf("store: stats: %w", err)
	}
	if st.FileBytes, st.FreeBytes, err = s.r.d.size(ctx, s.r); err != nil {
		return nil, fmt.Errorf("store: stats: %w", err)
	}
	for _, t := range tables {
		var n int64
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("store: stats: %s: %w", t, err)
		}
		st.Rows[t] = n
	}
	if st.Bytes, err = s.r.d.tableBytes(ctx, s.r); err != nil {
		return nil, fmt.Errorf("store: stats: %w", err)
	}
	if err := scanPairs(ctx, s.r, `SELECT cluster, count(*) FROM jobs GROUP BY cluster`, st.Clusters); err != nil {
		return nil, fmt.Errorf("store: stats: %w", err)
	}
	if err := scanPairs(ctx, s.r, `SELECT codec, count(*) FROM reports GROUP BY codec`, st.Reports); err != nil {
		return nil, fmt.Errorf("store: stats: %w", err)
	}
	var oldest, newest, first, last sql.NullInt64
	if err := s.r.QueryRowContext(ctx, `SELECT min(coalesce(end_ts, updated_ts)), max(coalesce(end_ts, updated_ts)) FROM jobs`).Scan(&oldest, &newest); err != nil {
		return nil, fmt.Errorf("store: stats: %w", err)
	}
	if err := s.r.QueryRowContext(ctx, `SELECT min(day), max(day) FROM usage_daily`).Scan(&first, &last); err != nil {
		return nil, fmt.Errorf("store: stats: %w", err)
	}
	st.Oldest, st.Newest, st.FirstDay, st.LastDay = fromUnix(oldest), fromUnix(newest), fromUnix(first), fromUnix(last)
	return st, nil
}

func scanPairs(ctx context.Context, db *pool, q string, out map[string]int64) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		out[k] = n
	}
	return rows.Err()
}

// Check looks for damage: SQLite's integrity and foreign-key checks, and roll-ups that
// do not sum the jobs' figures on the days whose jobs are all still kept (after the
// oldest kept job's day: pruning jobs keeps their figures in the roll-ups). It returns
// each problem found, none for a sound database.
func (a Admin) Check(ctx context.Context) ([]string, error) {
	s := a.s
	problems, err := s.r.d.damage(ctx, s.r)
	if err != nil {
		return nil, fmt.Errorf("store: check: %w", err)
	}
	// The jobs' sums and the roll-up's, side by side (a FULL JOIN, written as a union
	// for the databases without one).
	mismatch, err := s.r.QueryContext(ctx, `WITH since AS (SELECT min(day) day FROM jobs),
		sides AS (
			SELECT day, cluster, coalesce(account, '') account, coalesce(user, '') user, coalesce(partition, '') partition,
				coalesce(qos, '') qos, 1 kj, coalesce(cpu_h, 0) kh, 0 uj, 0.0 uh
			FROM jobs WHERE day > (SELECT day FROM since)
			UNION ALL
			SELECT day, cluster, account, user, partition, qos, 0, 0.0, jobs, cpu_h
			FROM usage_daily WHERE day > (SELECT day FROM since))
		SELECT day, cluster, user, sum(kj), sum(uj), sum(kh), sum(uh) FROM sides
		GROUP BY day, cluster, account, user, partition, qos
		HAVING sum(kj) != sum(uj) OR abs(sum(kh) - sum(uh)) > 1e-6 * max(1, abs(sum(kh)))
		ORDER BY day, cluster, user LIMIT 20`)
	if err != nil {
		return nil, fmt.Errorf("store: check: %w", err)
	}
	defer mismatch.Close()
	for mismatch.Next() {
		var day int64
		var cluster, user string
		var kj, uj int64
		var kh, uh float64
		if err := mismatch.Scan(&day, &cluster, &user, &kj, &uj, &kh, &uh); err != nil {
			return nil, fmt.Errorf("store: check: %w", err)
		}
		problems = append(problems, fmt.Sprintf("roll-up of %s, cluster %q, user %q: %d jobs, %.3f CPU-hours; the jobs kept sum to %d, %.3f",
			time.Unix(day, 0).UTC().Format("2006-01-02"), cluster, user, uj, uh, kj, kh))
	}
	return problems, mismatch.Err()
}

// Vacuum rebuilds the database compactly, giving its free pages back to the file system
// (it needs as much free disk as the database, and holds the write lock meanwhile).
func (a Admin) Vacuum(ctx context.Context) error {
	if err := vacuum(ctx, a.s); err != nil {
		return fmt.Errorf("store: vacuum: %w", err)
	}
	return nil
}

// ExportedJob is a job as `persyst db export` writes it: its facts and figures.
type ExportedJob struct {
	Cluster    string    `json:"cluster"`
	JobID      uint32    `json:"job_id"`
	User       string    `json:"user,omitempty"`
	Account    string    `json:"account,omitempty"`
	Partition  string    `json:"partition,omitempty"`
	QOS        string    `json:"qos,omitempty"`
	State      string    `json:"state,omitempty"`
	NNodes     int       `json:"nnodes,omitempty"`
	CPUs       int       `json:"cpus,omitempty"`
	GPUs       int       `json:"gpus,omitempty"`
	ReqMemMB   int64     `json:"req_mem_mb,omitempty"`
	TimeLimitS int64     `json:"time_limit_s,omitempty"`
	Start      time.Time `json:"start,omitzero"`
	End        time.Time `json:"end,omitzero"`
	CPUHours   float64   `json:"cpu_hours"`
	CPUUsed    *float64  `json:"cpu_hours_used,omitempty"` // nil: not measured
	GPUHours   float64   `json:"gpu_hours"`
	GPUUsed    *float64  `json:"gpu_hours_used,omitempty"`
	// Findings are the hours each finding held (CPU-hours).
	Findings map[string]float64 `json:"findings,omitempty"`
}

// Export writes the jobs that ended in [from, to) as JSON lines, oldest first, without
// holding the database's write lock.
func (a Admin) Export(ctx context.Context, from, to time.Time, w io.Writer) (int, error) {
	s := a.s
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+`, coalesce(j.cpu_h, 0), j.cpu_used_h, coalesce(j.cpu_meas_h, 0),
			coalesce(j.gpu_h, 0), j.gpu_used_h, coalesce(j.gpu_meas_h, 0),
			(SELECT json_group_object(finding, cpu_h) FROM job_findings WHERE job = j.key)
		FROM jobs j WHERE coalesce(j.end_ts, j.updated_ts) >= ? AND coalesce(j.end_ts, j.updated_ts) < ?
		ORDER BY coalesce(j.end_ts, j.updated_ts), j.key`, from.Unix(), to.Unix())
	if err != nil {
		return 0, fmt.Errorf("store: export: %w", err)
	}
	defer rows.Close()
	enc := json.NewEncoder(w)
	n := 0
	for rows.Next() {
		var cpuUsed, gpuUsed sql.NullFloat64
		var cpuMeas, gpuMeas float64
		var findings sql.NullString
		var e ExportedJob
		j, err := scanJob(rows, &e.CPUHours, &cpuUsed, &cpuMeas, &e.GPUHours, &gpuUsed, &gpuMeas, &findings)
		if err != nil {
			return n, fmt.Errorf("store: export: %w", err)
		}
		e.Cluster, e.JobID, e.User, e.Account, e.Partition, e.QOS, e.State = j.Cluster, j.ID, j.User, j.Account, j.Partition, j.QOS, j.State
		e.NNodes, e.CPUs, e.GPUs, e.ReqMemMB, e.TimeLimitS = j.NNodes, j.CPUs, j.GPUs, j.ReqMemMB, int64(j.TimeLimit/time.Second)
		e.Start, e.End = j.Start, j.End
		if cpuUsed.Valid && cpuMeas > 0 {
			e.CPUUsed = &cpuUsed.Float64
		}
		if gpuUsed.Valid && gpuMeas > 0 {
			e.GPUUsed = &gpuUsed.Float64
		}
		if findings.Valid {
			_ = json.Unmarshal([]byte(findings.String), &e.Findings)
		}
		if err := enc.Encode(&e); err != nil {
			return n, fmt.Errorf("store: export: %w", err)
		}
		n++
	}
	return n, rows.Err()
}

// Write prints the stats for an admin: sizes, rows, and what the tiers hold.
func (st *Stats) Write(w io.Writer) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("database %s: schema version %d, %s (%s free, reused by later writes)\n", st.Path, st.Version, mib(st.FileBytes), mib(st.FreeBytes))
	p("%-16s %12s %12s %10s\n", "table", "rows", "bytes", "bytes/row")
	for _, t := range tables {
		b := st.Bytes[t]
		per := "-"
		if st.Rows[t] > 0 && b > 0 {
			per = fmt.Sprintf("%.0f", float64(b)/float64(st.Rows[t]))
		}
		bs := "-"
		if b > 0 {
			bs = mib(b)
		}
		p("%-16s %12d %12s %10s\n", t, st.Rows[t], bs, per)
	}
	if n := st.Rows["jobs"]; n > 0 {
		p("jobs: %d, ended %s to %s; per job %.0f bytes of the file\n", n, st.Oldest.Format(time.DateOnly), st.Newest.Format(time.DateOnly), float64(st.FileBytes)/float64(n))
	}
	for c, n := range st.Clusters {
		name := c
		if name == "" {
			name = "(no name)"
		}
		p("cluster %s: %d jobs\n", name, n)
	}
	for c, n := range st.Reports {
		p("reports stored as %s: %d\n", c, n)
	}
	if !st.FirstDay.IsZero() {
		p("roll-ups: %s to %s\n", st.FirstDay.Format(time.DateOnly), st.LastDay.Format(time.DateOnly))
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
