package daemon

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/jobmap"
)

// Reconciling with Slurm: a job whose end event never arrived (the daemon was down at
// the job's end, slurmd died, the node rebooted) would stay "running" in the registry,
// measured and holding its cgroups, forever. Every interval the daemon asks the job map
// about running jobs that have had no event for a while, a bounded number per round
// (the longest unchecked first), and ends those Slurm no longer runs on this node.
const (
	reconcileEvery = time.Minute
	reconcileQuiet = 2 * time.Minute // no event for this long before a job is checked
	reconcileBatch = 64              // jobs checked per round
)

type reconciler struct {
	reg     *Registry
	meas    *Measurer
	facts   JobFacts
	node    string
	log     zerolog.Logger
	now     func() time.Time
	checked map[uint32]time.Time // when each running job was last checked
}

func newReconciler(reg *Registry, meas *Measurer, facts JobFacts, node string, log zerolog.Logger, now func() time.Time) *reconciler {
	return &reconciler{reg: reg, meas: meas, facts: facts, node: node, log: log.With().Str("part", "reconcile").Logger(),
		now: now, checked: map[uint32]time.Time{}}
}

// run reconciles every interval until ctx is done (a first round at once, for what a
// previous daemon left running).
func (r *reconciler) run(ctx context.Context, every time.Duration) {
	if r.facts == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round checks up to reconcileBatch quiet running jobs.
func (r *reconciler) round(ctx context.Context) {
	now := r.now()
	var quiet []*Job
	running := map[uint32]bool{}
	for _, j := range r.reg.Jobs() {
		if j.Ended != nil {
			continue
		}
		running[j.JobID] = true
		if now.Sub(j.Updated) >= reconcileQuiet {
			quiet = append(quiet, j)
		}
	}
	for id := range r.checked {
		if !running[id] {
			delete(r.checked, id)
		}
	}
	sort.Slice(quiet, func(a, b int) bool { return r.checked[quiet[a].JobID].Before(r.checked[quiet[b].JobID]) })
	for _, j := range quiet[:min(len(quiet), reconcileBatch)] {
		if ctx.Err() != nil {
			return
		}
		r.checked[j.JobID] = now
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		why := r.gone(cctx, j.JobID)
		cancel()
		if why == "" {
			continue
		}
		if ended, err := r.reg.Expire(j.JobID, why, r.now()); err != nil {
			r.log.Warn().Err(err).Uint32("job", j.JobID).Msg("ended job not saved")
		} else if ended == nil {
			continue
		}
		r.log.Info().Uint32("job", j.JobID).Str("why", why).Msg("job ended without its end event")
		if r.meas != nil {
			r.meas.End(j.JobID)
			r.meas.Forget(func(id uint32) bool { return r.reg.Job(id) != nil })
		}
	}
}

// gone says why Slurm does not run job id on this node any more ("" : it does, or the
// job map cannot tell now).
func (r *reconciler) gone(ctx context.Context, id uint32) string {
	j, err := r.facts.Job(ctx, strconv.FormatUint(uint64(id), 10))
	switch {
	case errors.Is(err, jobmap.ErrNoJob):
		return "Slurm no longer knows the job"
	case err != nil:
		r.log.Debug().Err(err).Uint32("job", id).Msg("job map cannot tell whether the job runs")
		return ""
	case !j.Running():
		return "Slurm says the job is " + j.State
	case len(j.Nodes) > 0 && !slices.Contains(j.Nodes, r.node):
		return "Slurm runs the job on other nodes"
	}
	return ""
}
