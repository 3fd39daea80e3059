package daemon

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/internal/tick"
	"github.com/persyst/persyst/jobmap"
)

// Reconciling with Slurm: a job whose end event never arrived (the daemon was down at
// the job's end, slurmd died, the node rebooted) would stay "running" in the registry,
// measured and holding its cgroups, forever. The daemon asks the job map about running
// jobs it has reason to doubt, a bounded number per round, and ends those Slurm no longer
// runs on this node:
//   - at start, every job a previous daemon left running (at once);
//   - a job whose cgroups Slurm removed (Measurer.Vanished), every suspectEvery;
//   - any job without an event for reconcileQuiet, every reconcileEvery.
//
// A job so ended on its batch host gets its digest late, from what was measured of it.
const (
	reconcileTick  = 5 * time.Second
	reconcileEvery = time.Minute
	suspectEvery   = 15 * time.Second
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
	suspect map[uint32]bool      // jobs to check soon: left by a previous daemon, cgroups gone
}

func newReconciler(reg *Registry, meas *Measurer, facts JobFacts, node string, log zerolog.Logger, now func() time.Time) *reconciler {
	r := &reconciler{reg: reg, meas: meas, facts: facts, node: node, log: log.With().Str("part", "reconcile").Logger(),
		now: now, checked: map[uint32]time.Time{}, suspect: map[uint32]bool{}}
	for _, j := range reg.Jobs() {
		if j.Ended == nil {
			r.suspect[j.JobID] = true
		}
	}
	return r
}

// run reconciles every reconcileTick until ctx is done. The first round is at once, for
// what a previous daemon left running; then started is called (the jobs that still run
// are measured again).
func (r *reconciler) run(ctx context.Context, started func()) {
	if r.facts != nil {
		r.round(ctx)
	}
	if started != nil {
		started()
	}
	if r.facts == nil {
		return
	}
	tick.Every(ctx, reconcileTick, func() { r.round(ctx) })
}

// round checks up to reconcileBatch running jobs that are due: suspects not checked for
// suspectEvery, quiet jobs not checked for reconcileEvery (the longest unchecked first).
func (r *reconciler) round(ctx context.Context) {
	now := r.now()
	if r.meas != nil {
		for _, id := range r.meas.Vanished() {
			r.suspect[id] = true
		}
	}
	var due []*Job
	running := map[uint32]bool{}
	for _, j := range r.reg.Jobs() {
		if j.Ended != nil {
			continue
		}
		running[j.JobID] = true
		last, checked := r.checked[j.JobID]
		switch {
		case r.suspect[j.JobID] && (!checked || now.Sub(last) >= suspectEvery):
			due = append(due, j)
		case now.Sub(j.Updated) >= reconcileQuiet && (!checked || now.Sub(last) >= reconcileEvery):
			due = append(due, j)
		}
	}
	maps.DeleteFunc(r.checked, func(id uint32, _ time.Time) bool { return !running[id] })
	maps.DeleteFunc(r.suspect, func(id uint32, _ bool) bool { return !running[id] })
	sort.Slice(due, func(a, b int) bool { return r.checked[due[a].JobID].Before(r.checked[due[b].JobID]) })
	for _, j := range due[:min(len(due), reconcileBatch)] {
		if ctx.Err() != nil {
			return
		}
		r.checked[j.JobID] = now
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		why, facts := r.gone(cctx, j.JobID)
		cancel()
		if r.meas != nil {
			r.meas.lookups.found(j.JobID, facts) // a restored job's digest awaits this answer
		}
		if why == "" {
			continue
		}
		ended, err := r.reg.Expire(j.JobID, why, r.now())
		if err != nil {
			r.log.Warn().Err(err).Uint32("job", j.JobID).Msg("ended job not saved")
		}
		if ended == nil {
			continue
		}
		delete(r.suspect, j.JobID)
		r.log.Info().Uint32("job", j.JobID).Str("why", why).Msg("job ended without its end event")
		if r.meas == nil {
			continue
		}
		if err := r.meas.End(ctx, ended); err != nil {
			r.log.Info().Err(err).Uint32("job", j.JobID).Msg("report of an interactive job not made")
		}
		if ended.step("batch") != nil || (facts != nil && facts.BatchHost == r.node) {
			// This is the batch host (the batch script's start may have come while the
			// daemon was down): the digest the job's end would have made.
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := r.meas.LateDigest(dctx, ended, facts); err != nil {
				r.log.Info().Err(err).Uint32("job", j.JobID).Msg("late digest not written")
			}
			cancel()
		}
		r.meas.Forget(func(id uint32) bool { return r.reg.Job(id) != nil })
	}
}

// gone says why Slurm does not run job id on this node any more ("" : it does, or the
// job map cannot tell now), with what the job map said of the job (nil: nothing).
func (r *reconciler) gone(ctx context.Context, id uint32) (string, *jobmap.Job) {
	j, err := r.facts.Job(ctx, strconv.FormatUint(uint64(id), 10))
	switch {
	case errors.Is(err, jobmap.ErrNoJob):
		return "Slurm no longer knows the job", nil
	case err != nil:
		r.log.Debug().Err(err).Uint32("job", id).Msg("job map cannot tell whether the job runs")
		return "", nil
	case !j.Running():
		return "Slurm says the job is " + j.State, j
	case len(j.Nodes) > 0 && !slices.Contains(j.Nodes, r.node):
		return "Slurm runs the job on other nodes", j
	}
	return "", j
}
