package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Key is the store's own key of a job: one per (cluster, Slurm job id, start), so that
// a job id Slurm hands out again, or another cluster's job with the same id, is a job of
// its own. Cycles, reports and roll-ups refer to it.
type Key int64

// Job is a job's row: facts from the job map and the report, and what the store holds.
type Job struct {
	// Key is the store's key of the job (set by reads; writes find the job by Cluster,
	// ID and Start).
	Key     Key
	Cluster string // "": the store's cluster (Options.Cluster) when writing
	ID      uint32
	// JobName is the name the job was submitted with (sbatch --job-name); the user's
	// text, shown escaped.
	JobName string
	User    string
	Account string
	// Partition and QOS are the job's (Slurm's names; several partitions as Slurm
	// gives them, comma-separated).
	Partition string
	QOS       string
	// State is the job's end state as Slurm names it (COMPLETED, FAILED, TIMEOUT,
	// OUT_OF_MEMORY, CANCELLED, NODE_FAIL, PREEMPTED, ...); "": unknown or running.
	State  string
	Nodes  string // the job's nodes as text: a Slurm hostlist ("node[01-04]") or comma-separated names
	NNodes int
	CPUs   int // CPUs allocated
	GPUs   int // GPUs allocated (measured)
	// ReqMemMB is the memory the job requested, in MiB over all its nodes (0: unknown or
	// not a consumable resource).
	ReqMemMB int64
	// TimeLimit is the job's time limit (0: unknown or none).
	TimeLimit time.Duration
	Start     time.Time // Slurm's start time; zero: unknown
	End       time.Time // zero: unknown or still running
	// Samples is the number of cycle timestamps stored for the job (kept by
	// PutCycle; PutJob ignores it).
	Samples int
	// Updated is when the row or the job's cycles or report were last written
	// (kept by the store; PutJob ignores it).
	Updated time.Time
}

// Name is how the job is named in messages: "job 42", "job 42 of cluster c1", with its
// start where known.
func (j *Job) Name() string {
	s := fmt.Sprintf("job %d", j.ID)
	if j.Cluster != "" {
		s += " of cluster " + j.Cluster
	}
	if !j.Start.IsZero() {
		s += " started " + j.Start.UTC().Format(time.RFC3339)
	}
	return s
}

const (
	// startSlack is how far two starts of one job id may lie apart and still be the
	// same job: Slurm's start and a report's (the measurement began a little later).
	startSlack = 2 * time.Minute
	// reuseGap: a cycle of a job id this long after the newest such job ended, or after
	// its last cycle, is a job Slurm gave the id to again (ids wrap after months; a
	// running job's cycles are never a week apart, suspended or not).
	endedGap = time.Hour
	idleGap  = 7 * 24 * time.Hour
)

// resolve finds the job (cluster, id, start) in tx, or makes its row, and returns its
// key. start is Slurm's start where known (zero: unknown); at is the cycle a PutCycle
// writes (0: none). With a start: the row with that start (within startSlack), else the
// newest row of the id without a start whose cycles did not begin before the start
// (a job whose cycles arrived before its facts), else a new row. Without one: the newest
// row of the id, unless at is well after that job ended or was last seen (a reused id).
func resolve(ctx context.Context, tx *txn, cluster string, id uint32, start time.Time, at, now int64) (Key, error) {
	if id == 0 {
		return 0, errors.New("job id 0")
	}
	var key Key
	if !start.IsZero() {
		st := start.Unix()
		slack := int64(startSlack / time.Second)
		err := tx.QueryRowContext(ctx, `SELECT key FROM jobs WHERE cluster = ? AND job_id = ? AND start_ts BETWEEN ? AND ?
			ORDER BY abs(start_ts - ?), key DESC LIMIT 1`, cluster, id, st-slack, st+slack, st).Scan(&key)
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, err
		}
		var first sql.NullInt64
		err = tx.QueryRowContext(ctx, `SELECT key, (SELECT min(ts) FROM cycles WHERE job = jobs.key) FROM jobs
			WHERE cluster = ? AND job_id = ? AND start_ts IS NULL ORDER BY key DESC LIMIT 1`, cluster, id).Scan(&key, &first)
		switch {
		case err == nil && (!first.Valid || first.Int64 >= st-int64(endedGap/time.Second)):
			_, err = tx.ExecContext(ctx, `UPDATE jobs SET start_ts = ? WHERE key = ?`, st, key)
			return key, err
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return 0, err
		}
		return insertJob(ctx, tx, cluster, id, st, now)
	}
	var end, last sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT key, end_ts, (SELECT max(ts) FROM cycles WHERE job = jobs.key) FROM jobs
		WHERE cluster = ? AND job_id = ? ORDER BY key DESC LIMIT 1`, cluster, id).Scan(&key, &end, &last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return 0, err
	case at == 0,
		!(end.Valid && at > end.Int64+int64(endedGap/time.Second)) && !(last.Valid && at > last.Int64+int64(idleGap/time.Second)):
		return key, nil
	}
	return insertJob(ctx, tx, cluster, id, 0, now)
}

func insertJob(ctx context.Context, tx *txn, cluster string, id uint32, start, now int64) (Key, error) {
	var st any
	if start != 0 {
		st = start
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO jobs (cluster, job_id, start_ts, updated_ts) VALUES (?, ?, ?, ?)`, cluster, id, st, now)
	if err != nil {
		return 0, err
	}
	k, err := res.LastInsertId()
	return Key(k), err
}

// clusterOf is the cluster a write goes to.
func clusterOf(s *Store, c string) string {
	if c == "" {
		return s.cluster
	}
	return c
}

// PutJob records a job's facts. Fields that are zero ("" or 0 or the zero time) leave
// the stored value unchanged, so a collector can write the facts it knows at the job's
// start and the end time later.
//
// The job is found by its cluster, id and start (resolve): a job id Slurm hands out
// again (ids wrap at MaxJobId, and restart when slurmctld loses its state) or the same id
// on another cluster is a job of its own; the earlier job is kept. A job's figures in the
// roll-ups move with changed facts (its account, user, partition, QOS).
func (s *Store) PutJob(ctx context.Context, j Job) error {
	now := s.now().Unix()
	err := inTx(ctx, s.w, func(tx *txn) error {
		key, err := resolve(ctx, tx, clusterOf(s, j.Cluster), j.ID, j.Start, 0, now)
		if err != nil {
			return err
		}
		return updateJob(ctx, tx, key, j, now, false)
	})
	if err != nil {
		return fmt.Errorf("store: put %s: %w", j.Name(), err)
	}
	return nil
}

// updateJob writes j's non-zero facts into the row key: over the stored ones, or only
// where the row has none (fill). The job's roll-ups are taken out and put back around it.
func updateJob(ctx context.Context, tx *txn, key Key, j Job, now int64, fill bool) error {
	if err := unroll(ctx, tx, key); err != nil {
		return err
	}
	if err := writeFacts(ctx, tx, key, j, now, fill); err != nil {
		return err
	}
	return roll(ctx, tx, key)
}

// writeFacts is updateJob without the roll-ups.
func writeFacts(ctx context.Context, tx *txn, key Key, j Job, now int64, fill bool) error {
	set := `coalesce(?, %[1]s)`
	if fill {
		set = `coalesce(%[1]s, ?)`
	}
	cols := []string{"name", "user", "account", "partition", "qos", "state", "nodes", "nnodes", "cpus", "gpus", "req_mem_mb", "time_limit_s", "end_ts"}
	q := "UPDATE jobs SET updated_ts = ?"
	for _, c := range cols {
		q += ", " + c + " = " + fmt.Sprintf(set, c)
	}
	q += " WHERE key = ?"
	if _, err := tx.ExecContext(ctx, q, now, nullString(j.JobName), nullString(j.User), nullString(j.Account), nullString(j.Partition), nullString(j.QOS),
		nullString(j.State), nullString(j.Nodes), nullInt(j.NNodes), nullInt(j.CPUs), nullInt(j.GPUs), nullInt64(j.ReqMemMB),
		nullInt64(int64(j.TimeLimit/time.Second)), nullTime(j.End), key); err != nil {
		return err
	}
	return nil
}

// jobColumns are the columns scanJob reads, in its order.
const jobColumns = `j.key, j.cluster, j.job_id, j.name, j.user, j.account, j.partition, j.qos, j.state, j.nodes, j.nnodes, j.cpus, j.gpus,
	j.req_mem_mb, j.time_limit_s, j.start_ts, j.end_ts, j.samples, j.updated_ts`

type scanner interface{ Scan(...any) error }

// scanJob reads a row of jobColumns, followed by the extra destinations.
func scanJob(r scanner, extra ...any) (Job, error) {
	var j Job
	var name, user, account, partition, qos, state, nodes sql.NullString
	var nnodes, cpus, gpus, mem, limit, start, end sql.NullInt64
	var updated int64
	dst := append([]any{&j.Key, &j.Cluster, &j.ID, &name, &user, &account, &partition, &qos, &state, &nodes, &nnodes, &cpus, &gpus,
		&mem, &limit, &start, &end, &j.Samples, &updated}, extra...)
	if err := r.Scan(dst...); err != nil {
		return j, err
	}
	j.JobName = name.String
	j.User, j.Account, j.Partition, j.QOS, j.State, j.Nodes = user.String, account.String, partition.String, qos.String, state.String, nodes.String
	j.NNodes, j.CPUs, j.GPUs = int(nnodes.Int64), int(cpus.Int64), int(gpus.Int64)
	j.ReqMemMB, j.TimeLimit = mem.Int64, time.Duration(limit.Int64)*time.Second
	j.Start, j.End = fromUnix(start), fromUnix(end)
	j.Updated = time.Unix(updated, 0).UTC()
	return j, nil
}

// Job returns the newest job with the Slurm id (of any cluster), or ErrNotFound. Jobs
// lists every job with the id.
func (s *Store) Job(ctx context.Context, id uint32) (*Job, error) {
	js, err := s.Jobs(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(js) == 0 {
		return nil, fmt.Errorf("store: job %d: %w", id, ErrNotFound)
	}
	return &js[0], nil
}

// newestFirst orders the jobs of one id: the latest to start first, a job whose start is
// not known yet (its cycles came first: it runs now) before all.
const newestFirst = `j.start_ts IS NULL DESC, j.start_ts DESC, j.key DESC`

// Jobs returns every job with the Slurm id, of every cluster, the newest first (none:
// an empty list).
func (s *Store) Jobs(ctx context.Context, id uint32) ([]Job, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.job_id = ? ORDER BY `+newestFirst+` LIMIT ?`, id, MaxListed)
	if err != nil {
		return nil, fmt.Errorf("store: jobs %d: %w", id, err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("store: jobs %d: %w", id, err)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// JobAt returns the job with the store's key, or ErrNotFound.
func (s *Store) JobAt(ctx context.Context, key Key) (*Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: job key %d: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: job key %d: %w", key, err)
	}
	return &j, nil
}

// newest is the key of the newest job with the Slurm id (any cluster), or ErrNotFound.
func newest(ctx context.Context, s *Store, id uint32) (Key, error) {
	var k Key
	err := s.r.QueryRowContext(ctx, `SELECT key FROM jobs j WHERE job_id = ? ORDER BY `+newestFirst+` LIMIT 1`, id).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store: job %d: %w", id, ErrNotFound)
	}
	return k, err
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

func nullInt64(v int64) any {
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

// Choose picks among the jobs of one Slurm id (Jobs' answer, newest first) the newest of
// the cluster ("": of any cluster), or ErrNotFound.
func Choose(js []Job, cluster string) (*Job, error) {
	for i := range js {
		if cluster == "" || js[i].Cluster == cluster {
			return &js[i], nil
		}
	}
	if len(js) > 0 && cluster != "" {
		return nil, fmt.Errorf("none of cluster %s: %w", cluster, ErrNotFound)
	}
	return nil, ErrNotFound
}
