package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
