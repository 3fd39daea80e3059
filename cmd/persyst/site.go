package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/persyst/persyst/accounting"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/mailprog"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/siteview"
)

type siteOptions struct {
	db, config, period, from, to                   string
	cluster, account, user, partition, qos, by, tb string
	csv, json, mail, dryRun                        bool
	top, max                                       int
	minWasted                                      float64
}

func (o *siteOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.db, "db", "", "the site's store: a SQLite file or mysql://USER@HOST/DATABASE?password-file=PATH (default: persyst.conf's SiteStore)")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf (SiteStore, AdminGroup)")
	fs.StringVar(&o.period, "period", "month", "week, month, quarter, year (the one up to today), last-month (...), 30d, 2026, 2026-Q3, 2026-11, 2026-W48, or FROM..TO")
	fs.StringVar(&o.from, "from", "", "the first day (YYYY-MM-DD, UTC), with --to instead of --period")
	fs.StringVar(&o.to, "to", "", "the last day (YYYY-MM-DD, UTC; default: today)")
	fs.StringVar(&o.cluster, "cluster", "", "one cluster's jobs")
	fs.StringVar(&o.account, "account", "", "one account's jobs")
	fs.StringVar(&o.user, "user", "", "one user's jobs")
	fs.StringVar(&o.partition, "partition", "", "one partition's jobs")
	fs.StringVar(&o.qos, "qos", "", "one QOS's jobs")
	fs.StringVar(&o.by, "by", "", "group by account (the default; user below an --account), user, partition, qos or cluster")
	fs.StringVar(&o.tb, "table", "", "print one table: groups, total, findings, weeks (the trend), jobs, or running (jobs told they hold idle GPUs or CPUs; default with --csv and --json: groups)")
	fs.BoolVar(&o.csv, "csv", false, "print the table as CSV")
	fs.BoolVar(&o.json, "json", false, "print the table as JSON")
	fs.IntVar(&o.top, "top", 5, "users and jobs listed per finding")
	fs.BoolVar(&o.mail, "mail", false, "mail each user their jobs' efficiency report of the period (default period: last-month), and each account's coordinators the account's, once per period, through persyst.conf's MailProg")
	fs.BoolVar(&o.dryRun, "dry-run", false, "with --mail: print every mail instead of sending it")
	fs.IntVar(&o.max, "max", 500, "with --mail: send at most this many mails (the rest go with the next run)")
	fs.Float64Var(&o.minWasted, "min-wasted", -1, "with --mail: no mail for a user or account whose jobs left fewer CPU- and GPU-hours idle (default: persyst.conf's ReportMinWastedHours)")
}

// runSite is `persyst site`: where the site's hours went (siteview), from the frontend's
// database. Root and persyst.conf's AdminGroup see every job; another user their own and
// their coordinated accounts' (Slurm's accounting).
func runSite(ctx context.Context, io stdio, args []string) error {
	var o siteOptions
	fs, err := parseOptions("site [flags]", io, args, &o)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("site: unexpected arguments %q", fs.Args())
	}
	if o.csv && o.json {
		return usagef("site: --csv or --json, not both")
	}
	if o.mail {
		if !setByUser(fs, "period") && o.from == "" {
			o.period = "last-month"
		}
	} else if o.dryRun || setByUser(fs, "max") || setByUser(fs, "min-wasted") {
		return usagef("site: --dry-run, --max and --min-wasted go with --mail")
	}
	q, err := siteQueryOf(o, time.Now())
	if err != nil {
		return usagef("site: %v", err)
	}
	conf, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	o.db = siteStore(fs, o.db, conf)
	if o.mail {
		return siteMail(ctx, io, o, q, conf)
	}
	scope, who, err := siteScope(ctx, io, conf.AdminGroup)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, o.db, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := siteview.Build(ctx, st, q, scope)
	if err != nil {
		return err
	}
	if o.tb == "" && !o.csv && !o.json {
		return siteview.WriteSummary(io.out, v, who)
	}
	return writeSiteTable(ctx, io, st, v, scope, o)
}

// writeSiteTable prints one of the view's tables (--table) as text, CSV or JSON.
func writeSiteTable(ctx context.Context, io stdio, st *store.Store, v *siteview.View, scope store.Scope, o siteOptions) error {
	t, err := v.Named(ctx, st, scope, o.tb)
	if errors.Is(err, siteview.ErrNoTable) {
		return usagef("site: --%v", err)
	}
	if err != nil {
		return err
	}
	switch {
	case o.csv:
		return siteview.WriteCSV(io.out, t)
	case o.json:
		return siteview.WriteJSON(io.out, t)
	}
	return siteview.WriteText(io.out, t)
}

// siteQueryOf reads the query from the flags.
func siteQueryOf(o siteOptions, now time.Time) (siteview.Query, error) {
	period := o.period
	if o.from != "" || o.to != "" {
		to := o.to
		if to == "" {
			to = now.UTC().Format(time.DateOnly)
		}
		if o.from == "" {
			return siteview.Query{}, fmt.Errorf("--to without --from")
		}
		period = o.from + ".." + to
	}
	p, err := siteview.ParsePeriod(period, now)
	if err != nil {
		return siteview.Query{}, err
	}
	q := siteview.Query{Period: p, Cluster: o.cluster, Account: o.account, User: o.user, Partition: o.partition, QOS: o.qos, Top: o.top, Now: now}
	by := o.by
	if by == "" {
		by = string(store.ByAccount)
		if o.account != "" {
			by = string(store.ByUser)
		}
	}
	if q.By, err = store.ParseDim(by); err != nil {
		return q, fmt.Errorf("--by %w", err)
	}
	return q, nil
}

// siteScope is what the user running persyst site may see, and how the summary says it.
func siteScope(ctx context.Context, io stdio, adminGroup string) (store.Scope, string, error) {
	uid := os.Getuid()
	if uid == 0 {
		return store.Scope{All: true}, "every job", nil
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return store.Scope{}, "", fmt.Errorf("site: who runs it: %w", err)
	}
	if isAdmin(nil, adminGroup)(u.Username) {
		return store.Scope{All: true}, "every job (AdminGroup " + adminGroup + ")", nil
	}
	accounts, err := accounting.Coordinators(ctx, accounting.Runner(jobmap.ExecRunner))
	if err != nil {
		fmt.Fprintf(io.err, "persyst site: %v: your own jobs only\n", err)
	}
	mine := accounts[u.Username]
	who := u.Username + "'s jobs"
	if len(mine) > 0 {
		who += fmt.Sprintf(" and those of the accounts %s coordinates %v", u.Username, mine)
	}
	return store.Scope{User: u.Username, Accounts: mine}, who, nil
}

// setByUser says whether the command line set a flag.
// siteMail is `persyst site --mail`: the period's efficiency reports (siteview.Mails),
// each sent once through MailProg (as the database's owner or root: it reads every job).
func siteMail(ctx context.Context, io stdio, o siteOptions, q siteview.Query, conf config.Config) error {
	optOut, err := siteview.ReadOptOut(conf.ReportOptOut)
	if err != nil {
		return err
	}
	cat, err := properties.DefaultCatalog()
	if err != nil {
		return err
	}
	coords, err := accounting.Coordinators(ctx, accounting.Runner(jobmap.ExecRunner))
	if err != nil {
		fmt.Fprintf(io.err, "persyst site: %v: no mail to coordinators\n", err)
	}
	minWasted := conf.ReportMinWastedHours
	if o.minWasted >= 0 {
		minWasted = o.minWasted
	}
	st, err := store.Open(ctx, o.db, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	mails, err := siteview.Mails(ctx, st, siteview.MailOptions{Period: q.Period, Cluster: q.Cluster, MinWastedHours: minWasted, OptOut: optOut,
		Coordinators: coords, WebURL: conf.WebURL, Advice: func(key string) string {
			if p, ok := cat.Get(key); ok {
				return p.Recommendation
			}
			return ""
		}})
	if err != nil {
		return err
	}
	r, err := siteview.Send(ctx, st, q.Period, mails, siteview.SendOptions{Max: o.max, DryRun: o.dryRun, Out: io.out, Cluster: q.Cluster,
		Send: func(ctx context.Context, m siteview.Mail) error {
			return mailprog.Mail(ctx, conf.MailProg, m.To, m.Subject, m.Body)
		}})
	fmt.Fprintf(io.err, "persyst site --mail %s: %d mails %s, %d sent before, %d failed, %d left for the next run\n",
		q.Period, r.Sent, map[bool]string{true: "printed", false: "sent"}[o.dryRun], r.AlreadySent, r.Failed, r.Left)
	if err == nil && r.Failed > 0 {
		err = fmt.Errorf("site --mail: %d mails not sent", r.Failed)
	}
	return err
}
