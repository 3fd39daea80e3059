package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
)

// CycleResult is one property of one job at one cycle timestamp: the Summary
// of its values over the job's devices, their severity distribution and the
// share of the job's devices of that domain where it was severe.
type CycleResult struct {
	Key      string // property key (properties.Property.Key, e.g. "io_wait" or "memory_bw:memory_bound")
	Summary  quantile.Summary
	Severity quantile.Severity
	// Devices is the number of the job's devices of the property's domain in
	// the cycle (CPUs, cores or nodes), evaluated or not: the base of
	// TimeShare. A refined property evaluated on few devices still has the
	// whole domain as its base, as in properties.Result.TimeShare. 0 means
	// "the devices with a record" (Severity's total, invalid included).
	Devices int64
	// TimeShare is the share of the cycle's device-time with severity > 0:
	// (severities > 0) / Devices, in [0, 1]. Every device of a cycle has the
	// same interval, so the device share is the device-time share.
	TimeShare float64
}

// StoredCycle is a CycleResult read back with its timestamp.
type StoredCycle struct {
	Time time.Time // the cycle timestamp, whole seconds, UTC
	CycleResult
}

// Summarize aggregates one cycle's property records of a whole job (all its
// devices, on every node) into one CycleResult per property key, sorted by
// key: the exact Summary (type-7 quantiles with q steps, quantile.Summarize),
// the severity distribution, Devices and TimeShare. This is what a collector
// holding the whole job does each cycle before PutCycle.
//
// Devices is the largest number of records any property of the same domain
// has in the cycle (root properties are evaluated on every device of their
// domain; a refined one only where its parent held). The domain is read from
// the record's device label ("cpu3", "core0.2", "node"), after any "host/"
// prefix a collector adds to tell the nodes apart. The only error is a q
// outside [1, quantile.MaxQ].
func Summarize(recs []properties.Record, q int) ([]CycleResult, error) {
	if q < 1 || q > quantile.MaxQ {
		return nil, fmt.Errorf("store: %w: q=%d", quantile.ErrQ, q)
	}
	type group struct {
		domain string
		values []float64
		sev    quantile.Severity
	}
	groups := map[string]*group{}
	for _, r := range recs {
		g := groups[r.Key]
		if g == nil {
			g = &group{domain: DomainOf(r.Device)}
			groups[r.Key] = g
		}
		g.values = append(g.values, r.Value)
		g.sev.Add(r.Severity)
	}
	devices := map[string]int64{}
	for _, g := range groups {
		devices[g.domain] = max(devices[g.domain], int64(len(g.values)))
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]CycleResult, 0, len(keys))
	var sc quantile.Scratch
	for _, k := range keys {
		g := groups[k]
		sum, err := sc.Summarize(g.values, q)
		if err != nil {
			return nil, err
		}
		r := CycleResult{Key: k, Summary: sum, Severity: g.sev, Devices: devices[g.domain]}
		r.TimeShare = timeShare(r.Severity, r.Devices)
		out = append(out, r)
	}
	return out, nil
}

// DomainOf maps a device label to its domain: "node", "cpu", "core", or the
// label itself for anything else.
func DomainOf(device string) string {
	if i := strings.LastIndexByte(device, '/'); i >= 0 {
		device = device[i+1:]
	}
	return strings.TrimRight(device, "0123456789.")
}

// timeShare is the share of devices with a severity > 0.
func timeShare(sev quantile.Severity, devices int64) float64 {
	severe := sev.Total() - sev.Counts[0]
	base := max(devices, sev.Total()+sev.Invalid)
	if base == 0 {
		return 0
	}
	return float64(severe) / float64(base)
}

// check validates a result before it is stored.
func (r *CycleResult) check() error {
	switch q := r.Summary.Q(); {
	case r.Key == "":
		return errors.New("empty property key")
	case q < 1 || q > quantile.MaxQ:
		return fmt.Errorf("%s: %w: q=%d", r.Key, quantile.ErrQ, q)
	case r.Summary.Count < 0 || r.Summary.NonFinite < 0 || r.Devices < 0 || r.Severity.Invalid < 0 || slices.Min(r.Severity.Counts[:]) < 0:
		return fmt.Errorf("%s: negative count", r.Key)
	case !(r.TimeShare >= 0 && r.TimeShare <= 1):
		return fmt.Errorf("%s: time share %v not in [0, 1]", r.Key, r.TimeShare)
	}
	return nil
}

const upsertCycle = `INSERT INTO cycles (job, ts, key, count, nonfinite, sum, min, max, mean, quantiles,
		sev0, sev1, sev2, sev3, sev4, sev_invalid, devices, time_share)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (job, ts, key) DO UPDATE SET
		count = excluded.count, nonfinite = excluded.nonfinite, sum = excluded.sum,
		min = excluded.min, max = excluded.max, mean = excluded.mean, quantiles = excluded.quantiles,
		sev0 = excluded.sev0, sev1 = excluded.sev1, sev2 = excluded.sev2, sev3 = excluded.sev3,
		sev4 = excluded.sev4, sev_invalid = excluded.sev_invalid,
		devices = excluded.devices, time_share = excluded.time_share`

// PutCycle stores a job's results of one cycle (ts, truncated to whole Unix
// seconds) in one transaction. Storing the same (job, ts, key) again replaces
// the row (upsert), so a resent cycle is idempotent. The job's row is created
// if needed; its samples count goes up by one when ts is new for the job. The job is
// the newest of the id in the store's cluster, unless ts lies well after it ended or was
// last seen: then Slurm gave the id to a new job, which gets a row of its own (resolve).
// Duplicate keys in results are refused.
func (s *Store) PutCycle(ctx context.Context, job uint32, ts time.Time, results []CycleResult) error {
	if job == 0 {
		return errors.New("store: job id 0")
	}
	if len(results) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(results))
	for i := range results {
		if err := results[i].check(); err != nil {
			return fmt.Errorf("store: job %d at %d: %w", job, ts.Unix(), err)
		}
		if seen[results[i].Key] {
			return fmt.Errorf("store: job %d at %d: key %s twice", job, ts.Unix(), results[i].Key)
		}
		seen[results[i].Key] = true
	}
	unix, now := ts.Unix(), s.now().Unix()
	err := inTx(ctx, s.w, func(tx *txn) error {
		key, err := resolve(ctx, tx, s.cluster, job, time.Time{}, unix, now)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET updated_ts = ? WHERE key = ?`, now, key); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM cycles WHERE job = ? AND ts = ?)`, key, unix).Scan(&exists); err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, upsertCycle)
		if err != nil {
			return err
		}
		defer stmt.Close()
		var qbuf []byte
		for _, r := range results {
			qbuf = appendQuantiles(qbuf[:0], r.Summary.Quantiles)
			sv := r.Severity
			if _, err := stmt.ExecContext(ctx, key, unix, r.Key, r.Summary.Count, r.Summary.NonFinite,
				nullable(r.Summary.Sum), nullable(r.Summary.Min), nullable(r.Summary.Max), nullable(r.Summary.Mean), string(qbuf),
				sv.Counts[0], sv.Counts[1], sv.Counts[2], sv.Counts[3], sv.Counts[4], sv.Invalid,
				r.Devices, r.TimeShare); err != nil {
				return fmt.Errorf("%s: %w", r.Key, err)
			}
		}
		if !exists {
			_, err = tx.ExecContext(ctx, `UPDATE jobs SET samples = samples + 1 WHERE key = ?`, key)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put cycle of job %d at %d: %w", job, unix, err)
	}
	return nil
}

// Cycles returns the time series of one property of the newest job with the Slurm id,
// oldest first (empty, without error, if there is none); CyclesAt those of a job by the
// store's key.
func (s *Store) Cycles(ctx context.Context, job uint32, key string) ([]StoredCycle, error) {
	k, err := newest(ctx, s, job)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: cycles of job %d %s: %w", job, key, err)
	}
	return s.CyclesAt(ctx, k, key)
}

// CyclesAt returns the time series of one property of the job with the store's key.
func (s *Store) CyclesAt(ctx context.Context, job Key, key string) ([]StoredCycle, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT ts, count, nonfinite, sum, min, max, mean, quantiles,
			sev0, sev1, sev2, sev3, sev4, sev_invalid, devices, time_share
		FROM cycles WHERE job = ? AND key = ? ORDER BY ts`, job, key)
	if err != nil {
		return nil, fmt.Errorf("store: cycles of job %d %s: %w", job, key, err)
	}
	defer rows.Close()
	var out []StoredCycle
	for rows.Next() {
		c := StoredCycle{CycleResult: CycleResult{Key: key}}
		var ts int64
		var sum, mn, mx, mean sql.NullFloat64
		var qs string
		sm, sv := &c.Summary, &c.Severity
		if err := rows.Scan(&ts, &sm.Count, &sm.NonFinite, &sum, &mn, &mx, &mean, &qs,
			&sv.Counts[0], &sv.Counts[1], &sv.Counts[2], &sv.Counts[3], &sv.Counts[4], &sv.Invalid,
			&c.Devices, &c.TimeShare); err != nil {
			return nil, fmt.Errorf("store: cycles of job %d %s: %w", job, key, err)
		}
		c.Time = time.Unix(ts, 0).UTC()
		sm.Sum, sm.Min, sm.Max, sm.Mean = nanIfNull(sum), nanIfNull(mn), nanIfNull(mx), nanIfNull(mean)
		if sm.Quantiles, err = parseQuantiles(qs); err != nil {
			return nil, fmt.Errorf("store: cycles of job %d %s at %d: %w", job, key, ts, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: cycles of job %d %s: %w", job, key, err)
	}
	return out, nil
}

// nullable binds a float: NaN as NULL (SQLite has no NaN; it would store NULL
// anyway), everything else as is (±Inf are REALs in SQLite).
func nullable(v float64) any {
	if math.IsNaN(v) {
		return nil
	}
	return v
}

// nanIfNull reads a REAL column back, NULL as NaN (and ±Inf as the database keeps it:
// finite).
func nanIfNull(v sql.NullFloat64) float64 {
	if !v.Valid {
		return math.NaN()
	}
	return finite(v.Float64)
}

// appendQuantiles appends qs as a JSON array: the shortest decimal that
// parses back to the same float64 (strconv 'g', -1), null for NaN, and
// ±1e999 for ±Inf (which JSON cannot spell; SQLite's json functions and
// parseQuantiles read 1e999 as +Inf).
func appendQuantiles(b []byte, qs []float64) []byte {
	b = append(b, '[')
	for i, v := range qs {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case math.IsNaN(v):
			b = append(b, "null"...)
		case math.IsInf(v, 1):
			b = append(b, "1e999"...)
		case math.IsInf(v, -1):
			b = append(b, "-1e999"...)
		default:
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
		}
	}
	return append(b, ']')
}

// parseQuantiles reads what appendQuantiles wrote.
func parseQuantiles(s string) ([]float64, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var raw []any
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("quantiles %q: %w", s, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("quantiles %q: trailing data", s)
	}
	out := make([]float64, len(raw))
	for i, x := range raw {
		switch x := x.(type) {
		case nil:
			out[i] = math.NaN()
		case json.Number:
			v, err := strconv.ParseFloat(string(x), 64)
			if err != nil && !(errors.Is(err, strconv.ErrRange) && math.IsInf(v, 0)) {
				return nil, fmt.Errorf("quantiles %q: %w", s, err)
			}
			out[i] = v
		default:
			return nil, fmt.Errorf("quantiles %q: element %d is not a number", s, i)
		}
	}
	return out, nil
}

// Keys returns the property keys stored for the newest job with the Slurm id, sorted.
func (s *Store) Keys(ctx context.Context, job uint32) ([]string, error) {
	k, err := newest(ctx, s, job)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: keys of job %d: %w", job, err)
	}
	return s.KeysAt(ctx, k)
}

// KeysAt returns the property keys stored for the job with the store's key, sorted.
func (s *Store) KeysAt(ctx context.Context, job Key) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT key FROM cycles WHERE job = ? ORDER BY key`, job)
	if err != nil {
		return nil, fmt.Errorf("store: keys of job %d: %w", job, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("store: keys of job %d: %w", job, err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
