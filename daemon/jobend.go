package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
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

// measurement is what this node measured of a job, read from its pipeline at once.
type measurement struct {
	cpus int // the CPUs measured
	// memRequested is the job's memory request on this node in bytes (0: none).
	memRequested float64
	results      []properties.Result
	summary      sample.Summary
	samples      []sample.Sample
	phases       []phases.Phase
	interference *phases.Interference
}

// readMeasured reads what pj measured of the job, judged against the memory request the
// job map says it made (facts; nil: none).
func readMeasured(pj *pipeline.Job, facts *jobmap.Job) measurement {
	m := measurement{cpus: len(pj.Meter().Spec().CPUs), summary: pj.Summary(), samples: pj.Meter().Samples()}
	var judged float64
	m.memRequested, judged = memRequest(facts, m.cpus)
	m.phases, m.interference = pj.Phases(judged)
	m.results = pj.Results(judged)
	return m
}

// digestPass makes jobs' digests, one pass each. It owns nothing: what was looked up,
// the reports kept and the OOM kills counted are its parts'.
type digestPass struct {
	engine  *properties.Engine
	timeout time.Duration // the whole digest's (DigestConfig.Timeout)
	node    string
	cycle   time.Duration
	uplink  Uplink
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
		minSeconds: p.engine.MinSeconds()}
	var err error
	e.answer, err = p.lookups.atEnd(ctx, j, mode, known)
	switch {
	case mode == interactive && e.facts != nil && e.facts.BatchHost != "" && e.facts.BatchHost != p.node:
		return nil // a step of a batch job that runs elsewhere
	case e.facts == nil && mode == atBatchEnd && err != nil && !errors.Is(err, jobmap.ErrNoJob):
		// The job map did not answer in time (a busy slurmctld): Slurm is not kept
		// waiting, and the digest is finished in the background once it answers,
		// covering the job up to now.
		p.log.Info().Err(err).Uint32("job", j.JobID).Msg("job map did not answer at the batch step's end: digest finished when it does")
		go p.later(e, pj)
		return nil
	}
	return p.finish(ctx, e, pj)
}

// later finishes a digest the job map did not answer for at the batch step's end (e, up
// to then) once it answers; if it never does, the report is kept without being written,
// as when the job map does not know the job.
func (p *digestPass) later(e jobEnd, pj *pipeline.Job) {
	e.answer = p.lookups.again(e.job)
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	_ = p.finish(ctx, e, pj)
}

// finish gathers the rest of what the job's end knows (e holds the job map's answer),
// makes the report from it, keeps it, hands its summary to Slurm's accounting and writes
// it into the job's output file.
func (p *digestPass) finish(ctx context.Context, e jobEnd, pj *pipeline.Job) error {
	factsTook := time.Since(e.began)
	phase := time.Now()
	p.gather(ctx, &e, pj)
	rep := e.report()
	p.log.Debug().Uint32("job", e.job.JobID).Dur("facts", factsTook).Dur("report", time.Since(phase)).Msg("digest phases")
	p.dig.keep(&e, rep)
	p.acct.account(&e, rep)
	return p.dig.write(ctx, &e, rep)
}

// gather reads the rest of what the job's end knows: what this node measured of it (pj),
// its report over all its nodes, its OOM kills, the I/O episodes that stalled it.
func (p *digestPass) gather(ctx context.Context, e *jobEnd, pj *pipeline.Job) {
	e.measured = readMeasured(pj, e.facts)
	if e.wide, e.whyNot = p.jobWide(ctx, e.job, e.facts); e.wide != nil {
		// What comes from other agents is taken for its numbers only (properties.Adopt).
		e.others = p.engine.Adopt(e.wide.Properties)
	}
	if e.ended() {
		e.kills = p.oom.kills(e.job.JobID)
	}
	if src, ok := p.uplink.(episodes.Source); ok {
		e.episodes = src.Episodes(e.job.JobID)
	}
}

// jobWide fetches a multi-node job's job-wide results through the uplink (the collector
// tree, or the job's other node daemons); nil when there are none (the digest then
// covers this node), with why.
func (p *digestPass) jobWide(ctx context.Context, j *Job, facts *jobmap.Job) (*digest.Report, string) {
	multi := j.NNodes > 1 || (facts != nil && len(facts.Nodes) > 1)
	switch {
	case !multi:
		return nil, ""
	case p.uplink == nil:
		return nil, "this daemon gathers no other nodes' data"
	}
	wide, err := p.uplink.JobWide(ctx, j.JobID)
	if err != nil {
		p.log.Info().Err(err).Uint32("job", j.JobID).Msg("no job-wide results: the digest covers this node")
		return nil, "their data could not be gathered (the persyst daemon's log says why)"
	}
	return wide, ""
}
