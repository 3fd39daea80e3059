package store

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
)

// Dim is what the site's figures are grouped by: a column every roll-up row has.
type Dim string

// The dimensions the site's figures are grouped by.
const (
	ByCluster   Dim = "cluster"
	ByAccount   Dim = "account"
	ByUser      Dim = "user"
	ByPartition Dim = "partition"
	ByQOS       Dim = "qos"
)

// ParseDim reads a dimension's name.
func ParseDim(s string) (Dim, error) {
	switch d := Dim(s); d {
	case ByCluster, ByAccount, ByUser, ByPartition, ByQOS:
		return d, nil
	}
	return "", fmt.Errorf("%q: want cluster, account, user, partition or qos", s)
}

// Group is one account's (user's, partition's, ...) figures: what its jobs held, used and
// left unused, and the finding that cost it the most CPU-hours (nil: none).
type Group struct {
	Name string // "" for jobs without one (no account, no QOS)
	Usage
	Top *FindingCost
}

// By sums the roll-ups the filter selects per value of d, the groups holding the most
// CPU-hours first; their sums and their costliest findings are read side by side.
func (r Rollups) By(ctx context.Context, f SiteFilter, d Dim) ([]Group, error) {
	if _, err := ParseDim(string(d)); err != nil {
		return nil, fmt.Errorf("store: site by %w", err)
	}
	var out []Group
	var tops map[string]*FindingCost
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { out, err = r.groups(gctx, f, d); return err })
	g.Go(func() (err error) { tops, err = r.groupTops(gctx, f, d); return err })
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("store: site by %s: %w", d, err)
	}
	for i := range out {
		out[i].Top = tops[out[i].Name]
	}
	return out, nil
}

// groups sums the usage roll-ups per value of d, the most CPU- and GPU-hours first.
func (r Rollups) groups(ctx context.Context, f SiteFilter, d Dim) ([]Group, error) {
	col := string(d)
	table, where, args := "usage_daily", "", []any(nil)
	if d == ByCluster {
		table, where, args = f.usage()
	} else {
		where, args = f.where("", false)
	}
	rows, err := r.s.r.QueryContext(ctx, `SELECT `+col+`, `+usageSums+` FROM `+table+` WHERE `+where+`
		GROUP BY `+col+` ORDER BY sum(cpu_h) + sum(gpu_h) DESC, `+col, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Group
	for rows.Next() {
		var g Group
		if err := scanUsage(rows, &g.Usage, &g.Name); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// groupTops is each value of d's costliest finding (CPU- and GPU-hours, then the
// finding's key).
func (r Rollups) groupTops(ctx context.Context, f SiteFilter, d Dim) (map[string]*FindingCost, error) {
	table, col, where, args := groupFindings(f, d)
	rows, err := r.s.r.QueryContext(ctx, `SELECT g.v, g.finding, coalesce(n.name, g.finding), g.jobs, g.cpu_h, g.gpu_h
		FROM (SELECT d.`+col+` AS v, d.finding, sum(d.jobs) AS jobs, sum(d.cpu_h) AS cpu_h, sum(d.gpu_h) AS gpu_h,
				row_number() OVER (PARTITION BY d.`+col+` ORDER BY sum(d.cpu_h) + sum(d.gpu_h) DESC, d.finding) AS rn
			FROM `+table+` d WHERE `+where+` GROUP BY d.`+col+`, d.finding) g
		LEFT JOIN finding_names n ON n.finding = g.finding WHERE g.rn = 1`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*FindingCost{}
	for rows.Next() {
		var name string
		var c FindingCost
		if err := rows.Scan(&name, &c.Key, &c.Name, &c.Jobs, &c.CPUHours, &c.GPUHours); err != nil {
			return nil, err
		}
		out[name] = &c
	}
	return out, rows.Err()
}

// groupFindings is where By reads the groups' findings by d, with its column of d and
// the filter's conditions: where the filter narrows the jobs by nothing but their
// period and cluster, the roll-up of d alone (findings_by_daily; the site's per cluster,
// findings_site_daily), else findings_daily (every group column).
func groupFindings(f SiteFilter, d Dim) (table, col, where string, args []any) {
	if !f.coarse() || f.User != "" {
		where, args = f.where("d.", false)
		return "findings_daily", string(d), where, args
	}
	where, args = SiteFilter{From: f.From, To: f.To, Cluster: f.Cluster, Scope: Scope{All: true}}.where("d.", false)
	if d == ByCluster {
		return "findings_site_daily", "cluster", where, args
	}
	return "findings_by_daily", "value", "d.dim = ? AND " + where, append([]any{string(d)}, args...)
}

// Week is a week's figures (From: its Monday, 00:00 UTC).
type Week struct {
	From time.Time
	Usage
}

// Weeks sums the roll-ups the filter selects per week (Monday to Sunday, UTC): every
// week from the one of f.From to the one before f.To's end, empty weeks included.
func (r Rollups) Weeks(ctx context.Context, f SiteFilter) ([]Week, error) {
	// 1970-01-01 was a Thursday: a day's Monday is 3 days after the last multiple of 7
	// days (in integers alone: MariaDB's / gives decimals).
	const week = `(day - (day + 259200) % 604800)`
	table, where, args := f.usage()
	rows, err := r.s.r.QueryContext(ctx, `SELECT `+week+`, `+usageSums+` FROM `+table+` WHERE `+where+`
		GROUP BY `+week+` ORDER BY `+week, args...)
	if err != nil {
		return nil, fmt.Errorf("store: site by week: %w", err)
	}
	defer rows.Close()
	got := map[int64]Usage{}
	for rows.Next() {
		var w int64
		var u Usage
		if err := scanUsage(rows, &u, &w); err != nil {
			return nil, fmt.Errorf("store: site by week: %w", err)
		}
		got[w] = u
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: site by week: %w", err)
	}
	from, to := f.span()
	var out []Week
	for w := monday(from); w < to; w += 7 * 86400 {
		out = append(out, Week{From: time.Unix(w, 0).UTC(), Usage: got[w]})
	}
	return out, nil
}

// monday is the start of the week (Monday, UTC) of the day d (Unix seconds).
func monday(d int64) int64 { return d - ((d/86400+3)%7)*86400 }
