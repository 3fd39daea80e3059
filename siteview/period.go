package siteview

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Period is a stretch of whole UTC days, [From, To): the jobs that ended in it are
// summed.
type Period struct {
	From, To time.Time
	// Name is how the period was asked for ("2026-Q3", "month", "2026-11-01..2026-11-30").
	Name string
}

// Last is the period's last day.
func (p Period) Last() time.Time { return p.To.AddDate(0, 0, -1) }

// String says the period as its days.
func (p Period) String() string {
	return p.From.Format(time.DateOnly) + " to " + p.Last().Format(time.DateOnly)
}

// ParsePeriod reads a period: "week", "month", "quarter" or "year" (the one that holds
// now, up to today), "last-week", "last-month", "last-quarter", "last-year" (the whole
// one before), "7d" or "90d" (that many days up to today), or a named one: "2026"
// (a year), "2026-Q3" (a quarter), "2026-11" (a month), "2026-W48" (an ISO week),
// "2026-11-03" (a day), "2026-10-01..2026-12-31" (days, both included).
func ParsePeriod(s string, now time.Time) (Period, error) {
	now = now.UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	p, err := parsePeriod(strings.TrimSpace(s), today)
	if err != nil {
		return Period{}, fmt.Errorf("period %q: %w", s, err)
	}
	if !p.To.After(p.From) {
		return Period{}, fmt.Errorf("period %q: ends before it begins", s)
	}
	if p.To.Sub(p.From) > 10*366*24*time.Hour {
		return Period{}, fmt.Errorf("period %q: longer than 10 years", s)
	}
	p.Name = s
	return p, nil
}

func parsePeriod(s string, today time.Time) (Period, error) {
	tomorrow := today.AddDate(0, 0, 1)
	y, m, _ := today.Date()
	weekStart := today.AddDate(0, 0, -((int(today.Weekday()) + 6) % 7))
	monthStart := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	quarterStart := time.Date(y, m-(m-1)%3, 1, 0, 0, 0, 0, time.UTC)
	yearStart := time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
	switch s {
	case "week":
		return Period{From: weekStart, To: tomorrow}, nil
	case "month":
		return Period{From: monthStart, To: tomorrow}, nil
	case "quarter":
		return Period{From: quarterStart, To: tomorrow}, nil
	case "year":
		return Period{From: yearStart, To: tomorrow}, nil
	case "last-week":
		return Period{From: weekStart.AddDate(0, 0, -7), To: weekStart}, nil
	case "last-month":
		return Period{From: monthStart.AddDate(0, -1, 0), To: monthStart}, nil
	case "last-quarter":
		return Period{From: quarterStart.AddDate(0, -3, 0), To: quarterStart}, nil
	case "last-year":
		return Period{From: yearStart.AddDate(-1, 0, 0), To: yearStart}, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 || days > 3660 {
			return Period{}, fmt.Errorf("want 1d to 3660d")
		}
		return Period{From: tomorrow.AddDate(0, 0, -days), To: tomorrow}, nil
	}
	if a, b, ok := strings.Cut(s, ".."); ok {
		from, err := time.Parse(time.DateOnly, a)
		if err != nil {
			return Period{}, fmt.Errorf("want YYYY-MM-DD..YYYY-MM-DD")
		}
		last, err := time.Parse(time.DateOnly, b)
		if err != nil {
			return Period{}, fmt.Errorf("want YYYY-MM-DD..YYYY-MM-DD")
		}
		return Period{From: from, To: last.AddDate(0, 0, 1)}, nil
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		return Period{From: d, To: d.AddDate(0, 0, 1)}, nil
	}
	if d, err := time.Parse("2006-01", s); err == nil {
		return Period{From: d, To: d.AddDate(0, 1, 0)}, nil
	}
	if d, err := time.Parse("2006", s); err == nil {
		return Period{From: d, To: d.AddDate(1, 0, 0)}, nil
	}
	if ys, q, ok := strings.Cut(s, "-Q"); ok {
		year, err1 := strconv.Atoi(ys)
		n, err2 := strconv.Atoi(q)
		if err1 != nil || err2 != nil || n < 1 || n > 4 || year < 1970 || year > 9999 {
			return Period{}, fmt.Errorf("want a quarter such as 2026-Q3")
		}
		from := time.Date(year, time.Month(3*n-2), 1, 0, 0, 0, 0, time.UTC)
		return Period{From: from, To: from.AddDate(0, 3, 0)}, nil
	}
	if ys, w, ok := strings.Cut(s, "-W"); ok {
		year, err1 := strconv.Atoi(ys)
		n, err2 := strconv.Atoi(w)
		if err1 != nil || err2 != nil || n < 1 || n > 53 || year < 1970 || year > 9999 {
			return Period{}, fmt.Errorf("want an ISO week such as 2026-W48")
		}
		// ISO week 1 holds January 4th.
		jan4 := time.Date(year, 1, 4, 0, 0, 0, 0, time.UTC)
		from := jan4.AddDate(0, 0, -((int(jan4.Weekday())+6)%7)+7*(n-1))
		if wy, _ := from.ISOWeek(); wy != year {
			return Period{}, fmt.Errorf("%d has no week %d", year, n)
		}
		return Period{From: from, To: from.AddDate(0, 0, 7)}, nil
	}
	return Period{}, fmt.Errorf("want week, month, quarter, year, last-month (...), 30d, 2026, 2026-Q3, 2026-11, 2026-W48, 2026-11-03 or FROM..TO")
}
