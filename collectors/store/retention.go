package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Retention says how long the store keeps each tier of its data; zero keeps a tier
// forever. A job's age is counted from its end (from its last update where its end was
// never recorded, e.g. after a collector crash, so that such a job does not stay forever).
type Retention struct {
	// Cycles: the per-cycle results of a job (the largest tier: a row per property and
	// cycle).
	Cycles time.Duration
	// Jobs: a job's row, its report and its findings' hours, and the site-wide I/O
	// episodes.
	Jobs time.Duration
	// Rollups: the site's daily figures (one row per day × cluster × account × user ×
	// partition × QOS, and per finding), by their day. They outlive the jobs they sum.
	Rollups time.Duration
}

// Pruned counts what Prune deleted.
type Pruned struct {
	CycleJobs   int   // jobs whose cycles went
	CycleRows   int64 // cycle rows
	Jobs        int   // jobs (with their reports)
	RollupRows  int64 // roll-up rows
	EpisodeRows int64
}

// pruneBatch bounds the jobs one pruning transaction touches, so that writers wait for
// a short transaction at a time, never for one that deletes a month of a site.
const pruneBatch = 500

// Prune deletes what is older than r's tiers at now. It works in short transactions:
// stopped midway (ctx), what it deleted stays deleted and the rest is consistent. Freed
// pages are reused by later writes; the file does not shrink (VACUUM, `persyst db
// vacuum`, gives them back).
func (s *Store) Prune(ctx context.Context, now time.Time, r Retention) (Pruned, error) {
	var p Pruned
	if r.Cycles > 0 {
		t := now.Add(-r.Cycles).Unix()
		for {
			var n int
			var rows int64
			err := inTx(ctx, s.w, func(tx *sql.Tx) error {
				keys, err := keysOf(ctx, tx, `SELECT key FROM jobs WHERE coalesce(end_ts, updated_ts) < ?
					AND EXISTS (SELECT 1 FROM cycles WHERE job = jobs.key) LIMIT ?`, t, pruneBatch)
				if err != nil || len(keys) == 0 {
					return err
				}
				n = len(keys)
				for _, k := range keys {
					res, err := tx.ExecContext(ctx, `DELETE FROM cycles WHERE job = ?`, k)
					if err != nil {
						return err
					}
					d, _ := res.RowsAffected()
					rows += d
				}
				return nil
			})
			if err != nil {
				return p, fmt.Errorf("store: prune cycles: %w", err)
			}
			p.CycleJobs += n
			p.CycleRows += rows
			if n < pruneBatch {
				break
			}
		}
	}
	if r.Jobs > 0 {
		t := now.Add(-r.Jobs).Unix()
		for {
			var n int
			err := inTx(ctx, s.w, func(tx *sql.Tx) error {
				// The roll-ups keep the jobs' figures: deleting a job does not unroll it.
				res, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE key IN
					(SELECT key FROM jobs WHERE coalesce(end_ts, updated_ts) < ? LIMIT ?)`, t, pruneBatch)
				if err != nil {
					return err
				}
				d, err := res.RowsAffected()
				n = int(d)
				return err
			})
			if err != nil {
				return p, fmt.Errorf("store: prune jobs: %w", err)
			}
			p.Jobs += n
			if n < pruneBatch {
				break
			}
		}
		err := inTx(ctx, s.w, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM episodes WHERE to_ts < ?`, t)
			if err == nil {
				p.EpisodeRows, err = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return p, fmt.Errorf("store: prune episodes: %w", err)
		}
	}
	if r.Rollups > 0 {
		t := day(now.Add(-r.Rollups))
		err := inTx(ctx, s.w, func(tx *sql.Tx) error {
			for _, tbl := range []string{"usage_daily", "findings_daily"} {
				res, err := tx.ExecContext(ctx, `DELETE FROM `+tbl+` WHERE day < ?`, t)
				if err != nil {
					return err
				}
				d, _ := res.RowsAffected()
				p.RollupRows += d
			}
			return nil
		})
		if err != nil {
			return p, fmt.Errorf("store: prune roll-ups: %w", err)
		}
	}
	return p, nil
}

func keysOf(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]Key, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		var k Key
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
