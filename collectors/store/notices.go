package store

import (
	"context"
	"fmt"
	"time"

	"github.com/persyst/persyst/digest"
)

// KeepNotice keeps what a running job's batch host told the job's user, and whether it
// still holds: a notice of the job's run (facts: its cluster, id and start, and the
// facts the row lacks) and reason replaces the one before it, keeping the first time
// the user was told.
func (a Admin) KeepNotice(ctx context.Context, facts Job, n digest.Notice) error {
	now := a.s.now().Unix()
	err := inTx(ctx, a.s.w, func(tx *txn) error {
		key, err := resolve(ctx, tx, clusterOf(a.s, facts.Cluster), facts.ID, facts.Start, 0, now)
		if err != nil {
			return err
		}
		if err := updateJob(ctx, tx, key, facts, now, true); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO notices (job, reason, node, since_ts, told_ts, seen_ts, until_ts)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job, reason) DO UPDATE SET node = excluded.node, since_ts = excluded.since_ts,
				told_ts = min(told_ts, excluded.told_ts), seen_ts = excluded.seen_ts, until_ts = excluded.until_ts`,
			key, n.Reason, n.Node, n.Since.Unix(), n.Told.Unix(), n.Seen.Unix(), nullTime(n.Until))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: keep the %s notice of %s: %w", n.Reason, facts.Name(), err)
	}
	return nil
}

// Running is a running job that holds what it does not use, as its batch host last
// said: since when, when its user was told, and the latest interval in which it held.
type Running struct {
	Job                    Job
	Reason, Node           string
	Since, Told, SeenUntil time.Time
}

// MaxRunning bounds the running jobs Running lists.
const MaxRunning = 1000

// Running lists the running jobs, within the filter's scope, cluster, account, user,
// partition and QOS (not its period), whose notice still held in an interval that
// ended at seenAfter or later and whose end is not known: the longest held first, at
// most MaxRunning.
func (r Rollups) Running(ctx context.Context, f SiteFilter, seenAfter time.Time) ([]Running, error) {
	where, args := f.narrow("j.", true)
	rows, err := r.s.r.QueryContext(ctx, `SELECT `+jobColumns+`, n.reason, n.node, n.since_ts, n.told_ts, n.seen_ts
		FROM notices n JOIN jobs j ON j.key = n.job
		WHERE n.seen_ts >= ? AND n.until_ts IS NULL AND j.end_ts IS NULL AND coalesce(j.state, '') = ''`+where+`
		ORDER BY n.since_ts, j.key, n.reason LIMIT ?`, append(append([]any{seenAfter.Unix()}, args...), MaxRunning)...)
	if err != nil {
		return nil, fmt.Errorf("store: running jobs told: %w", err)
	}
	defer rows.Close()
	var out []Running
	for rows.Next() {
		var x Running
		var since, told, seen int64
		if x.Job, err = scanJob(rows, &x.Reason, &x.Node, &since, &told, &seen); err != nil {
			return nil, fmt.Errorf("store: running jobs told: %w", err)
		}
		x.Since, x.Told, x.SeenUntil = time.Unix(since, 0).UTC(), time.Unix(told, 0).UTC(), time.Unix(seen, 0).UTC()
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: running jobs told: %w", err)
	}
	return out, nil
}
