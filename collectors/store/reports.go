package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/persyst/persyst/digest"
)

// PutReport stores a job's digest, as Keep does without facts from the job map: the job
// is the report's (the store's cluster, its id and start).
func (s *Store) PutReport(ctx context.Context, r digest.Report) error {
	return s.Keep(ctx, Job{}, r)
}

// Keep stores a job's digest (replacing an earlier one of the same job) with its facts
// from the job map, and rolls the job up into the site's daily figures. The job is found
// by facts' cluster, the report's job id and facts' start (Slurm's), or the report's
// start where facts have none (resolve). Facts' non-zero fields are written over the
// stored ones; the report then fills the facts the row still lacks (nodes, nnodes, cpus,
// gpus, start, end, end state). A replaced report, or changed facts, take the job's old
// figures out of the roll-ups before adding the new ones: the roll-ups always sum the
// stored reports' figures exactly.
func (s *Store) Keep(ctx context.Context, facts Job, r digest.Report) error {
	return s.KeepAll(ctx, []Kept{{Facts: facts, Report: r}})
}

// Kept is a job's report with its facts, for KeepAll.
type Kept struct {
	Facts  Job
	Report digest.Report
}

// KeepAll keeps several jobs' reports as Keep does, in one transaction: all or none.
func (s *Store) KeepAll(ctx context.Context, jobs []Kept) error {
	texts := make([][]byte, len(jobs))
	for i := range jobs {
		facts, r := &jobs[i].Facts, &jobs[i].Report
		if r.JobID == 0 {
			return errors.New("store: put report: job id 0 (a persyst run report has no job)")
		}
		if facts.ID != 0 && facts.ID != r.JobID {
			return fmt.Errorf("store: put report of job %d with the facts of job %d", r.JobID, facts.ID)
		}
		if r.Schema <= 0 {
			return fmt.Errorf("store: put report of job %d: no schema version", r.JobID)
		}
		var err error
		if texts[i], err = s.codec.encode(r); err != nil {
			return fmt.Errorf("store: put report of job %d: %w", r.JobID, err)
		}
	}
	now := s.now().Unix()
	var cur uint32
	err := inTx(ctx, s.w, func(tx *txn) error {
		for i := range jobs {
			cur = jobs[i].Report.JobID
			if err := keep(ctx, tx, clusterOf(s, jobs[i].Facts.Cluster), jobs[i].Facts, &jobs[i].Report, texts[i], now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: put report of job %d: %w", cur, err)
	}
	return nil
}

// keep is Keep's work in tx for a job of cluster; text is r as stored (codec.encode).
func keep(ctx context.Context, tx *txn, cluster string, facts Job, r *digest.Report, text []byte, now int64) error {
	facts.ID = r.JobID
	start := facts.Start
	if start.IsZero() {
		start = r.Start
	}
	fromReport := Job{Nodes: strings.Join(r.Nodes, ","), NNodes: r.NNodes, CPUs: r.CPUs, GPUs: r.GPUs, Start: r.Start, End: r.End}
	if r.EndState != nil {
		fromReport.State = r.EndState.State
	}
	key, err := resolve(ctx, tx, cluster, r.JobID, start, 0, now)
	if err != nil {
		return err
	}
	if err := unroll(ctx, tx, key); err != nil {
		return err
	}
	if err := writeFacts(ctx, tx, key, facts, now, false); err != nil {
		return err
	}
	if err := writeFacts(ctx, tx, key, fromReport, now, true); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET start_ts = coalesce(start_ts, ?) WHERE key = ?`, nullTime(start), key); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO reports (job, schema, codec, report, updated_ts) VALUES (?, ?, 'zstd', ?, ?)
		ON CONFLICT (job) DO UPDATE SET schema = excluded.schema, codec = excluded.codec, report = excluded.report,
			updated_ts = excluded.updated_ts`,
		key, r.Schema, text, now); err != nil {
		return err
	}
	j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.key = ?`, key))
	if err != nil {
		return err
	}
	end := j.End // Slurm's, else the report's, else now
	if end.IsZero() {
		end = r.End
	}
	if end.IsZero() {
		end = time.Unix(now, 0)
	}
	if err := setFigures(ctx, tx, key, figuresOf(r, end, j.CPUs, j.GPUs)); err != nil {
		return err
	}
	return roll(ctx, tx, key)
}

// Report returns the digest of the newest job with the Slurm id (of any cluster), or
// ErrNotFound; ReportAt that of a job by the store's key. A report in a newer schema
// than digest.SchemaVersion is refused (its fields may mean something else).
func (s *Store) Report(ctx context.Context, job uint32) (*digest.Report, error) {
	k, err := newest(ctx, s, job)
	if err != nil {
		return nil, fmt.Errorf("store: report of job %d: %w", job, ErrNotFound)
	}
	r, err := s.ReportAt(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("store: report of job %d: %w", job, err)
	}
	return r, nil
}

// ReportAt returns the digest of the job with the store's key, or ErrNotFound.
func (s *Store) ReportAt(ctx context.Context, key Key) (*digest.Report, error) {
	var schema int
	var codec string
	var text []byte
	err := s.r.QueryRowContext(ctx, `SELECT schema, codec, report FROM reports WHERE job = ?`, key).Scan(&schema, &codec, &text)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if schema > digest.SchemaVersion {
		return nil, fmt.Errorf("its report has schema %d, this persyst reads up to %d", schema, digest.SchemaVersion)
	}
	return s.codec.decode(codec, text)
}

// JobFilter selects jobs for ListJobs: each set field narrows the list.
type JobFilter struct {
	// Scope is whose jobs the reader may see (the zero Scope: none).
	Scope    Scope
	User     string    // the job's user
	Finding  string    // a property key among the report's findings
	Since    time.Time // ended (or, without an end, updated) at or after
	Before   time.Time // ended (or updated) before (zero: any time)
	MinNodes int
	ID       uint32 // the Slurm job id
	Cluster  string
	// Account, Partition and QOS are the job's, as Slurm names them.
	Account, Partition, QOS string
	// Limit bounds the rows (default and most: MaxListed).
	Limit int
}

// jobUsage is a job's row's figures as the roll-ups add them (Usage's order).
var jobUsage = `1, coalesce(j.cpu_h, 0), coalesce(j.cpu_used_h, 0), coalesce(j.cpu_meas_h, 0), coalesce(j.gpu_h, 0),
	coalesce(j.gpu_used_h, 0), coalesce(j.gpu_meas_h, 0), ` + wasteOf("1") + `,
	coalesce(j.energy_kwh, 0), CASE WHEN j.energy_kwh IS NULL THEN 0 ELSE 1 END`

// MaxListed bounds the jobs one ListJobs returns.
const MaxListed = 10000

// Listed is a job in a list: its row and its report's summary (nil when no report is
// stored).
type Listed struct {
	Job     Job
	Summary *Summary
}

// Summary is what a job list shows of a report.
type Summary struct {
	Seconds  float64 // measured
	Findings int     // the report's findings, those the digest left out counted
	// Top is the first finding (nil: none): its key, name, share of the job's time and
	// mean severity over the job's time.
	TopKey, TopName           string
	TopShare, TopMeanSeverity float64
	// Usage is what the job held, used and left unused (Jobs 1), as the roll-ups sum it.
	Usage Usage
}

// ListJobs returns a page of the jobs the filter selects, the latest to end first (a
// job without an end by its last update), with their reports' summaries, at most
// MaxListed: the site's figures are Site's, from the roll-ups, never from a list. It
// reads the jobs' rows only, never their reports.
func (s *Store) ListJobs(ctx context.Context, f JobFilter) ([]Listed, error) {
	limit := f.Limit
	if limit <= 0 || limit > MaxListed {
		limit = MaxListed
	}
	// Only the filters set are in the query, so that SQLite picks the index of each (a
	// user's jobs by their end, an id's jobs, a finding's jobs).
	where, args := []string{"coalesce(j.end_ts, j.updated_ts) >= ?"}, []any{f.Since.Unix()}
	for _, c := range []struct {
		set  bool
		cond string
		arg  any
	}{
		{f.User != "", "j.user = ?", f.User},
		{f.MinNodes > 0, "coalesce(j.nnodes, 0) >= ?", f.MinNodes},
		{f.Finding != "", "j.key IN (SELECT job FROM job_findings WHERE finding = ?)", f.Finding},
		{f.ID != 0, "j.job_id = ?", f.ID},
		{f.Cluster != "", "j.cluster = ?", f.Cluster},
		{f.Account != "", "j.account = ?", f.Account},
		{f.Partition != "", "j.partition = ?", f.Partition},
		{f.QOS != "", "j.qos = ?", f.QOS},
		{!f.Before.IsZero(), "coalesce(j.end_ts, j.updated_ts) < ?", f.Before.Unix()},
	} {
		if c.set {
			where, args = append(where, c.cond), append(args, c.arg)
		}
	}
	if sc := f.Scope; !sc.All {
		// The user's own jobs, and their accounts' (each condition by its index).
		in, inArgs := []string{"j.user = ?"}, []any{sc.User}
		if sc.User == "" {
			in, inArgs = nil, nil
		}
		for _, a := range sc.Accounts {
			in, inArgs = append(in, "j.account = ?"), append(inArgs, a)
		}
		if len(in) == 0 {
			return nil, nil // nobody's jobs
		}
		where, args = append(where, "("+strings.Join(in, " OR ")+")"), append(args, inArgs...)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+`, j.day IS NOT NULL, coalesce(j.seconds, 0), coalesce(j.findings, 0),
			coalesce(j.top_key, ''), coalesce(j.top_name, ''), coalesce(j.top_share, 0), coalesce(j.top_severity, 0),
			`+jobUsage+`
		FROM jobs j WHERE `+strings.Join(where, " AND ")+`
		ORDER BY coalesce(j.end_ts, j.updated_ts) DESC, j.key DESC LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", err)
	}
	defer rows.Close()
	var out []Listed
	for rows.Next() {
		var l Listed
		var has bool
		var sum Summary
		var err error
		u := &sum.Usage
		if l.Job, err = scanJob(rows, &has, &sum.Seconds, &sum.Findings, &sum.TopKey, &sum.TopName, &sum.TopShare, &sum.TopMeanSeverity,
			&u.Jobs, &u.CPUHours, &u.CPUUsedHours, &u.CPUMeasuredHours, &u.GPUHours, &u.GPUUsedHours, &u.GPUMeasuredHours,
			&u.MemGiBHours, &u.MemUnusedGiBHours, &u.MemMeasuredGiBHours, &u.LimitCPUHours, &u.LimitUnusedCPUHours,
			&u.EnergyKWh, &u.EnergyJobs); err != nil {
			return nil, fmt.Errorf("store: list jobs: %w", err)
		}
		if has {
			l.Summary = &sum
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
