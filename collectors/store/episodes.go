package store

import (
	"context"
	"fmt"
	"time"

	"github.com/persyst/persyst/episodes"
)

// PutEpisode keeps a site-wide I/O episode of the store's cluster (Options.Cluster),
// replacing the one of that cluster that began at the same time (an episode still going
// on grows).
func (s *Store) PutEpisode(ctx context.Context, e episodes.Episode) error {
	err := inTx(ctx, s.w, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO episodes (cluster, from_ts, to_ts, jobs, stalled, peak) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (cluster, from_ts) DO UPDATE SET to_ts = excluded.to_ts, jobs = excluded.jobs, stalled = excluded.stalled, peak = excluded.peak`,
			s.cluster, e.From.Unix(), e.To.Unix(), e.Jobs, e.Stalled, e.Peak)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: episode from %s: %w", e.From.Format(time.RFC3339), err)
	}
	return nil
}

// Episodes returns the episodes that ended after since, the newest first (at most
// MaxListed), of one cluster or ("") of every cluster, each with its cluster's name.
func (s *Store) Episodes(ctx context.Context, since time.Time, cluster string) ([]episodes.Episode, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT cluster, from_ts, to_ts, jobs, stalled, peak FROM episodes
		WHERE to_ts >= ?1 AND (?2 = '' OR cluster = ?2) ORDER BY from_ts DESC, cluster LIMIT ?3`,
		since.Unix(), cluster, MaxListed)
	if err != nil {
		return nil, fmt.Errorf("store: episodes: %w", err)
	}
	defer rows.Close()
	var out []episodes.Episode
	for rows.Next() {
		var from, to int64
		var e episodes.Episode
		if err := rows.Scan(&e.Cluster, &from, &to, &e.Jobs, &e.Stalled, &e.Peak); err != nil {
			return nil, fmt.Errorf("store: episodes: %w", err)
		}
		e.From, e.To = time.Unix(from, 0), time.Unix(to, 0)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: episodes: %w", err)
	}
	return out, nil
}
