package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/config"
)

// runDb is `persyst db ACTION`: the tree's database for admins.
func runDb(ctx context.Context, io stdio, args []string) error {
	if len(args) == 0 {
		return usagef("persyst db stats|check|prune|vacuum|export --db PATH")
	}
	action := args[0]
	fs := flagSet("db "+action, io)
	db := fs.String("db", "/var/lib/persyst/frontend.db", "the tree's database (the frontend's, a collector's or a sync agent's)")
	confPath := fs.String("config", config.DefaultFile(), "persyst.conf (the retention of prune)")
	var cycles, jobs, rollups days
	var from, to dateFlag
	switch action {
	case "stats", "check", "vacuum":
	case "prune":
		fs.Var(&cycles, "cycles", "keep per-cycle results this long after a job's end (default: persyst.conf's CollectorRetention)")
		fs.Var(&jobs, "jobs", "keep jobs and reports this long (default: JobRetention)")
		fs.Var(&rollups, "rollups", "keep the daily roll-ups this long (default: RollupRetention)")
	case "export":
		fs.Var(&from, "from", "the first day (YYYY-MM-DD, UTC; default: 7 days ago)")
		fs.Var(&to, "to", "the day after the last (default: tomorrow)")
	default:
		return usagef("persyst db %s: want stats, check, prune, vacuum or export", action)
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	st, err := store.Open(ctx, *db, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	switch action {
	case "stats":
		s, err := st.Stats(ctx)
		if err != nil {
			return err
		}
		return s.Write(io.out)
	case "check":
		problems, err := st.Check(ctx)
		if err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintln(io.out, p)
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s: %d problems", *db, len(problems))
		}
		fmt.Fprintf(io.out, "%s: no problems found\n", *db)
		return nil
	case "vacuum":
		return st.Vacuum(ctx)
	case "prune":
		conf, err := loadConfig(*confPath)
		if err != nil {
			return err
		}
		r := store.Retention{Cycles: cycles.or(conf.CollectorRetention), Jobs: jobs.or(conf.JobRetention), Rollups: rollups.or(conf.RollupRetention)}
		p, err := st.Prune(ctx, time.Now(), r)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "pruned: cycles of %d jobs (%d rows), %d jobs, %d roll-up rows, %d episodes\n", p.CycleJobs, p.CycleRows, p.Jobs, p.RollupRows, p.EpisodeRows)
		return nil
	default: // export
		now := time.Now().UTC()
		f, t := from.or(now.AddDate(0, 0, -7).Truncate(24*time.Hour)), to.or(now.Truncate(24*time.Hour).AddDate(0, 0, 1))
		if !t.After(f) {
			return usagef("--to %s is not after --from %s", t.Format(time.DateOnly), f.Format(time.DateOnly))
		}
		_, err := st.Export(ctx, f, t, io.out)
		return err
	}
}

// days is a duration flag in persyst.conf's form (30d, 12h).
type days struct{ d time.Duration }

func (d *days) String() string { return d.d.String() }
func (d *days) Set(v string) (err error) {
	d.d, err = config.ParseDays(v)
	return err
}
func (d days) or(def time.Duration) time.Duration {
	if d.d > 0 {
		return d.d
	}
	return def
}

// dateFlag is a UTC day, YYYY-MM-DD.
type dateFlag struct{ t time.Time }

func (d *dateFlag) String() string {
	if d.t.IsZero() {
		return ""
	}
	return d.t.Format(time.DateOnly)
}
func (d *dateFlag) Set(v string) error {
	t, err := time.Parse(time.DateOnly, v)
	d.t = t
	return err
}
func (d dateFlag) or(def time.Time) time.Time {
	if d.t.IsZero() {
		return def
	}
	return d.t
}

var _ flag.Value = (*days)(nil)
