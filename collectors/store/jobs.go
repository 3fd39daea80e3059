package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Job is a job's row: facts from the job map and what the store holds.
type Job struct {
	ID      uint32
	Cluster string
	User    string
	Nodes   string // the job's nodes as text: a Slurm hostlist ("node[01-04]") or comma-separated names
	NNodes  int
	CPUs    int
	Start   time.Time // Slurm's start time; zero: unknown
	End     time.Time // zero: unknown or still running
	// Samples is the number of cycle timestamps stored for the job (kept by
	// PutCycle; PutJob ignores it).
	Samples int
	// Updated is when the row or the job's cycles or report were last written
	// (kept by the store; PutJob ignores it).
	Updated time.Time
}

// ensureJob creates the job's row if needed and stamps updated_ts.
func ensureJob(ctx context.Context, tx *sql.Tx, job uint32, now int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO jobs (job_id, updated_ts) VALUES (?, ?)
		ON CONFLICT (job_id) DO UPDATE SET updated_ts = excluded.updated_ts`, job, now)
	return err
}

// PutJob records a job's facts. Fields that are zero ("" or 0 or the zero
// time) leave the stored value unchanged, so a collector can write the facts
// it knows at the job's start and the end time later.
//
// Slurm reuses job ids (they wrap at MaxJobId, and restart when slurmctld
// loses its state). When both the stored and the new Start are known and
// differ, the stored row is an earlier job with the same id: it is deleted
// with its cycles and report before the new one is written.
func (s *Store) PutJob(ctx context.Context, j Job) error {
	if j.ID == 0 {
		return errors.New("store: job id 0")
	}
	now := s.now().Unix()
	err := inTx(ctx, s.w, func(tx *sql.Tx) error {
		if !j.Start.IsZero() {
			if _, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE job_id = ? AND start_ts IS NOT NULL AND start_ts != ?`,
				j.ID, j.Start.Unix()); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (job_id, cluster, user, nodes, nnodes, cpus, start_ts, end_ts, updated_ts)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id) DO UPDATE SET
				cluster = coalesce(excluded.cluster, cluster), user = coalesce(excluded.user, user),
				nodes = coalesce(excluded.nodes, nodes), nnodes = coalesce(excluded.nnodes, nnodes),
				cpus = coalesce(excluded.cpus, cpus), start_ts = coalesce(excluded.start_ts, start_ts),
				end_ts = coalesce(excluded.end_ts, end_ts), updated_ts = excluded.updated_ts`,
			j.ID, nullString(j.Cluster), nullString(j.User), nullString(j.Nodes), nullInt(j.NNodes), nullInt(j.CPUs),
			nullTime(j.Start), nullTime(j.End), now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put job %d: %w", j.ID, err)
	}
	return nil
}

// Job returns a job's row, or ErrNotFound.
func (s *Store) Job(ctx context.Context, id uint32) (*Job, error) {
	var cluster, user, nodes sql.NullString
	var nnodes, cpus, start, end sql.NullInt64
	var updated int64
	j := &Job{ID: id}
	err := s.r.QueryRowContext(ctx, `SELECT cluster, user, nodes, nnodes, cpus, start_ts, end_ts, samples, updated_ts
		FROM jobs WHERE job_id = ?`, id).Scan(&cluster, &user, &nodes, &nnodes, &cpus, &start, &end, &j.Samples, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: job %d: %w", id, err)
	}
	j.Cluster, j.User, j.Nodes = cluster.String, user.String, nodes.String
	j.NNodes, j.CPUs = int(nnodes.Int64), int(cpus.Int64)
	j.Start, j.End = fromUnix(start), fromUnix(end)
	j.Updated = time.Unix(updated, 0).UTC()
	return j, nil
}

// Prune deletes the jobs that ended before olderThan, with their cycles and
// reports, and the site-wide episodes that ended before it, and returns how many jobs
// it deleted. A job without an end time
// counts as ended at its last update (a job whose end was never recorded, e.g.
// after a collector crash, must not stay forever). Freed pages are reused by
// later writes; the file does not shrink.
func (s *Store) Prune(ctx context.Context, olderThan time.Time) (int, error) {
	var n int64
	err := inTx(ctx, s.w, func(tx *sql.Tx) error {
		t := olderThan.Unix()
		res, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE coalesce(end_ts, updated_ts) < ?`, t)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM episodes WHERE to_ts < ?`, t)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune: %w", err)
	}
	return int(n), nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullInt(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.Unix()
}

func fromUnix(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.Unix(v.Int64, 0).UTC()
}
