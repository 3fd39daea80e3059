package store

import (
	"context"
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
func (a Admin) Prune(ctx context.Context, now time.Time, r Retention) (Pruned, error) {
	var p Pruned
	var err error
	if r.Cycles > 0 {
		if p.CycleJobs, p.CycleRows, err = pruneCycles(ctx, a.s, now.Add(-r.Cycles).Unix()); err != nil {
			return p, err
		}
	}
	if r.Jobs > 0 {
		if p.Jobs, p.EpisodeRows, err = pruneJobs(ctx, a.s, now.Add(-r.Jobs).Unix()); err != nil {
			return p, err
		}
	}
	if r.Rollups > 0 {
		if p.RollupRows, err = pruneRollups(ctx, a.s, day(now.Add(-r.Rollups))); err != nil {
			return p, err
		}
	}
	return p, nil
}

// pruneCycles deletes the cycles of the jobs that ended before t, a batch at a time.
func pruneCycles(ctx context.Context, s *Store, t int64) (jobs int, rows int64, err error) {
	for {
		var keys []Key
		err := inTx(ctx, s.w, func(tx *txn) error {
			var err error
			keys, err = keysOf(ctx, tx, `SELECT key FROM jobs WHERE coalesce(end_ts, updated_ts) < ?
				AND EXISTS (SELECT 1 FROM cycles WHERE job = jobs.key) LIMIT ?`, t, pruneBatch)
			if err != nil {
				return err
			}
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
			return jobs, rows, fmt.Errorf("store: prune cycles: %w", err)
		}
		jobs += len(keys)
		if len(keys) < pruneBatch {
			return jobs, rows, nil
		}
	}
}

// pruneJobs deletes the jobs (their rows, reports and findings' hours, not their
// roll-ups: deleting a job does not unroll it) and the episodes that ended before t.
func pruneJobs(ctx context.Context, s *Store, t int64) (jobs int, episodes int64, err error) {
	for {
		var n int64
		err := inTx(ctx, s.w, func(tx *txn) error {
			// The batch as a table of its own: MariaDB takes no LIMIT in an IN subquery, nor
			// the table deleted from in one.
			res, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE key IN (SELECT key FROM
				(SELECT key FROM jobs WHERE coalesce(end_ts, updated_ts) < ? LIMIT ?) AS batch)`, t, pruneBatch)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return jobs, 0, fmt.Errorf("store: prune jobs: %w", err)
		}
		jobs += int(n)
		if n < pruneBatch {
			break
		}
	}
	err = inTx(ctx, s.w, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM episodes WHERE to_ts < ?`, t)
		if err == nil {
			episodes, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return jobs, 0, fmt.Errorf("store: prune episodes: %w", err)
	}
	return jobs, episodes, nil
}

// dimsFirst is the condition on a roll-up table's key before its day, if any.
func dimsFirst(tbl string) string {
	if tbl == "findings_by_daily" {
		return "dim IN ('account', 'user', 'partition', 'qos') AND "
	}
	return ""
}

// pruneRollups deletes the roll-ups of the days before day.
func pruneRollups(ctx context.Context, s *Store, day int64) (rows int64, err error) {
	err = inTx(ctx, s.w, func(tx *txn) error {
		for _, tbl := range []string{"usage_daily", "usage_site_daily", "findings_daily", "findings_site_daily", "finding_users_daily",
			"findings_by_daily"} {
			// (By its key's dimension first: findings_by_daily's days per dimension.)
			res, err := tx.ExecContext(ctx, `DELETE FROM `+tbl+` WHERE `+dimsFirst(tbl)+`day < ?`, day)
			if err != nil {
				return err
			}
			d, _ := res.RowsAffected()
			rows += d
		}
		// The mails of those days go with them (their record is kept as long).
		_, err := tx.ExecContext(ctx, `DELETE FROM mails_sent WHERE sent_ts < ?`, day)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune roll-ups: %w", err)
	}
	return rows, nil
}

func keysOf(ctx context.Context, tx *txn, q string, args ...any) ([]Key, error) {
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
