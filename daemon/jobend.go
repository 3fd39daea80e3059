package daemon

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
)

// A job's digest is made in one pass: what the job's end knows is gathered once into a
// jobEnd (what the job map says of the job, what this node measured of it, the other
// nodes' results, its OOM kills); its report is made from that alone (jobEnd.report,
// report.go); the digester keeps it and writes it into the job's output file, and the
// accountant hands its summary to Slurm's accounting.

// jobEnd is what a job's end knows: all its report is made from.
type jobEnd struct {
	job  *Job // the registry's record
	mode digestMode
	node string // this node: the job's batch host, or a job without a batch script's first
	// at is when the digest began, on the daemon's clock: the job's end on this node (a
	// late digest: unless Slurm recorded it); began is the same on the real clock, for
	// how long the digest took. An unmeasured stretch longer than tolerance at the job's
	// start or end is a gap.
	at, began  time.Time
	tolerance  time.Duration
	minSeconds float64 // the engine's shortest judged job
	co2        float64 // grams of CO2-equivalent per kWh (0: not said)

	answer               // what the job map says of the job
	measured measurement // what this node measured of it
	// wide is the job's report over all its nodes (nil: a one-node job, or none came;
	// whyNot says why), others its properties as this node's engine takes them.
	wide   *digest.Report
	others []properties.Result
	whyNot string
	// kills are the OOM kills the kernel logged in the job's cgroups (counted for a
	// report that says how the job ended).
	kills int
	// episodes are the site-wide I/O episodes the tree says stalled the job.
	episodes []episodes.Episode
}

// ended says whether the report says how the job ended: a batch job's digest, or the
// report of a job without a batch script that Slurm says ended.
func (e *jobEnd) ended() bool {
	return e.mode != interactive || (e.facts != nil && !e.facts.Running())
}

// final says whether the report is the job's last: a batch job's digest, or the report of
// a job without a batch script (srun, salloc) at its end. It goes to the tree's keeper,
// and its summary into Slurm's accounting.
func (e *jobEnd) final() bool {
	return e.mode != interactive || e.job.State != Running
}

// digestPass makes jobs' digests, one pass each. It owns nothing: what was looked up,
// the reports kept and the OOM kills counted are its parts'.
type digestPass struct {
	engine  *properties.Engine
	timeout time.Duration // the whole digest's (DigestConfig.Timeout)
	node    string
	cycle   time.Duration
	uplink  Uplink
	co2     float64 // grams per kWh (DigestConfig.CO2PerKWh)
	lookups *jobLookups
	oom     *oomTracker
	dig     *digester
	acct    accountant
	log     zerolog.Logger
	now     func() time.Time
}

// make makes job j's digest from its pipeline pj (the digest is claimed); known is what
// the job map said of a late digest's job when its end was found.
func (p *digestPass) make(ctx context.Context, j *Job, pj *pipeline.Job, mode digestMode, known *jobmap.Job) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	e := jobEnd{job: j, mode: mode, node: p.node, at: p.now(), began: time.Now(), tolerance: 2*p.cycle + time.Second,
		minSeconds: p.engine.MinSeconds(), co2: p.co2}
	var later <-chan answer
	var err error
	e.answer, later, err = p.lookups.atEnd(ctx, j, mode, known)
	if mode == interactive && e.facts != nil && e.facts.BatchHost != "" && e.facts.BatchHost != p.node {
		return nil // a step of a batch job that runs elsewhere
	}
	if later != nil {
		// The job map did not answer in time (a busy slurmctld): Slurm is not kept
		// waiting, and the digest is finished in the background once it answers,
		// covering the job up to now.
		p.log.Info().Err(err).Uint32("job", j.JobID).Msg("job map did not answer at the batch step's end: digest finished when it does")
	}
	return p.finish(ctx, e, pj, later)
}
