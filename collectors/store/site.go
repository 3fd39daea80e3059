package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// Scope is whose figures a reader may see: every job (All), or the jobs of one user and
// of the accounts they coordinate. The zero Scope sees nothing.
type Scope struct {
	All      bool
	User     string
	Accounts []string
}

// SiteFilter selects the jobs the site's figures sum: those that ended in [From, To)
// (whole UTC days: From's day to the day before To's, To's own day included when To is
// not midnight), within Scope, narrowed to one cluster, account, user, partition and QOS
// where set.
type SiteFilter struct {
	From, To time.Time
	Scope    Scope
	Cluster  string
	Account  string
	User     string
	// Partition is a job's partition as Slurm names it (several, comma-separated, for a
	// job submitted to several).
	Partition string
	QOS       string
	// Top is how many users and jobs each finding lists (default 5).
	Top int
}

// Usage is what a set of jobs held, used and left unused.
type Usage struct {
	Jobs int64
	// CPUHours are the CPU-hours allocated; CPUUsedHours those used, of the
	// CPUMeasuredHours in which use was measured. The same for GPUs.
	CPUHours, CPUUsedHours, CPUMeasuredHours float64
	GPUHours, GPUUsedHours, GPUMeasuredHours float64
	// MemGiBHours is the memory requested (GiB × the jobs' hours); MemUnusedGiBHours
	// the part of it above the jobs' peaks, of the MemMeasuredGiBHours whose peak was
	// measured.
	MemGiBHours, MemUnusedGiBHours, MemMeasuredGiBHours float64
	// LimitCPUHours are the CPU-hours of the jobs' time limits (jobs with one);
	// LimitUnusedCPUHours those the jobs did not run for, ending before their limit.
	LimitCPUHours, LimitUnusedCPUHours float64
	// EnergyKWh is the energy of the EnergyJobs whose energy was measured
	// (docs/metrics.md, Energy).
	EnergyKWh  float64
	EnergyJobs int64
}

// CPUIdleHours are the allocated CPU-hours not used, where use was measured.
func (u Usage) CPUIdleHours() float64 { return max(u.CPUMeasuredHours-u.CPUUsedHours, 0) }

// GPUIdleHours are the allocated GPU-hours in which the GPUs ran nothing, where measured.
func (u Usage) GPUIdleHours() float64 { return max(u.GPUMeasuredHours-u.GPUUsedHours, 0) }

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

// span is the filter's whole UTC days, as roll-up days [from, to).
func (f SiteFilter) span() (from, to int64) {
	from, to = day(f.From), day(f.To)
	if f.To.Unix() > to {
		to += 86400
	}
	return from, to
}

// where is the filter as conditions on a roll-up table with every group column (and
// "day"), or on jobs (j.) with onJobs; with its arguments. A job without an account,
// user, partition or QOS has the empty name in the roll-ups.
func (f SiteFilter) where(prefix string, onJobs bool) (string, []any) {
	from, to := f.span()
	day := prefix + "day"
	who, args := f.narrow(prefix, onJobs)
	return day + " >= ? AND " + day + " < ?" + who, append([]any{from, to}, args...)
}

// narrow is the filter's conditions but its period (each after " AND "), with their
// arguments: its cluster, account, user, partition and QOS, within its scope.
func (f SiteFilter) narrow(prefix string, onJobs bool) (string, []any) {
	// A job's missing name is NULL on its row, "" in the roll-ups; a name asked for
	// compares the column itself, so that its index serves.
	col := func(c string, v ...string) string {
		if onJobs && slices.Contains(v, "") {
			return "coalesce(" + prefix + c + ", '')"
		}
		return prefix + c
	}
	var conds []string
	var args []any
	for _, c := range []struct{ col, v string }{{"cluster", f.Cluster}, {"account", f.Account}, {"user", f.User}, {"partition", f.Partition}, {"qos", f.QOS}} {
		if c.v != "" {
			conds, args = append(conds, col(c.col, c.v)+" = ?"), append(args, c.v)
		}
	}
	if s := f.Scope; !s.All {
		in := []string{"0"} // nobody's: nothing
		if s.User != "" {
			in, args = append(in, col("user", s.User)+" = ?"), append(args, s.User)
		}
		if len(s.Accounts) > 0 {
			in = append(in, col("account", s.Accounts...)+" IN (?"+strings.Repeat(", ?", len(s.Accounts)-1)+")")
			for _, a := range s.Accounts {
				args = append(args, a)
			}
		}
		conds = append(conds, "("+strings.Join(in, " OR ")+")")
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " AND " + strings.Join(conds, " AND "), args
}

// coarse says whether the finding's totals can come from the roll-ups per day and
// cluster (or per user): the filter names no account, partition or QOS, and sees all.
func (f SiteFilter) coarse() bool {
	return f.Account == "" && f.Partition == "" && f.QOS == "" && f.Scope.All
}

// single is the one group column the filter narrows the jobs by, if it narrows them
// by one account, partition or QOS alone (its cluster aside) and sees all ("" if not),
// with its value.
func (f SiteFilter) single() (Dim, string) {
	if !f.Scope.All || f.User != "" {
		return "", ""
	}
	var d Dim
	var v string
	for _, c := range []struct {
		d Dim
		v string
	}{{ByAccount, f.Account}, {ByPartition, f.Partition}, {ByQOS, f.QOS}} {
		if c.v != "" {
			if d != "" {
				return "", ""
			}
			d, v = c.d, c.v
		}
	}
	return d, v
}

// usage is the table the filter's usage sums read, with its conditions: the site's
// figures per day and cluster where the filter names no account, user, partition or QOS
// and sees all, else usage_daily.
func (f SiteFilter) usage() (table, where string, args []any) {
	if f.coarse() && f.User == "" {
		where, args = SiteFilter{From: f.From, To: f.To, Cluster: f.Cluster, Scope: Scope{All: true}}.where("", false)
		return "usage_site_daily", where, args
	}
	where, args = f.where("", false)
	return "usage_daily", where, args
}

// usageSums is the select list of Usage's figures summed over usage_daily's rows, in
// scanUsage's order.
const usageSums = `coalesce(sum(jobs), 0), coalesce(sum(cpu_h), 0), coalesce(sum(cpu_used_h), 0), coalesce(sum(cpu_meas_h), 0),
	coalesce(sum(gpu_h), 0), coalesce(sum(gpu_used_h), 0), coalesce(sum(gpu_meas_h), 0),
	coalesce(sum(mem_gbh), 0), coalesce(sum(mem_unused_gbh), 0), coalesce(sum(mem_meas_gbh), 0),
	coalesce(sum(limit_cpu_h), 0), coalesce(sum(limit_unused_cpu_h), 0), coalesce(sum(energy_kwh), 0), coalesce(sum(energy_jobs), 0)`

// scanUsage reads usageSums after the extra destinations.
func scanUsage(r scanner, u *Usage, extra ...any) error {
	return r.Scan(append(extra, &u.Jobs, &u.CPUHours, &u.CPUUsedHours, &u.CPUMeasuredHours, &u.GPUHours, &u.GPUUsedHours,
		&u.GPUMeasuredHours, &u.MemGiBHours, &u.MemUnusedGiBHours, &u.MemMeasuredGiBHours, &u.LimitCPUHours, &u.LimitUnusedCPUHours,
		&u.EnergyKWh, &u.EnergyJobs)...)
}

// Rollups reads the site's figures from the daily roll-ups: a period's totals and
// findings (Site), per group (By) and per week (Weeks).
type Rollups struct{ s *Store }

// Rollups is the store's reader of the site's figures.
func (s *Store) Rollups() Rollups { return Rollups{s} }

// Site sums the daily roll-ups the filter selects: exact at any number of jobs (every
// stored report is in them, and they outlive the reports by their own retention),
// reading days, not jobs. The findings' top jobs come from the jobs still kept.
func (r Rollups) Site(ctx context.Context, f SiteFilter) (*Site, error) {
	s := r.s
	if f.Top <= 0 {
		f.Top = 5
	}
	from, to := f.span()
	out := &Site{From: time.Unix(from, 0).UTC(), To: time.Unix(to, 0).UTC()}
	table, where, args := f.usage()
	if err := scanUsage(s.r.QueryRowContext(ctx, `SELECT `+usageSums+` FROM `+table+` WHERE `+where, args...), &out.Usage); err != nil {
		return nil, fmt.Errorf("store: site: %w", err)
	}
	var err error
	if out.Findings, err = r.findingTotals(ctx, f); err != nil {
		return nil, fmt.Errorf("store: site: %w", err)
	}
	if err := r.tops(ctx, f, out.Findings); err != nil {
		return nil, fmt.Errorf("store: site: %w", err)
	}
	return out, nil
}

// findingTotals are the findings' totals, costliest first: from the roll-ups per day and
// cluster, a user's (by their own index), or one account's, partition's or QOS's,
// where the filter allows; else from the roll-ups with every group column.
func (r Rollups) findingTotals(ctx context.Context, f SiteFilter) ([]FindingCost, error) {
	table, where, args := `findings_daily d`, "", []any(nil)
	sd, sv := f.single()
	switch {
	case f.coarse() && f.User == "":
		table = `findings_site_daily d`
		where, args = SiteFilter{From: f.From, To: f.To, Cluster: f.Cluster, Scope: Scope{All: true}}.where("d.", false)
	case f.coarse():
		table = `finding_users_daily d INDEXED BY finding_users_daily_user`
		where, args = SiteFilter{From: f.From, To: f.To, Cluster: f.Cluster, User: f.User, Scope: Scope{All: true}}.where("d.", false)
	case sd != "":
		// One account, partition or QOS: its own roll-up.
		table = `findings_by_daily d`
		where, args = SiteFilter{From: f.From, To: f.To, Cluster: f.Cluster, Scope: Scope{All: true}}.where("d.", false)
		where, args = "d.dim = ? AND d.value = ? AND "+where, append([]any{string(sd), sv}, args...)
	default:
		where, args = f.where("d.", false)
	}
	rows, err := r.s.r.QueryContext(ctx, `SELECT g.finding, coalesce(n.name, g.finding), g.jobs, g.cpu_h, g.gpu_h
		FROM (SELECT d.finding, sum(d.jobs) AS jobs, sum(d.cpu_h) AS cpu_h, sum(d.gpu_h) AS gpu_h FROM `+table+`
			WHERE `+where+` GROUP BY d.finding) g
		LEFT JOIN finding_names n ON n.finding = g.finding ORDER BY g.cpu_h DESC, g.finding`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []FindingCost
	for rows.Next() {
		var c FindingCost
		if err := rows.Scan(&c.Key, &c.Name, &c.Jobs, &c.CPUHours, &c.GPUHours); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// tops fills the findings' top users and jobs, the findings side by side on the store's
// read connections; the top jobs of a user's, an account's or a scope's jobs in one
// query for every finding (topJobsAll), else a finding's from its costliest jobs down.
func (r Rollups) tops(ctx context.Context, f SiteFilter, cs []FindingCost) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.s.readConns)
	if f.selective() {
		g.Go(func() error { return r.topJobsAll(gctx, f, cs) })
	}
	for i := range cs {
		g.Go(func() error {
			if err := r.topUsers(gctx, &cs[i], f); err != nil {
				return fmt.Errorf("%s: %w", cs[i].Key, err)
			}
			if f.selective() {
				return nil
			}
			if err := r.topJobs(gctx, &cs[i], f); err != nil {
				return fmt.Errorf("%s: %w", cs[i].Key, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// selective says whether the filter narrows the jobs to a user's (a user who sees their
// own alone), which their own index finds: a few thousand jobs a week, where a
// finding's costliest jobs would be read down a long way before five were theirs. An
// account's jobs are too many to read whole (a fortieth of the million-job benchmark's
// week) and are met soon enough from the costliest down.
func (f SiteFilter) selective() bool {
	return f.User != "" || (!f.Scope.All && len(f.Scope.Accounts) == 0 && f.Account == "")
}

// topUsers fills a finding's top users, from the roll-ups.
func (r Rollups) topUsers(ctx context.Context, c *FindingCost, f SiteFilter) error {
	table := `findings_daily`
	where, args := f.where("", false)
	if f.coarse() {
		table = `finding_users_daily`
		where, args = SiteFilter{From: f.From, To: f.To, Cluster: f.Cluster, User: f.User, Scope: Scope{All: true}}.where("", false)
	}
	rows, err := r.s.r.QueryContext(ctx, `SELECT user, sum(cpu_h), sum(gpu_h) FROM `+table+`
		WHERE finding = ? AND `+where+` GROUP BY user ORDER BY sum(cpu_h) DESC, user LIMIT ?`, append(append([]any{c.Key}, args...), f.Top)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var u UserCost
		if err := rows.Scan(&u.User, &u.CPUHours, &u.GPUHours); err != nil {
			return err
		}
		c.Users = append(c.Users, u)
	}
	return rows.Err()
}

// jobsWhere is the filter's conditions on a job (j) and its finding's row (f): the
// finding's day in the period, and the job's cluster, account, user, partition and QOS.
func (f SiteFilter) jobsWhere() (string, []any) {
	from, to := f.span()
	who, args := f.narrow("j.", true)
	return "f.day >= ? AND f.day < ?" + who, append([]any{from, to}, args...)
}

// topJobs fills a finding's top jobs from the jobs kept, its costliest first (by its
// index, read backwards: ties go to the newer job, whose key the index holds after the
// hours, so that neither SQLite nor MariaDB sorts the finding's rows: with the older job
// first MariaDB sorted them, 0.4-1 s a finding at a million jobs).
func (r Rollups) topJobs(ctx context.Context, c *FindingCost, f SiteFilter) error {
	where, args := f.jobsWhere()
	rows, err := r.s.r.QueryContext(ctx, `SELECT `+jobColumns+`, f.cpu_h, f.gpu_h
		FROM job_findings f JOIN jobs j ON j.key = f.job
		WHERE f.finding = ? AND `+where+`
		ORDER BY f.cpu_h DESC, f.job DESC LIMIT ?`, append(append([]any{c.Key}, args...), f.Top)...)
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

// topJobsAll fills every finding's top jobs at once, from the filter's jobs (found by
// their user's or account's index, those that ended since the period began: a job's day
// is that of its end, which is never after its row's last update).
func (r Rollups) topJobsAll(ctx context.Context, f SiteFilter, cs []FindingCost) error {
	at := make(map[string]*FindingCost, len(cs))
	for i := range cs {
		at[cs[i].Key] = &cs[i]
	}
	from, _ := f.span()
	where, args := f.jobsWhere()
	rows, err := r.s.r.QueryContext(ctx, `SELECT `+jobColumns+`, t.cpu_h, t.gpu_h, t.finding FROM (
			SELECT f.job, f.finding, f.cpu_h, f.gpu_h, row_number() OVER (PARTITION BY f.finding ORDER BY f.cpu_h DESC, f.job DESC) AS rn
			FROM jobs j JOIN job_findings f ON f.job = j.key
			WHERE coalesce(j.end_ts, j.updated_ts) >= ? AND `+where+`) t
		JOIN jobs j ON j.key = t.job WHERE t.rn <= ? ORDER BY t.finding, t.rn`, append(append([]any{from}, args...), f.Top)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var jc JobCost
		var key string
		var err error
		if jc.Job, err = scanJob(rows, &jc.CPUHours, &jc.GPUHours, &key); err != nil {
			return err
		}
		if c := at[key]; c != nil {
			c.TopJobs = append(c.TopJobs, jc)
		}
	}
	return rows.Err()
}
