package siteview

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// cell is a value as CSV and text give it: numbers in full (CSV) or to a few digits
// (text), lists as "name (hours), ...".
func cell(v any, exact bool) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return itoa(x)
	case float64:
		if exact {
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
		return hours(x)
	case []Named:
		return listText(x)
	}
	return fmt.Sprint(v)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// hours says a number of hours to a few digits: 1234, 12.5, 0.25, 0.0042.
func hours(h float64) string {
	switch {
	case h == 0:
		return "0"
	case h >= 100 || h <= -100:
		return strconv.FormatFloat(h, 'f', 0, 64)
	}
	return strconv.FormatFloat(h, 'g', 3, 64)
}

// WriteCSV writes a table as CSV (RFC 4180): a header of its columns, then its rows;
// text as it is (commas, quotes and newlines quoted, nothing changed), numbers in full.
func WriteCSV(w io.Writer, t Table) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(t.Columns); err != nil {
		return err
	}
	rec := make([]string, len(t.Columns))
	for _, row := range t.Rows {
		for i, v := range row {
			rec[i] = cell(v, true)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes a table as a JSON array of objects, one per row, keys in the
// columns' order; lists as arrays of {name, cpu_hours, gpu_hours}.
func WriteJSON(w io.Writer, t Table) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("[")
	for r, row := range t.Rows {
		if r > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n  {")
		for i, v := range row {
			if i > 0 {
				bw.WriteString(", ")
			}
			k, _ := json.Marshal(t.Columns[i])
			if l, ok := v.([]Named); ok && l == nil {
				v = []Named{}
			}
			val, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("%s: %w", t.Columns[i], err)
			}
			bw.Write(k)
			bw.WriteString(": ")
			bw.Write(val)
		}
		bw.WriteString("}")
	}
	if len(t.Rows) > 0 {
		bw.WriteString("\n")
	}
	bw.WriteString("]\n")
	return bw.Flush()
}

// WriteText writes a table for a terminal: the columns named, aligned, numbers to a few
// digits; only the columns named in cols (all when none).
func WriteText(w io.Writer, t Table, cols ...string) error {
	idx := make([]int, 0, len(t.Columns))
	if len(cols) == 0 {
		for i := range t.Columns {
			idx = append(idx, i)
		}
	}
	for _, c := range cols {
		if i := t.Column(c); i >= 0 {
			idx = append(idx, i)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := make([]string, len(idx))
	for k, i := range idx {
		head[k] = t.Columns[i]
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, row := range t.Rows {
		vals := make([]string, len(idx))
		for k, i := range idx {
			// One line per row: a name's control characters are shown escaped.
			vals[k] = printable(cell(row[i], false))
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	return tw.Flush()
}

// printable replaces control characters (a newline in a job's name) and tabs with their
// Go escapes, so that a name cannot break a terminal's table or forge a line.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// WriteSummary writes the view for a terminal: the period and its totals, the groups,
// and the findings that cost the most.
func WriteSummary(w io.Writer, v *View, who string) error {
	u := v.Site.Usage
	q := v.Query
	fmt.Fprintf(w, "persyst site: jobs that ended %s (%s), %s.\n", q.Period, q.Period.Name, who)
	for _, f := range []struct{ name, v string }{{"cluster", q.Cluster}, {"account", q.Account}, {"user", q.User}, {"partition", q.Partition}, {"qos", q.QOS}} {
		if f.v != "" {
			fmt.Fprintf(w, "  %s %s\n", f.name, printable(f.v))
		}
	}
	fmt.Fprintf(w, "%d jobs. CPU-hours: %s allocated, %s used, %s idle%s.\n", u.Jobs, hours(u.CPUHours), hours(u.CPUUsedHours), hours(u.CPUIdleHours()), measured(u.CPUMeasuredHours, u.CPUHours))
	if u.GPUHours > 0 {
		fmt.Fprintf(w, "GPU-hours: %s allocated, %s used, %s idle%s.\n", hours(u.GPUHours), hours(u.GPUUsedHours), hours(u.GPUIdleHours()), measured(u.GPUMeasuredHours, u.GPUHours))
	}
	if u.MemGiBHours > 0 {
		fmt.Fprintf(w, "Memory: %s GiB-hours requested, %s never used%s.\n", hours(u.MemGiBHours), hours(u.MemUnusedGiBHours), measured(u.MemMeasuredGiBHours, u.MemGiBHours))
	}
	if u.LimitCPUHours > 0 {
		fmt.Fprintf(w, "Time limits: %s CPU-hours requested, %s not run (the jobs ended earlier).\n", hours(u.LimitCPUHours), hours(u.LimitUnusedCPUHours))
	}
	if u.EnergyJobs > 0 {
		fmt.Fprintf(w, "Energy: %s kWh, of %s whose energy was measured.\n", hours(u.EnergyKWh), countJobs(u.EnergyJobs))
	}
	fmt.Fprintf(w, "\nBy %s (most hours first):\n", q.By)
	if err := WriteText(w, v.GroupsTable(), string(q.By), "jobs", "cpu_hours", "cpu_idle_hours", "gpu_hours", "gpu_idle_hours",
		"mem_unused_gib_hours", "limit_unused_cpu_hours", "energy_kwh", "top_finding"); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nFindings that cost the most hours:\n")
	if err := WriteText(w, v.FindingsTable(), "finding", "jobs", "cpu_hours", "gpu_hours", "top_users", "top_jobs"); err != nil {
		return err
	}
	if len(v.Running) > 0 {
		fmt.Fprintf(w, "\nRunning now, holding what they do not use (their users were told):\n")
		return WriteText(w, v.RunningTable(), "job_id", "user", "account", "cpus", "gpus", "reason", "since", "idle_hours", "node")
	}
	return nil
}

// measured says what part of the hours use was measured in, where not all.
func measured(meas, all float64) string {
	if all <= 0 || meas >= all*0.999 {
		return ""
	}
	return fmt.Sprintf(" (of the %s measured)", hours(meas))
}
