package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
)

// figures are what a job adds to the site's roll-ups, from its report: its day (the UTC
// day it ended), the hours it held CPUs and GPUs, how many of them it used where that
// was measured, and the hours each of its findings held.
type figures struct {
	day                      int64
	cpuH, cpuUsedH, cpuMeasH float64
	gpuH, gpuUsedH, gpuMeasH float64
	findings                 []findingHours
	// For the job list: the measured seconds, the findings (those the digest left out
	// counted), the first finding.
	seconds float64
	count   int
	top     *properties.Result
}

type findingHours struct {
	key, name  string
	cpuH, gpuH float64
}

// day is the start of t's UTC day, in Unix seconds.
func day(t time.Time) int64 { return t.Unix() - ((t.Unix()%86400)+86400)%86400 }

// figuresOf reads a job's figures from its report; end is the job's end (its day), cpus
// and gpus are the row's, used where the report has none.
//
// Hours are the job's measured seconds (its elapsed time where none). CPU-hours used are
// the CPU-hours allocated times the job's mean CPU use (cpu_user_pct + cpu_system_pct,
// their means over nodes and time estimated from the report's deciles by the trapezoid
// rule); GPU-hours used are the GPU-hours in which the job's GPUs ran kernels (1 −
// gpu_unused). Where those properties were not assessed the hours count as allocated, not
// as measured (cpu_meas_h, gpu_meas_h say how much was). A finding holds the job's
// CPU-hours and GPU-hours times its share of the job's time (TimeShare).
func figuresOf(r *digest.Report, end time.Time, cpus, gpus int) figures {
	if r.CPUs > 0 {
		cpus = r.CPUs
	}
	if r.GPUs > 0 {
		gpus = r.GPUs
	}
	hours := r.Seconds / 3600
	if !(hours > 0) && !r.Start.IsZero() && r.End.After(r.Start) {
		hours = r.End.Sub(r.Start).Hours()
	}
	if !(hours > 0) || math.IsInf(hours, 0) {
		hours = 0
	}
	f := figures{day: day(end), cpuH: float64(cpus) * hours, gpuH: float64(gpus) * hours,
		seconds: hours * 3600, count: len(r.Findings) + r.Omitted}
	if len(r.Findings) > 0 {
		f.top = &r.Findings[0]
	}
	byKey := map[string]properties.Result{}
	for _, p := range r.Properties {
		byKey[p.Key] = p
	}
	for _, p := range r.Findings {
		byKey[p.Key] = p
	}
	if u, ok := meanOf(byKey["cpu_user_pct"]); ok {
		s, _ := meanOf(byKey["cpu_system_pct"])
		f.cpuMeasH = f.cpuH
		f.cpuUsedH = f.cpuH * clamp01((u+s)/100)
	}
	if u, ok := meanOf(byKey["gpu_unused"]); ok && f.gpuH > 0 {
		f.gpuMeasH = f.gpuH
		f.gpuUsedH = f.gpuH * clamp01(1-u)
	}
	for _, p := range r.Findings {
		share := clamp01(p.TimeShare)
		f.findings = append(f.findings, findingHours{key: p.Key, name: p.Name, cpuH: f.cpuH * share, gpuH: f.gpuH * share})
	}
	return f
}

// meanOf estimates a property's mean from its deciles (the trapezoid rule over the
// quantile function), if it was assessed.
func meanOf(p properties.Result) (float64, bool) {
	d := p.Deciles
	if !p.Assessed || len(d) < 2 {
		return 0, false
	}
	sum := 0.0
	for i := 1; i < len(d); i++ {
		sum += (d[i-1] + d[i]) / 2
	}
	m := sum / float64(len(d)-1)
	if math.IsNaN(m) || math.IsInf(m, 0) {
		return 0, false
	}
	return m, true
}

func clamp01(v float64) float64 {
	switch {
	case !(v > 0):
		return 0
	case v > 1:
		return 1
	}
	return v
}

// setFigures keeps a job's figures on its row and in job_findings (the job's roll-ups
// must be out: unroll first, roll after).
func setFigures(ctx context.Context, tx *sql.Tx, key Key, f figures) error {
	var topKey, topName, topShare, topSev any
	if f.top != nil {
		topKey, topName, topShare, topSev = f.top.Key, f.top.Name, f.top.TimeShare, f.top.MeanSeverity
	}
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET day = ?, cpu_h = ?, cpu_used_h = ?, cpu_meas_h = ?, gpu_h = ?, gpu_used_h = ?, gpu_meas_h = ?,
			seconds = ?, findings = ?, top_key = ?, top_name = ?, top_share = ?, top_severity = ?
		WHERE key = ?`, f.day, f.cpuH, f.cpuUsedH, f.cpuMeasH, f.gpuH, f.gpuUsedH, f.gpuMeasH,
		f.seconds, f.count, topKey, topName, topShare, topSev, key); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM job_findings WHERE job = ?`, key); err != nil {
		return err
	}
	for _, fh := range f.findings {
		if _, err := tx.ExecContext(ctx, `INSERT INTO job_findings (job, finding, day, cpu_h, gpu_h) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (job, finding) DO UPDATE SET cpu_h = excluded.cpu_h, gpu_h = excluded.gpu_h`,
			key, fh.key, f.day, fh.cpuH, fh.gpuH); err != nil {
			return err
		}
		if fh.name != "" {
			if _, err := tx.ExecContext(ctx, `INSERT INTO finding_names (finding, name) VALUES (?, ?)
				ON CONFLICT (finding) DO UPDATE SET name = excluded.name WHERE name != excluded.name`, fh.key, fh.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// roll adds the job's figures to the daily roll-ups; unroll takes them out. A job
// without figures (no report yet) is in none.
func roll(ctx context.Context, tx *sql.Tx, key Key) error   { return rollBy(ctx, tx, key, 1) }
func unroll(ctx context.Context, tx *sql.Tx, key Key) error { return rollBy(ctx, tx, key, -1) }

const rollGroup = `cluster, coalesce(account, ''), coalesce(user, ''), coalesce(partition, ''), coalesce(qos, '')`

func rollBy(ctx context.Context, tx *sql.Tx, key Key, sign int) error {
	res, err := tx.ExecContext(ctx, `INSERT INTO usage_daily (day, cluster, account, user, partition, qos,
			jobs, cpu_h, cpu_used_h, cpu_meas_h, gpu_h, gpu_used_h, gpu_meas_h)
		SELECT day, `+rollGroup+`, ?1, ?1 * cpu_h, ?1 * cpu_used_h, ?1 * cpu_meas_h, ?1 * gpu_h, ?1 * gpu_used_h, ?1 * gpu_meas_h
		FROM jobs WHERE key = ?2 AND day IS NOT NULL
		ON CONFLICT (day, cluster, account, user, partition, qos) DO UPDATE SET
			jobs = jobs + excluded.jobs, cpu_h = cpu_h + excluded.cpu_h, cpu_used_h = cpu_used_h + excluded.cpu_used_h,
			cpu_meas_h = cpu_meas_h + excluded.cpu_meas_h, gpu_h = gpu_h + excluded.gpu_h,
			gpu_used_h = gpu_used_h + excluded.gpu_used_h, gpu_meas_h = gpu_meas_h + excluded.gpu_meas_h`, sign, key)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // no figures: nothing rolled
	}
	for _, q := range []string{
		`INSERT INTO findings_daily (day, cluster, account, user, partition, qos, finding, jobs, cpu_h, gpu_h)
		SELECT j.day, ` + rollGroup + `, f.finding, ?1, ?1 * f.cpu_h, ?1 * f.gpu_h
		FROM jobs j JOIN job_findings f ON f.job = j.key WHERE j.key = ?2 AND j.day IS NOT NULL
		ON CONFLICT (day, cluster, account, user, partition, qos, finding) DO UPDATE SET
			jobs = jobs + excluded.jobs, cpu_h = cpu_h + excluded.cpu_h, gpu_h = gpu_h + excluded.gpu_h`,
		`INSERT INTO findings_site_daily (day, cluster, finding, jobs, cpu_h, gpu_h)
		SELECT j.day, j.cluster, f.finding, ?1, ?1 * f.cpu_h, ?1 * f.gpu_h
		FROM jobs j JOIN job_findings f ON f.job = j.key WHERE j.key = ?2 AND j.day IS NOT NULL
		ON CONFLICT (day, cluster, finding) DO UPDATE SET
			jobs = jobs + excluded.jobs, cpu_h = cpu_h + excluded.cpu_h, gpu_h = gpu_h + excluded.gpu_h`,
		`INSERT INTO finding_users_daily (finding, day, cluster, user, jobs, cpu_h, gpu_h)
		SELECT f.finding, j.day, j.cluster, coalesce(j.user, ''), ?1, ?1 * f.cpu_h, ?1 * f.gpu_h
		FROM jobs j JOIN job_findings f ON f.job = j.key WHERE j.key = ?2 AND j.day IS NOT NULL
		ON CONFLICT (finding, day, cluster, user) DO UPDATE SET
			jobs = jobs + excluded.jobs, cpu_h = cpu_h + excluded.cpu_h, gpu_h = gpu_h + excluded.gpu_h`,
	} {
		if _, err := tx.ExecContext(ctx, q, sign, key); err != nil {
			return err
		}
	}
	if sign > 0 {
		return nil
	}
	// Groups left without jobs go (their hours are sums that came back to zero).
	for _, q := range []string{
		`DELETE FROM usage_daily WHERE jobs <= 0 AND (day, cluster, account, user, partition, qos) IN
			(SELECT day, ` + rollGroup + ` FROM jobs WHERE key = ?)`,
		`DELETE FROM findings_daily WHERE jobs <= 0 AND (day, cluster, account, user, partition, qos) IN
			(SELECT day, ` + rollGroup + ` FROM jobs WHERE key = ?)`,
		`DELETE FROM findings_site_daily WHERE jobs <= 0 AND (day, cluster) IN (SELECT day, cluster FROM jobs WHERE key = ?)`,
		`DELETE FROM finding_users_daily WHERE jobs <= 0 AND (day, cluster, user) IN
			(SELECT day, cluster, coalesce(user, '') FROM jobs WHERE key = ?)`,
	} {
		if _, err := tx.ExecContext(ctx, q, key); err != nil {
			return err
		}
	}
	return nil
}

// rollAll rolls up every stored report that is in no roll-up yet (a database of an
// earlier schema, whose reports were kept before there were roll-ups). A report that
// cannot be read is left out of them, as ListJobs leaves it out of a list.
func rollAll(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT j.key, j.end_ts, coalesce(j.cpus, 0), coalesce(j.gpus, 0), j.updated_ts, r.schema, r.codec, r.report
		FROM jobs j JOIN reports r ON r.job = j.key WHERE j.day IS NULL`)
	if err != nil {
		return err
	}
	type pending struct {
		key Key
		f   figures
	}
	var todo []pending
	for rows.Next() {
		var key Key
		var end sql.NullInt64
		var cpus, gpus int
		var updated int64
		var schema int
		var codec string
		var text []byte
		if err := rows.Scan(&key, &end, &cpus, &gpus, &updated, &schema, &codec, &text); err != nil {
			rows.Close()
			return err
		}
		var r digest.Report
		if schema > digest.SchemaVersion || codec != "json" || json.Unmarshal(text, &r) != nil {
			continue // reports of an earlier schema are JSON
		}
		at := fromUnix(end)
		if at.IsZero() {
			at = r.End
		}
		if at.IsZero() {
			at = time.Unix(updated, 0)
		}
		todo = append(todo, pending{key, figuresOf(&r, at, cpus, gpus)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range todo {
		if err := setFigures(ctx, tx, p.key, p.f); err != nil {
			return err
		}
		if err := roll(ctx, tx, p.key); err != nil {
			return err
		}
	}
	return nil
}
