package daemon

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
)

// accountTimeout bounds writing a job's summary into Slurm's accounting. On a quiet test
// cluster the fresh read of the AdminComment and scontrol take 15-25 ms together; under
// load (a 100-task array) far longer; a summary that reaches slurmctld after the job
// completed goes into the database after the job's end (0.3-0.8 s), which no one waits
// for.
const accountTimeout = 20 * time.Second

// accountant keeps jobs' summaries in Slurm's accounting (the job's AdminComment), in the
// background. The batch step's end, which Slurm waits for, never waits for it: waiting
// ~30 ms got more summaries to slurmctld before the job completed, and cost every job's
// end those 30 ms (p90 50 ms under a 100-task array); the database takes the others
// after the job.
type accountant struct {
	// write keeps a summary (DigestConfig.Accounting; nil: none is kept).
	write func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error)
	// facts reads the job's AdminComment again, when the job map was asked before the
	// job's end.
	facts   JobFacts
	metrics *exporter.Daemon
	log     zerolog.Logger
}

// account writes the summary of the final report of a job's end e into Slurm's
// accounting (accounting.Write: slurmctld while it takes it, else the database once the
// job's end is there), in the background; nothing when the job map said nothing of the
// job.
//
// The AdminComment the summary is merged with (a site may have set one while the job
// ran; it is never overwritten) is read again first unless the job map was asked after
// the job's end (e.fresh): the digest's one lookup after the job's end.
func (a accountant) account(e *jobEnd, rep digest.Report) {
	if a.write == nil || e.facts == nil || !e.final() {
		return
	}
	id, facts, fresh := e.job.JobID, e.facts, e.fresh
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), accountTimeout)
		defer cancel()
		start := time.Now()
		existing := facts.AdminComment
		if !fresh {
			f, err := a.facts.Job(ctx, facts.ID())
			if err != nil {
				a.metrics.Accounting("error", time.Since(start))
				a.log.Warn().Err(err).Uint32("job", id).Msg("summary not written into Slurm accounting: the job's AdminComment could not be read")
				return
			}
			existing = f.AdminComment
		}
		res, err := a.write(ctx, facts.ID(), facts.JobID, existing, rep)
		took := time.Since(start)
		a.metrics.Accounting(res, took)
		log := a.log.With().Uint32("job", id).Str("result", res).Dur("took", took).Logger()
		switch {
		case res == "written":
			log.Info().Msg("summary kept in Slurm accounting (AdminComment)")
		case res == "present":
			log.Info().Msg("summary not written: the job's AdminComment holds one already")
		default:
			log.Warn().Err(err).Msg("summary not written into Slurm accounting")
		}
	}()
}
