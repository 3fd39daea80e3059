package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"slices"
	"strings"
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
	// memPeakShare is the job's highest memory against its request (memory_unused),
	// where it was measured; energyKWh its energy, where measured.
	memPeakShare *float64
	energyKWh    *float64
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
	if m, ok := meanOf(byKey["memory_unused"]); ok {
		m = max(m, 0)
		f.memPeakShare = &m
	}
	// A multi-node job's energy counts where it is all its nodes': the batch host's alone
	// would understate the site's (the job counts among those without).
	if e := r.Energy; e != nil && e.KWh >= 0 && !math.IsInf(e.KWh, 0) && e.Whole(max(r.NNodes, 1)) {
		kwh := e.KWh
		f.energyKWh = &kwh
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
func setFigures(ctx context.Context, tx *txn, key Key, f figures) error {
	var topKey, topName, topShare, topSev any
	if f.top != nil {
		topKey, topName, topShare, topSev = f.top.Key, f.top.Name, f.top.TimeShare, f.top.MeanSeverity
	}
	var peak, energy any
	if f.memPeakShare != nil {
		peak = *f.memPeakShare
	}
	if f.energyKWh != nil {
		energy = *f.energyKWh
	}
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET day = ?, cpu_h = ?, cpu_used_h = ?, cpu_meas_h = ?, gpu_h = ?, gpu_used_h = ?, gpu_meas_h = ?,
			seconds = ?, findings = ?, top_key = ?, top_name = ?, top_share = ?, top_severity = ?, mem_peak_share = ?, energy_kwh = ?
		WHERE key = ?`, f.day, f.cpuH, f.cpuUsedH, f.cpuMeasH, f.gpuH, f.gpuUsedH, f.gpuMeasH,
		f.seconds, f.count, topKey, topName, topShare, topSev, peak, energy, key); err != nil {
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
func roll(ctx context.Context, tx *txn, key Key) error   { return rollBy(ctx, tx, key, 1) }
func unroll(ctx context.Context, tx *txn, key Key) error { return rollBy(ctx, tx, key, -1) }

const rollGroup = `cluster, coalesce(account, ''), coalesce(user, ''), coalesce(partition, ''), coalesce(qos, '')`

// groupDims are the dimensions findings_by_daily keeps, as a table of one column (dim),
// and dimValue a job's (j) value of the dimension d.dim.
const (
	groupDims = `(SELECT 'account' AS dim UNION ALL SELECT 'user' UNION ALL SELECT 'partition' UNION ALL SELECT 'qos')`
	dimValue  = `CASE d.dim WHEN 'account' THEN coalesce(j.account, '') WHEN 'user' THEN coalesce(j.user, '')
		WHEN 'partition' THEN coalesce(j.partition, '') ELSE coalesce(j.qos, '') END`
)

// wasteColumns are usage_daily's figures of what a job requested and left unused, and
// wasteOf computes them from a job's row (in this order): memory requested, in
// GiB-hours over the job's measured hours; of it, unused (1 − the peak's share of the
// request) and measured (where the peak was); CPU-hours of the time limit requested
// (CPUs × the limit), and left unused (CPUs × the limit less the job's elapsed time,
// Slurm's where known). A job without a memory request or a time limit adds none.
var wasteColumns = []string{"mem_gbh", "mem_unused_gbh", "mem_meas_gbh", "limit_cpu_h", "limit_unused_cpu_h"}

const (
	memGBH = `(coalesce(req_mem_mb, 0) / 1024.0 * coalesce(seconds, 0) / 3600)`
	limitS = `(CASE WHEN time_limit_s > 0 THEN time_limit_s ELSE 0 END)`
)

var wasteExprs = []string{
	memGBH,
	`(CASE WHEN mem_peak_share IS NULL THEN 0 ELSE ` + memGBH + ` * (1 - min(max(mem_peak_share, 0), 1)) END)`,
	`(CASE WHEN mem_peak_share IS NULL THEN 0 ELSE ` + memGBH + ` END)`,
	`(coalesce(cpus, 0) * ` + limitS + ` / 3600.0)`,
	`(coalesce(cpus, 0) * max(` + limitS + ` - coalesce(end_ts - start_ts, seconds, 0), 0) / 3600.0)`,
}

// wasteOf is the select list of the waste figures of a job's row, each times sign and
// named as its column.
func wasteOf(sign string) string {
	out := make([]string, len(wasteExprs))
	for i, e := range wasteExprs {
		out[i] = sign + " * " + e + " AS " + wasteColumns[i]
	}
	return strings.Join(out, ", ")
}

// usageColumns are the figures usage_daily and usage_site_daily sum, and usageOf their
// values from a job's row times sign (its energy: where measured, counted in energy_jobs).
var usageColumns = slices.Concat(usageColumnsV4, []string{"energy_kwh", "energy_jobs"})

// usageColumnsV4 are the columns usage_site_daily was made with (schema version 4: its
// migration fills them).
var usageColumnsV4 = slices.Concat([]string{"jobs", "cpu_h", "cpu_used_h", "cpu_meas_h", "gpu_h", "gpu_used_h", "gpu_meas_h"}, wasteColumns)

func usageOf(sign string) string {
	return sign + ", " + sign + " * cpu_h, " + sign + " * cpu_used_h, " + sign + " * cpu_meas_h, " + sign + " * gpu_h, " +
		sign + " * gpu_used_h, " + sign + " * gpu_meas_h, " + wasteOf(sign) + ", " +
		sign + " * coalesce(energy_kwh, 0), CASE WHEN energy_kwh IS NULL THEN 0 ELSE " + sign + " END"
}

// addUsage is the upsert that adds a job's figures (?1: the sign, ?2: the job's key) to a
// usage table by its group columns (groupExprs: their values from the job's row).
func addUsage(table, groupCols, groupExprs string) string {
	set := make([]string, len(usageColumns))
	for i, c := range usageColumns {
		set[i] = c + " = " + c + " + excluded." + c
	}
	return `INSERT INTO ` + table + ` (` + groupCols + `, ` + strings.Join(usageColumns, ", ") + `)
		SELECT ` + groupExprs + `, ` + usageOf("?1") + ` FROM jobs WHERE key = ?2 AND day IS NOT NULL
		ON CONFLICT (` + groupCols + `) DO UPDATE SET ` + strings.Join(set, ", ")
}

func rollBy(ctx context.Context, tx *txn, key Key, sign int) error {
	res, err := tx.ExecContext(ctx, addUsage("usage_daily", "day, cluster, account, user, partition, qos", "day, "+rollGroup), sign, key)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // no figures: nothing rolled
	}
	for _, q := range []string{
		addUsage("usage_site_daily", "day, cluster", "day, cluster"),
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
		`INSERT INTO findings_by_daily (dim, day, cluster, value, finding, jobs, cpu_h, gpu_h)
		SELECT d.dim, j.day, j.cluster, ` + dimValue + `, f.finding, ?1, ?1 * f.cpu_h, ?1 * f.gpu_h
		FROM jobs j JOIN job_findings f ON f.job = j.key JOIN ` + groupDims + ` d WHERE j.key = ?2 AND j.day IS NOT NULL
		ON CONFLICT (dim, day, cluster, value, finding) DO UPDATE SET
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
		`DELETE FROM usage_site_daily WHERE jobs <= 0 AND (day, cluster) IN (SELECT day, cluster FROM jobs WHERE key = ?)`,
		`DELETE FROM findings_daily WHERE jobs <= 0 AND (day, cluster, account, user, partition, qos) IN
			(SELECT day, ` + rollGroup + ` FROM jobs WHERE key = ?)`,
		`DELETE FROM findings_site_daily WHERE jobs <= 0 AND (day, cluster) IN (SELECT day, cluster FROM jobs WHERE key = ?)`,
		`DELETE FROM finding_users_daily WHERE jobs <= 0 AND (day, cluster, user) IN
			(SELECT day, cluster, coalesce(user, '') FROM jobs WHERE key = ?)`,
		`DELETE FROM findings_by_daily WHERE jobs <= 0 AND (dim, day, cluster, value) IN
			(SELECT d.dim, j.day, j.cluster, ` + dimValue + ` FROM jobs j JOIN ` + groupDims + ` d WHERE j.key = ?)`,
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
func rollAll(ctx context.Context, tx *txn) error {
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

// rollWaste is schema 4's migration: the memory peaks of the jobs already rolled up,
// from their reports, and what they requested and left unused added to their days'
// roll-ups (a job pruned before adds nothing: its memory and time limit are not
// known). The jobs not rolled up yet are rolled after the migration, whole (rollAll).
func rollWaste(ctx context.Context, tx *txn) error {
	rows, err := tx.QueryContext(ctx, `SELECT j.key, r.schema, r.codec, r.report FROM jobs j JOIN reports r ON r.job = j.key
		WHERE j.day IS NOT NULL`)
	if err != nil {
		return err
	}
	c, err := newCodec()
	if err != nil {
		rows.Close()
		return err
	}
	defer c.close()
	peaks := map[Key]float64{}
	for rows.Next() {
		var key Key
		var schema int
		var codec string
		var text []byte
		if err := rows.Scan(&key, &schema, &codec, &text); err != nil {
			rows.Close()
			return err
		}
		if schema > digest.SchemaVersion {
			continue
		}
		r, err := c.decode(codec, text)
		if err != nil {
			continue // an unreadable report is in no list either
		}
		for _, p := range r.Properties {
			if m, ok := meanOf(p); ok && p.Key == "memory_unused" {
				peaks[key] = max(m, 0)
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for key, m := range peaks {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET mem_peak_share = ? WHERE key = ?`, m, key); err != nil {
			return err
		}
	}
	// Summed per roll-up group, then set on the groups' rows (which hold no waste yet).
	sums, set := make([]string, len(wasteColumns)), make([]string, len(wasteColumns))
	for i, c := range wasteColumns {
		sums[i] = "sum(" + c + ") AS " + c
		set[i] = c + " = w." + c
	}
	_, err = tx.ExecContext(ctx, `UPDATE usage_daily AS u SET `+strings.Join(set, ", ")+`
		FROM (SELECT day, c, a, us, p, q, `+strings.Join(sums, ", ")+`
			FROM (SELECT day, cluster AS c, coalesce(account, '') AS a, coalesce(user, '') AS us, coalesce(partition, '') AS p,
				coalesce(qos, '') AS q, `+wasteOf("1")+` FROM jobs WHERE day IS NOT NULL)
			GROUP BY day, c, a, us, p, q) AS w
		WHERE u.day = w.day AND u.cluster = w.c AND u.account = w.a AND u.user = w.us AND u.partition = w.p AND u.qos = w.q`)
	if err != nil {
		return err
	}
	// The site's daily figures: usage_daily's per day and cluster.
	sums = make([]string, len(usageColumnsV4))
	for i, c := range usageColumnsV4 {
		sums[i] = "sum(" + c + ")"
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO usage_site_daily (day, cluster, `+strings.Join(usageColumnsV4, ", ")+`)
		SELECT day, cluster, `+strings.Join(sums, ", ")+` FROM usage_daily GROUP BY day, cluster`)
	return err
}
