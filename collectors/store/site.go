package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// SiteFilter selects the jobs the site's figures sum: those that ended in [From, To)
// (whole UTC days: From's day to the day before To's, To's own day included when To is
// not midnight), of one cluster and one user where set.
type SiteFilter struct {
	From, To time.Time
	Cluster  string
	User     string
	// Top is how many users and jobs each finding lists (default 5).
	Top int
}

// Usage is what a set of jobs held and used.
type Usage struct {
	Jobs int64
	// CPUHours are the CPU-hours allocated; CPUUsedHours those used, of the
	// CPUMeasuredHours in which use was measured. The same for GPUs.
	CPUHours, CPUUsedHours, CPUMeasuredHours float64
	GPUHours, GPUUsedHours, GPUMeasuredHours float64
}

// FindingCost is what one finding cost the site: the jobs it was found in and the
// CPU- and GPU-hours it held (each job's hours × the finding's share of the job's time),
// with the users and jobs it cost most.
type FindingCost struct {
	Key, Name          string
	Jobs               int64
	CPUHours, GPUHours float64
	Users              []UserCost
	TopJobs            []JobCost
}

// UserCost is a user's part of a finding's cost.
type UserCost struct {
	User               string
	CPUHours, GPUHours float64
}

// JobCost is a job's part of a finding's cost.
type JobCost struct {
	Job                Job
	CPUHours, GPUHours float64
}

// Site is the site's figures over a period.
type Site struct {
	From, To time.Time // the whole UTC days summed
	Usage
	// Findings are ordered by the CPU-hours they held, most first.
	Findings []FindingCost
}

// Site sums the daily roll-ups the filter selects: exact at any number of jobs (every
// stored report is in them, and they outlive the reports by their own retention),
// reading days, not jobs. The findings' top jobs come from the jobs still kept.
func (s *Store) Site(ctx context.Context, f SiteFilter) (*Site, error) {
	if f.Top <= 0 {
		f.Top = 5
	}
	from, to := day(f.From), day(f.To)
	if f.To.Unix() > to {
		to += 86400
	}
	out := &Site{From: time.Unix(from, 0).UTC(), To: time.Unix(to, 0).UTC()}
	const where = `day >= ?1 AND day < ?2 AND (?3 = '' OR cluster = ?3) AND (?4 = '' OR user = ?4)`
	args := []any{from, to, f.Cluster, f.User}
	u := &out.Usage
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(jobs), 0), coalesce(sum(cpu_h), 0), coalesce(sum(cpu_used_h), 0),
			coalesce(sum(cpu_meas_h), 0), coalesce(sum(gpu_h), 0), coalesce(sum(gpu_used_h), 0), coalesce(sum(gpu_meas_h), 0)
		FROM usage_daily WHERE `+where, args...).Scan(&u.Jobs, &u.CPUHours, &u.CPUUsedHours, &u.CPUMeasuredHours,
		&u.GPUHours, &u.GPUUsedHours, &u.GPUMeasuredHours); err != nil {
		return nil, fmt.Errorf("store: site: %w", err)
	}
	// The findings' totals: per day and cluster, or a user's (by their own index).
	table := `findings_site_daily d`
	if f.User != "" {
		table = `finding_users_daily d INDEXED BY finding_users_daily_user`
	}
	rows, err := s.r.QueryContext(ctx, `SELECT d.finding, coalesce(n.name, d.finding), sum(d.jobs), sum(d.cpu_h), sum(d.gpu_h)
		FROM `+table+` LEFT JOIN finding_names n ON n.finding = d.finding
		WHERE d.day >= ?1 AND d.day < ?2 AND (?3 = '' OR d.cluster = ?3)`+userCond(f.User)+`
		GROUP BY d.finding ORDER BY sum(d.cpu_h) DESC, d.finding`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: site: %w", err)
	}
	for rows.Next() {
		var c FindingCost
		if err := rows.Scan(&c.Key, &c.Name, &c.Jobs, &c.CPUHours, &c.GPUHours); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: site: %w", err)
		}
		out.Findings = append(out.Findings, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: site: %w", err)
	}
	for i := range out.Findings {
		c := &out.Findings[i]
		if err := findingTops(ctx, s.r, c, where, args, f.Top); err != nil {
			return nil, fmt.Errorf("store: site: %s: %w", c.Key, err)
		}
	}
	return out, nil
}

// userCond narrows the findings' totals to a user's; without one it still names ?4 (the
// empty user), so that the query takes the same arguments (findings_site_daily has no
// user column).
func userCond(user string) string {
	if user == "" {
		return ` AND ?4 = ''`
	}
	return ` AND d.user = ?4`
}

// findingTops fills a finding's top users (from the roll-ups) and top jobs (from the
// jobs kept).
func findingTops(ctx context.Context, db *sql.DB, c *FindingCost, where string, args []any, top int) error {
	rows, err := db.QueryContext(ctx, `SELECT user, sum(cpu_h), sum(gpu_h) FROM finding_users_daily
		WHERE finding = ?5 AND `+where+` GROUP BY user ORDER BY sum(cpu_h) DESC, user LIMIT ?6`, append(args, c.Key, top)...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var u UserCost
		if err := rows.Scan(&u.User, &u.CPUHours, &u.GPUHours); err != nil {
			rows.Close()
			return err
		}
		c.Users = append(c.Users, u)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = db.QueryContext(ctx, `SELECT `+jobColumns+`, f.cpu_h, f.gpu_h
		FROM job_findings f JOIN jobs j ON j.key = f.job
		WHERE f.finding = ?5 AND f.day >= ?1 AND f.day < ?2 AND (?3 = '' OR j.cluster = ?3) AND (?4 = '' OR j.user = ?4)
		ORDER BY f.cpu_h DESC, f.job LIMIT ?6`, append(args, c.Key, top)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var jc JobCost
		var err error
		if jc.Job, err = scanJob(rows, &jc.CPUHours, &jc.GPUHours); err != nil {
			return err
		}
		c.TopJobs = append(c.TopJobs, jc)
	}
	return rows.Err()
}
