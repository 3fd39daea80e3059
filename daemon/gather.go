package daemon

import (
	"context"
	"time"

	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// The second half of a digest's pass (jobend.go: the first asks the job map): what this
// node measured of the job and what the other parts know of it are gathered into its
// jobEnd, its report made from that (report.go), kept, accounted and written.

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

// finish gathers the rest of what the job's end knows (e holds the job map's answer),
// makes the report from it, keeps it, hands its summary to Slurm's accounting and writes
// it into the job's output file. When the job map has not answered yet (later brings
// its answer), it does so in the background once it has, covering the job up to then;
// if it never answers, the report is kept without being written, as when the job map
// does not know the job.
func (p *digestPass) finish(ctx context.Context, e jobEnd, pj *pipeline.Job, later <-chan answer) error {
	if later != nil {
		go func() {
			e.answer = <-later
			ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
			defer cancel()
			_ = p.finish(ctx, e, pj, nil)
		}()
		return nil
	}
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
