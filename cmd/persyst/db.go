package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/config"
)

// dbOptions are persyst db's flags.
type dbOptions struct {
	db, config, into      string
	cycles, jobs, rollups days
	from, to              dateFlag
}

// runDb is `persyst db ACTION`: the tree's database for admins.
func runDb(ctx context.Context, io stdio, args []string) error {
	if len(args) == 0 {
		return usagef("persyst db stats|check|prune|vacuum|export|copy --db PATH")
	}
	action := args[0]
	var o dbOptions
	fs := flagSet("db "+action, io)
	fs.StringVar(&o.db, "db", "", "the tree's database (the frontend's, a collector's or a sync agent's): a SQLite file or mysql://USER@HOST/DATABASE?password-file=PATH (default: persyst.conf's SiteStore)")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf (SiteStore, the retention of prune)")
	switch action {
	case "stats", "check", "vacuum":
	case "prune":
		fs.Var(&o.cycles, "cycles", "keep per-cycle results this long after a job's end (default: persyst.conf's CollectorRetention)")
		fs.Var(&o.jobs, "jobs", "keep jobs and reports this long (default: JobRetention)")
		fs.Var(&o.rollups, "rollups", "keep the daily roll-ups this long (default: RollupRetention)")
	case "export":
		fs.Var(&o.from, "from", "the first day (YYYY-MM-DD, UTC; default: 7 days ago)")
		fs.Var(&o.to, "to", "the day after the last (default: tomorrow)")
	case "copy":
		fs.StringVar(&o.into, "to", "", "the empty database to copy every row into (mysql://USER@HOST/DATABASE?password-file=PATH, or a SQLite file)")
	default:
		return usagef("persyst db %s: want stats, check, prune, vacuum, export or copy", action)
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if action == "copy" && o.into == "" {
		return usagef("persyst db copy: --to names the database to copy into")
	}
	if !setByUser(fs, "db") {
		conf, err := loadConfig(o.config)
		if err != nil {
			return err
		}
		o.db = conf.SiteStore
	}
	st, err := store.Open(ctx, o.db, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	if action == "copy" {
		return dbCopy(ctx, io, st, o.into)
	}
	return dbAction(ctx, io, st.Admin(), action, o)
}

// dbCopy copies every row of st into the empty store at target (store.Copy) and says
// how many of each table's.
func dbCopy(ctx context.Context, io stdio, st *store.Store, target string) error {
	to, err := store.Open(ctx, target, store.Options{})
	if err != nil {
		return err
	}
	defer to.Close()
	n, err := store.Copy(ctx, st, to)
	if err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(n))
	for _, t := range names {
		fmt.Fprintf(io.out, "%-20s %12d rows\n", t, n[t])
	}
	fmt.Fprintf(io.out, "copied into %s; check it with persyst db check --db ...\n", to.Admin().Path())
	return nil
}

// dbAction does one of persyst db's actions.
func dbAction(ctx context.Context, io stdio, a store.Admin, action string, o dbOptions) error {
	switch action {
	case "stats":
		s, err := a.Stats(ctx)
		if err != nil {
			return err
		}
		return s.Write(io.out)
	case "check":
		problems, err := a.Check(ctx)
		if err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintln(io.out, p)
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s: %d problems", a.Path(), len(problems))
		}
		fmt.Fprintf(io.out, "%s: no problems found\n", a.Path())
		return nil
	case "vacuum":
		return a.Vacuum(ctx)
	case "prune":
		conf, err := loadConfig(o.config)
		if err != nil {
			return err
		}
		r := store.Retention{Cycles: o.cycles.or(conf.CollectorRetention), Jobs: o.jobs.or(conf.JobRetention), Rollups: o.rollups.or(conf.RollupRetention)}
		p, err := a.Prune(ctx, time.Now(), r)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "pruned: cycles of %d jobs (%d rows), %d jobs, %d roll-up rows, %d episodes\n", p.CycleJobs, p.CycleRows, p.Jobs, p.RollupRows, p.EpisodeRows)
		return nil
	}
	now := time.Now().UTC()
	f, t := o.from.or(now.AddDate(0, 0, -7).Truncate(24*time.Hour)), o.to.or(now.Truncate(24*time.Hour).AddDate(0, 0, 1))
	if !t.After(f) {
		return usagef("--to %s is not after --from %s", t.Format(time.DateOnly), f.Format(time.DateOnly))
	}
	_, err := a.Export(ctx, f, t, io.out)
	return err
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
