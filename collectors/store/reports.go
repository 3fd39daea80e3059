package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/persyst/persyst/digest"
)

// PutReport stores a job's digest (replacing an earlier one) for `persyst
// report`. It creates the job's row if needed and fills the job facts the row
// does not know yet (nodes, nnodes, cpus, start, end) from the report; known
// facts are kept, since PutJob's come from the job map and the report's from
// the measurement.
func (s *Store) PutReport(ctx context.Context, r digest.Report) error {
	if r.JobID == 0 {
		return errors.New("store: put report: job id 0 (a persyst run report has no job)")
	}
	if r.Schema <= 0 {
		return fmt.Errorf("store: put report of job %d: no schema version", r.JobID)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: put report of job %d: %w", r.JobID, err)
	}
	nodes := nullString(strings.Join(r.Nodes, ","))
	now := s.now().Unix()
	err = inTx(ctx, s.w, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO jobs (job_id, nodes, nnodes, cpus, start_ts, end_ts, updated_ts)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id) DO UPDATE SET
				nodes = coalesce(nodes, excluded.nodes), nnodes = coalesce(nnodes, excluded.nnodes),
				cpus = coalesce(cpus, excluded.cpus), start_ts = coalesce(start_ts, excluded.start_ts),
				end_ts = coalesce(end_ts, excluded.end_ts), updated_ts = excluded.updated_ts`,
			r.JobID, nodes, nullInt(r.NNodes), nullInt(r.CPUs), nullTime(r.Start), nullTime(r.End), now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO reports (job_id, schema, report, updated_ts) VALUES (?, ?, ?, ?)
			ON CONFLICT (job_id) DO UPDATE SET schema = excluded.schema, report = excluded.report, updated_ts = excluded.updated_ts`,
			r.JobID, r.Schema, string(b), now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put report of job %d: %w", r.JobID, err)
	}
	return nil
}

// Report returns a job's digest, or ErrNotFound. A report in a newer schema
// than digest.SchemaVersion is refused (its fields may mean something else).
func (s *Store) Report(ctx context.Context, job uint32) (*digest.Report, error) {
	var schema int
	var text string
	err := s.r.QueryRowContext(ctx, `SELECT schema, report FROM reports WHERE job_id = ?`, job).Scan(&schema, &text)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: report of job %d: %w", job, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: report of job %d: %w", job, err)
	}
	if schema > digest.SchemaVersion {
		return nil, fmt.Errorf("store: report of job %d has schema %d, this persyst reads up to %d", job, schema, digest.SchemaVersion)
	}
	var r digest.Report
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return nil, fmt.Errorf("store: report of job %d: %w", job, err)
	}
	return &r, nil
}

// JobFilter selects jobs for ListJobs: each set field narrows the list.
type JobFilter struct {
	User     string    // the job's user
	Finding  string    // a property key among the report's findings
	Since    time.Time // updated at or after
	MinNodes int
	// Limit bounds the rows (default and most: MaxListed).
	Limit int
}

// MaxListed bounds the jobs one ListJobs returns.
const MaxListed = 10000

// Listed is a job's row with its report (nil when none is stored).
type Listed struct {
	Job    Job
	Report *digest.Report
}

// ListJobs returns the jobs the filter selects, the most recently updated first, with
// their reports. A report in a newer schema, or one that cannot be read, is left out
// (the job is listed).
func (s *Store) ListJobs(ctx context.Context, f JobFilter) ([]Listed, error) {
	limit := f.Limit
	if limit <= 0 || limit > MaxListed {
		limit = MaxListed
	}
	rows, err := s.r.QueryContext(ctx, `SELECT j.job_id, j.cluster, j.user, j.nodes, j.nnodes, j.cpus, j.start_ts, j.end_ts, j.samples, j.updated_ts,
			r.schema, r.report
		FROM jobs j LEFT JOIN reports r ON r.job_id = j.job_id
		WHERE (?1 = '' OR j.user = ?1) AND j.updated_ts >= ?2 AND coalesce(j.nnodes, 0) >= ?3
			AND (?4 = '' OR EXISTS (SELECT 1 FROM json_each(r.report, '$.findings') f WHERE json_extract(f.value, '$.key') = ?4))
		ORDER BY j.updated_ts DESC, j.job_id DESC LIMIT ?5`,
		f.User, f.Since.Unix(), f.MinNodes, f.Finding, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", err)
	}
	defer rows.Close()
	var out []Listed
	for rows.Next() {
		var cluster, user, nodes, report sql.NullString
		var nnodes, cpus, start, end, schema sql.NullInt64
		var updated int64
		var l Listed
		if err := rows.Scan(&l.Job.ID, &cluster, &user, &nodes, &nnodes, &cpus, &start, &end, &l.Job.Samples, &updated, &schema, &report); err != nil {
			return nil, fmt.Errorf("store: list jobs: %w", err)
		}
		l.Job.Cluster, l.Job.User, l.Job.Nodes = cluster.String, user.String, nodes.String
		l.Job.NNodes, l.Job.CPUs = int(nnodes.Int64), int(cpus.Int64)
		l.Job.Start, l.Job.End = fromUnix(start), fromUnix(end)
		l.Job.Updated = time.Unix(updated, 0).UTC()
		if report.Valid && schema.Int64 <= digest.SchemaVersion {
			var r digest.Report
			if json.Unmarshal([]byte(report.String), &r) == nil {
				l.Report = &r
			}
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
