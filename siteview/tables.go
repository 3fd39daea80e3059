package siteview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
)

// Table is one of the view's tables: named columns, and rows of values (strings,
// integers, floats, or lists of Named for a cell that lists several).
type Table struct {
	Name    string
	Columns []string
	Rows    [][]any
}

// Named is an entry of a list cell: a user or job, and the hours it stands for.
type Named struct {
	Name     string  `json:"name"`
	CPUHours float64 `json:"cpu_hours"`
	GPUHours float64 `json:"gpu_hours"`
}

// usageColumns are Usage's columns, in usageCells' order.
var usageColumns = []string{"jobs", "cpu_hours", "cpu_used_hours", "cpu_idle_hours", "cpu_measured_hours",
	"gpu_hours", "gpu_used_hours", "gpu_idle_hours", "gpu_measured_hours",
	"mem_gib_hours", "mem_unused_gib_hours", "mem_measured_gib_hours", "limit_cpu_hours", "limit_unused_cpu_hours",
	"energy_kwh", "energy_jobs"}

func usageCells(u store.Usage) []any {
	return []any{u.Jobs, u.CPUHours, u.CPUUsedHours, u.CPUIdleHours(), u.CPUMeasuredHours,
		u.GPUHours, u.GPUUsedHours, u.GPUIdleHours(), u.GPUMeasuredHours,
		u.MemGiBHours, u.MemUnusedGiBHours, u.MemMeasuredGiBHours, u.LimitCPUHours, u.LimitUnusedCPUHours,
		u.EnergyKWh, u.EnergyJobs}
}

// day formats a day as the tables do.
func day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Groups is the table of the view's groups: the period, the group, its figures and its
// costliest finding.
func (v *View) GroupsTable() Table {
	cols := append(append([]string{"from", "to", string(v.Query.By)}, usageColumns...), "top_finding", "top_finding_cpu_hours", "top_finding_gpu_hours")
	t := Table{Name: "by " + string(v.Query.By), Columns: cols}
	for _, g := range v.Groups {
		row := append([]any{day(v.Query.Period.From), day(v.Query.Period.Last()), g.Name}, usageCells(g.Usage)...)
		if g.Top != nil {
			row = append(row, g.Top.Key, g.Top.CPUHours, g.Top.GPUHours)
		} else {
			row = append(row, "", 0.0, 0.0)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// TotalTable is the period's totals: one row.
func (v *View) TotalTable() Table {
	cols := append([]string{"from", "to"}, usageColumns...)
	return Table{Name: "total", Columns: cols, Rows: [][]any{append([]any{day(v.Query.Period.From), day(v.Query.Period.Last())}, usageCells(v.Site.Usage)...)}}
}

// FindingsTable is the findings that cost the most hours, with their top users and jobs.
func (v *View) FindingsTable() Table {
	t := Table{Name: "findings", Columns: []string{"from", "to", "finding", "name", "jobs", "cpu_hours", "gpu_hours", "top_users", "top_jobs"}}
	for _, f := range v.Site.Findings {
		var users, jobs []Named
		for _, u := range f.Users {
			users = append(users, Named{Name: u.User, CPUHours: u.CPUHours, GPUHours: u.GPUHours})
		}
		for _, j := range f.TopJobs {
			jobs = append(jobs, Named{Name: jobName(j.Job), CPUHours: j.CPUHours, GPUHours: j.GPUHours})
		}
		t.Rows = append(t.Rows, []any{day(v.Query.Period.From), day(v.Query.Period.Last()), f.Key, f.Name, f.Jobs, f.CPUHours, f.GPUHours, users, jobs})
	}
	return t
}

// jobName names a job in a list: its Slurm id, with its cluster where it has one.
func jobName(j store.Job) string {
	id := itoa(int64(j.ID))
	if j.Cluster != "" {
		return j.Cluster + ":" + id
	}
	return id
}

// WeeksTable is the trend: each week's figures.
func (v *View) WeeksTable() Table {
	t := Table{Name: "weeks", Columns: append([]string{"week"}, usageColumns...)}
	for _, w := range v.Weeks {
		t.Rows = append(t.Rows, append([]any{day(w.From)}, usageCells(w.Usage)...))
	}
	return t
}

// JobsTable lists jobs with their figures.
func JobsTable(list []store.Listed) Table {
	cols := append([]string{"cluster", "job_id", "name", "user", "account", "partition", "qos", "state", "start", "end", "cpus", "gpus"},
		append(usageColumns[1:], "top_finding")...)
	t := Table{Name: "jobs", Columns: cols}
	for _, l := range list {
		j := l.Job
		var u store.Usage
		top := ""
		if l.Summary != nil {
			u, top = l.Summary.Usage, l.Summary.TopKey
		}
		row := []any{j.Cluster, int64(j.ID), j.JobName, j.User, j.Account, j.Partition, j.QOS, j.State, stamp(j.Start), stamp(j.End), int64(j.CPUs), int64(j.GPUs)}
		row = append(append(row, usageCells(u)[1:]...), top)
		t.Rows = append(t.Rows, row)
	}
	return t
}

// RunningTable lists the running jobs that hold what they do not use: the reason, since
// when it held, when the user was told, and the end of the latest interval it held in.
func (v *View) RunningTable() Table {
	t := Table{Name: "running", Columns: []string{"cluster", "job_id", "name", "user", "account", "partition", "qos", "cpus", "gpus",
		"reason", "what", "since", "told", "seen_until", "idle_hours", "node"}}
	for _, r := range v.Running {
		j := r.Job
		t.Rows = append(t.Rows, []any{j.Cluster, int64(j.ID), j.JobName, j.User, j.Account, j.Partition, j.QOS, int64(j.CPUs), int64(j.GPUs),
			r.Reason, digest.NoticeSubject(r.Reason), stamp(r.Since), stamp(r.Told), stamp(r.SeenUntil), r.SeenUntil.Sub(r.Since).Hours(), r.Node})
	}
	return t
}

// stamp is a time as the tables give it ("" when unknown).
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// Column returns the index of a column, or -1.
func (t Table) Column(name string) int {
	for i, c := range t.Columns {
		if c == name {
			return i
		}
	}
	return -1
}

// listText is a list cell as one text: "alice (12.5), bob (3)".
func listText(l []Named) string {
	var b strings.Builder
	for i, n := range l {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n.Name + " (" + hours(n.CPUHours+n.GPUHours) + ")")
	}
	return b.String()
}

// ErrNoTable is the error of a table name Named does not know.
var ErrNoTable = errors.New("want groups, total, findings, weeks, jobs or running")

// TableNames are the tables Named knows, in the order the view shows them.
var TableNames = []string{"groups", "total", "findings", "weeks", "jobs", "running"}

// Named returns the view's table of a name: groups ("" too), total, findings, weeks,
// jobs (the query's jobs within scope, read from st, at most store.MaxListed), or
// running.
func (v *View) Named(ctx context.Context, st *store.Store, scope store.Scope, name string) (Table, error) {
	switch name {
	case "", "groups":
		return v.GroupsTable(), nil
	case "total":
		return v.TotalTable(), nil
	case "findings":
		return v.FindingsTable(), nil
	case "weeks":
		return v.WeeksTable(), nil
	case "running":
		return v.RunningTable(), nil
	case "jobs":
		list, err := Jobs(ctx, st, v.Query, scope, store.MaxListed)
		if err != nil {
			return Table{}, err
		}
		return JobsTable(list), nil
	}
	return Table{}, fmt.Errorf("table %q: %w", name, ErrNoTable)
}
