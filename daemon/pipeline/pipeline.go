// Package pipeline is one job's way from counters to its digest, the same for the node
// daemon and for `persyst run`, so that the two cannot drift apart:
//
//	measure.Meter ──samples──▶ properties.Accumulator ──records──▶ Options.Records (the agent tree)
//	      │                              │
//	      └── summary ──────────────────▶ Results ──▶ digest.Assemble (the report)
//
// A Job reads its meter at each cycle boundary (Loop, NextTick) and at its steps' and
// its own end; every read with an interval is evaluated at once, so each interval's
// property records exist while the job runs. At the end, Results completes the
// job-level properties over the whole job; with the job's Summary they are what
// digest.Assemble makes the report of.
package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// Options configure a Job.
type Options struct {
	// Engine evaluates the properties (nil: the job is measured only).
	Engine *properties.Engine
	// Records, if set, gets each interval's property records as they are made, with the
	// records the strategy would yield if every condition held (the job's full load) and
	// the job's energy so far (a multi-node job's batch host sums its nodes').
	Records func(t time.Time, seconds float64, recs []properties.Record, maxRecords int, energy sample.Energy)
	// Keep, if set, gets every sample as it is read (the daemon keeps them on disk, so
	// that a restarted daemon's digest still covers the whole job: Restore).
	Keep func(sample.Sample)
	// After runs f once d has passed and returns a function that cancels it (default
	// time.AfterFunc): the read that ends the job's start-up (Engine.Startup) is taken
	// with it. Tests with a fake clock inject their own.
	After func(d time.Duration, f func()) (stop func() bool)
}

// Job is one job's pipeline on this node.
type Job struct {
	meter *measure.Meter
	opts  Options

	mu    sync.Mutex
	acc   *properties.Accumulator // created at the first interval
	amend []func(*sample.Summary)
	// latest is the latest interval read and top its most severe record (Latest).
	latest Latest

	// endMu orders the start-up read before the end: once ended, it is not taken.
	endMu       sync.Mutex
	ended       bool
	stopStartup func() bool
}

// Start opens the job's meter (its baseline read) and the pipeline behind it.
func Start(env *measure.Env, spec measure.Spec, o Options) (*Job, error) {
	m, err := measure.Open(env, spec)
	if err != nil {
		return nil, err
	}
	j := &Job{meter: m, opts: o}
	if o.Engine != nil {
		after := o.After
		if after == nil {
			after = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
		}
		startup := o.Engine.Startup()
		stop := after(startup, func() { j.readStartup(env, startup) })
		j.endMu.Lock()
		j.stopStartup = stop
		j.endMu.Unlock()
	}
	return j, nil
}

// readStartup reads the job when its start-up is over, so that the start-up is an
// interval of its own, never judged (properties.Config.StartupSeconds). A job whose
// measurement goes back further (an earlier daemon's samples were restored) or that
// ended has no start-up read.
func (j *Job) readStartup(env *measure.Env, startup time.Duration) {
	j.endMu.Lock()
	defer j.endMu.Unlock()
	if j.ended || env.Now().Sub(j.meter.Started()) > startup+time.Second {
		return
	}
	_, _ = j.Read(sample.Startup)
}

// Recorded returns the pipeline of a job measured by an earlier daemon, from its samples
// (measure.Recorded): it reads nothing more; its results and report are those of the
// samples.
func Recorded(env *measure.Env, spec measure.Spec, o Options, started time.Time, samples []sample.Sample) *Job {
	j := &Job{meter: measure.Recorded(env, spec, started, samples), opts: Options{Engine: o.Engine}}
	if j.opts.Engine != nil {
		acc := j.accumulator()
		for _, s := range j.meter.Samples() {
			if s.Seconds > 0 {
				acc.Add(s)
			}
		}
	}
	return j
}

// Meter returns the job's meter.
func (j *Job) Meter() *measure.Meter { return j.meter }

// Read reads the job's sources and evaluates the new interval. The error reports sources
// that failed; the sample holds everything else and is evaluated either way.
func (j *Job) Read(reason sample.Reason) (sample.Sample, error) {
	s, err := j.meter.Read(reason)
	if j.opts.Keep != nil && s.Seconds > 0 {
		j.opts.Keep(s)
	}
	j.evaluate(s)
	return s, err
}

// Restore puts back what an earlier pipeline of the same job measured (measure.Meter.
// Restore): its samples are evaluated again, so that the properties cover the job from
// started on; their records are not handed on again (the agent tree has them). The
// stretch the earlier pipeline and this one did not measure is a gap, with why.
func (j *Job) Restore(prev []sample.Sample, started time.Time, why string) (int, error) {
	n, err := j.meter.Restore(prev, started, why)
	if err != nil || n == 0 || j.opts.Engine == nil {
		return n, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.acc = nil // made again with the restored start
	acc := j.accumulator()
	for _, s := range j.meter.Samples() {
		if s.Seconds > 0 {
			acc.Add(s)
		}
	}
	return n, nil
}

// Latest is a job's latest interval: its sample, and the most severe property record of
// it (Severity 0 and no Key when none was severe, or in the start-up, which is never
// judged).
type Latest struct {
	Sample sample.Sample
	Top    properties.Record
}

// Latest returns the job's latest interval; ok is false before the first.
func (j *Job) Latest() (l Latest, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.latest, j.latest.Sample.Seconds > 0
}

// evaluate adds an interval to the property records and hands them on.
func (j *Job) evaluate(s sample.Sample) {
	if s.Seconds <= 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.latest = Latest{Sample: s}
	if j.opts.Engine == nil {
		return
	}
	recs := j.accumulator().Add(s)
	for _, r := range recs {
		if r.Severity > j.latest.Top.Severity {
			j.latest.Top = r
		}
	}
	if j.opts.Records != nil {
		j.opts.Records(s.Time, s.Seconds, recs, j.acc.MaxRecords(), j.meter.Energy())
	}
}

// Judged is how much of the job's measured time its properties judged so far, in
// seconds: not its start-up (the start-up read counts whole, however late it came), not
// the time Slurm held it suspended. 0 without an engine.
func (j *Job) Judged() float64 {
	if j.opts.Engine == nil {
		return 0
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	judged, _ := j.accumulator().Judged()
	return judged
}

// accumulator returns the job's accumulator, created with what the meter knows of the
// job (its CPUs and their topology). j.mu is held.
func (j *Job) accumulator() *properties.Accumulator {
	if j.acc == nil {
		spec := j.meter.Spec()
		j.acc = j.opts.Engine.NewAccumulator(properties.JobInfo{Started: j.meter.Started(), NCPUs: len(spec.CPUs), Topology: spec.Topology})
	}
	return j.acc
}

// End takes the final read, evaluates it and closes the sources; it returns the job's
// summary. The error reports what failed (the summary covers what was read).
func (j *Job) End() (sample.Summary, error) {
	j.endMu.Lock()
	j.ended = true
	if j.stopStartup != nil {
		j.stopStartup()
	}
	j.endMu.Unlock()
	_, rerr := j.Read(sample.End)
	cerr := j.meter.Close()
	return j.Summary(), errors.Join(rerr, cerr)
}

// Amend adds what was learnt about the job outside its meter to its summary from now on
// (`persyst run` without privileges: CPU time and peak memory from wait4's rusage).
func (j *Job) Amend(f func(*sample.Summary)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.amend = append(j.amend, f)
}

// Summary returns the job's measurement so far, amended.
func (j *Job) Summary() sample.Summary {
	s := j.meter.Summary()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, f := range j.amend {
		f(&s)
	}
	return s
}

// Results completes the property evaluation over the job so far (job-level properties:
// memory trend, memory against the request, ...); memRequested is the job's memory
// request in bytes (0: none). Without an engine it returns nil.
func (j *Job) Results(memRequested float64) []properties.Result {
	if j.opts.Engine == nil {
		return nil
	}
	samples, sum := j.meter.Samples(), j.Summary()
	j.mu.Lock()
	defer j.mu.Unlock()
	acc := j.accumulator()
	acc.SetMemRequested(memRequested)
	return acc.Finish(samples, sum)
}

// Phases finds the job's phases on this node, with the properties severe in each
// (evaluated again over each phase's samples), and the time it lost to interference
// (package phases); memRequested as for Results. Without an engine it returns nil.
func (j *Job) Phases(memRequested float64) ([]phases.Phase, *phases.Interference) {
	if j.opts.Engine == nil {
		return nil, nil
	}
	samples, sum := j.meter.Samples(), j.Summary()
	spec := j.meter.Spec()
	info := properties.JobInfo{Started: j.meter.Started(), NCPUs: len(spec.CPUs), Topology: spec.Topology, MemRequestedBytes: memRequested}
	judge := j.opts.Engine.NewAccumulator(info)
	ph, in := j.analyse(samples, judge.Judges)
	if len(ph) < 2 {
		return ph, &in
	}
	for i := range ph {
		var own []sample.Sample
		for _, s := range samples {
			if judge.Judges(s) && ph[i].Contains(s) {
				own = append(own, s)
			}
		}
		acc := j.opts.Engine.NewAccumulator(info)
		for _, s := range own {
			acc.Add(s)
		}
		for _, r := range acc.Finish(own, sum) {
			if r.Assessed && r.TimeShare > 0 {
				if ph[i].Held == nil {
					ph[i].Held = map[string]float64{}
				}
				ph[i].Held[r.Key] = r.TimeShare * ph[i].Seconds
			}
		}
	}
	return ph, &in
}

// NodePhases are the job's phases and interference on this node, without the properties
// of each phase: its part, for comparing the job's nodes (nil: no engine, or nothing
// judged).
func (j *Job) NodePhases(node string) *phases.NodePhases {
	if j.opts.Engine == nil {
		return nil
	}
	spec := j.meter.Spec()
	judge := j.opts.Engine.NewAccumulator(properties.JobInfo{Started: j.meter.Started(), NCPUs: len(spec.CPUs), Topology: spec.Topology})
	ph, in := j.analyse(j.meter.Samples(), judge.Judges)
	if len(ph) == 0 {
		return nil
	}
	return &phases.NodePhases{Node: node, NCPUs: len(spec.CPUs), Phases: ph, Interference: &in}
}

// analyse finds the phases and interference of samples, judged as judges says.
func (j *Job) analyse(samples []sample.Sample, judges func(sample.Sample) bool) ([]phases.Phase, phases.Interference) {
	return phases.Analyse(samples, phases.Options{NCPUs: len(j.meter.Spec().CPUs), Judged: judges})
}

// Waiter sleeps until t or until ctx is done; tests inject one that advances a fake clock.
type Waiter func(ctx context.Context, t time.Time) error

// RealWait is the production Waiter.
func RealWait(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// Loop calls cycle at every cycle boundary (NextTick of now() and period) until ctx is
// done; it returns nil then, or the Waiter's other error.
func Loop(ctx context.Context, now func() time.Time, period time.Duration, wait Waiter, cycle func()) error {
	for {
		if err := wait(ctx, NextTick(now(), period)); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return err
		}
		cycle()
	}
}
