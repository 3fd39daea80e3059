// Package siteview is the admin's view of the site: where a period's CPU- and GPU-hours
// went, by cluster, account, user, partition or QOS, what was left unused (CPUs and
// GPUs idle, memory and time limits requested and never used), the findings that cost
// the most hours with their users and jobs, and the trend per week over a year. The
// same figures come out as text, CSV and JSON (`persyst site`) and as HTML pages with
// SVG charts (`persyst web`, /site); all from the store's daily roll-ups, so that a
// year of a site with a million jobs a week reads days, not jobs.
//
// # Who sees what
//
// A reader sees what their store.Scope allows: admins every job; a user their own jobs
// and, as an account's coordinator in Slurm's accounting (sacctmgr), every job of the
// accounts they coordinate and their sub-accounts. Asking for another user's or
// account's figures without that right gives nothing of them, the same as a filter that
// selects no job: the view does not say which accounts or users exist.
package siteview

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
)

// Query is what a reader asks for: a period, narrowed to a cluster, account, user,
// partition and QOS where set, grouped by a dimension.
type Query struct {
	Period                                 Period
	Cluster, Account, User, Partition, QOS string
	By                                     store.Dim
	// Top is how many users and jobs each finding lists (default 5).
	Top int
	// Now is the reader's time: the running jobs listed are those whose notice still
	// held within 3 × digest.NoticeRefresh of it (zero: none listed).
	Now time.Time
}

// Filter is the query as the store's filter, within scope.
func (q Query) Filter(scope store.Scope) store.SiteFilter {
	return store.SiteFilter{From: q.Period.From, To: q.Period.To, Scope: scope, Cluster: q.Cluster, Account: q.Account,
		User: q.User, Partition: q.Partition, QOS: q.QOS, Top: q.Top}
}

// TrendWeeks is how far back the trend goes: a year of weeks to the period's end.
const TrendWeeks = 53

// View is the figures of a query: the period's totals and findings, its groups, and the
// trend per week over the year that ends with the period.
type View struct {
	Query  Query
	Site   *store.Site
	Groups []store.Group
	Weeks  []store.Week
	// Running are the running jobs that hold what they do not use, as their batch hosts
	// last said (at Query.Now), within the query's scope, cluster, account, user,
	// partition and QOS.
	Running []store.Running
}

// Build reads a query's figures from the store, within scope: its parts side by side
// (each reads roll-ups of its own).
func Build(ctx context.Context, st *store.Store, q Query, scope store.Scope) (*View, error) {
	if q.By == "" {
		q.By = store.ByAccount
	}
	f := q.Filter(scope)
	v := &View{Query: q}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { v.Site, err = st.Rollups().Site(gctx, f); return err })
	g.Go(func() (err error) { v.Groups, err = st.Rollups().By(gctx, f, q.By); return err })
	g.Go(func() (err error) {
		tf := f
		tf.From = q.Period.To.AddDate(0, 0, -7*TrendWeeks)
		v.Weeks, err = st.Rollups().Weeks(gctx, tf)
		return err
	})
	if !q.Now.IsZero() {
		g.Go(func() (err error) {
			v.Running, err = st.Rollups().Running(gctx, f, q.Now.Add(-3*digest.NoticeRefresh))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return v, nil
}

// Jobs lists the jobs of a query (the newest to end first, at most limit), within scope:
// the drill-down below a user.
func Jobs(ctx context.Context, st *store.Store, q Query, scope store.Scope, limit int) ([]store.Listed, error) {
	return st.ListJobs(ctx, store.JobFilter{Scope: scope, Since: q.Period.From, Before: q.Period.To, Cluster: q.Cluster,
		Account: q.Account, User: q.User, Partition: q.Partition, QOS: q.QOS, Limit: limit})
}
