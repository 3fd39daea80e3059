package store

import (
	"context"
	"fmt"
	"time"
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
// CPU-hours first.
func (r Rollups) By(ctx context.Context, f SiteFilter, d Dim) ([]Group, error) {
	if _, err := ParseDim(string(d)); err != nil {
		return nil, fmt.Errorf("store: site by %w", err)
	}
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
		return nil, fmt.Errorf("store: site by %s: %w", d, err)
	}
	var out []Group
	at := map[string]int{}
	for rows.Next() {
		var g Group
		if err := scanUsage(rows, &g.Usage, &g.Name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: site by %s: %w", d, err)
		}
		at[g.Name] = len(out)
		out = append(out, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: site by %s: %w", d, err)
	}
	// Each group's costliest finding.
	where, args = f.where("d.", false)
	rows, err = r.s.r.QueryContext(ctx, `SELECT d.`+col+`, d.finding, coalesce(n.name, d.finding), sum(d.jobs), sum(d.cpu_h), sum(d.gpu_h)
		FROM findings_daily d LEFT JOIN finding_names n ON n.finding = d.finding
		WHERE `+where+` GROUP BY d.`+col+`, d.finding`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: site by %s: %w", d, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var c FindingCost
		if err := rows.Scan(&name, &c.Key, &c.Name, &c.Jobs, &c.CPUHours, &c.GPUHours); err != nil {
			return nil, fmt.Errorf("store: site by %s: %w", d, err)
		}
		i, ok := at[name]
		if !ok {
			continue
		}
		if t := out[i].Top; t == nil || c.CPUHours+c.GPUHours > t.CPUHours+t.GPUHours ||
			c.CPUHours+c.GPUHours == t.CPUHours+t.GPUHours && c.Key < t.Key {
			out[i].Top = &c
		}
	}
	return out, rows.Err()
}

// Week is a week's figures (From: its Monday, 00:00 UTC).
type Week struct {
	From time.Time
	Usage
}

// Weeks sums the roll-ups the filter selects per week (Monday to Sunday, UTC): every
// week from the one of f.From to the one before f.To's end, empty weeks included.
func (r Rollups) Weeks(ctx context.Context, f SiteFilter) ([]Week, error) {
	const week = `(day - ((day / 86400 + 3) % 7) * 86400)` // 1970-01-01 was a Thursday
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
