package daemon

import (
	"errors"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// opener opens jobs' meters: from Slurm's cgroups of a job to its running pipeline, with
// the samples it keeps on disk (a restarted daemon restores them).
type opener struct {
	env     *measure.Env
	node    specNode
	slurm   slurmCgroups
	samples sampleFiles
	reg     *Registry
	engine  *properties.Engine
	uplink  Uplink
	log     zerolog.Logger
	now     func() time.Time
}

// open opens job j's meter; an error wrapping errNotYet says that its cgroups are not
// there or not settled yet (the next event or cycle tries again).
func (o *opener) open(j *Job, owned string) (*pipeline.Job, error) {
	if cur := o.reg.Job(j.JobID); cur != nil && cur.Recorded.Equal(j.Recorded) {
		j = cur // the latest record: a step's start brings the job's cores
	}
	in, prev := o.read(j, owned)
	spec, err := jobSpec(o.node, in)
	if err != nil {
		return nil, err
	}
	id := j.JobID
	spec.Exclusive = func() bool {
		if o.reg.Running() != 1 {
			return false
		}
		cur := o.reg.Job(id)
		return cur != nil && cur.Ended == nil
	}
	spec.CPUShare = func() float64 { return cpuShare(o.reg.RunningJobs(), id) }
	opts := pipeline.Options{Engine: o.engine}
	if a, ok := o.uplink.(interface{ Alone(job uint32) }); ok && j.NNodes == 1 {
		a.Alone(id) // no other node will ask for this job's part
	}
	if up := o.uplink; up != nil {
		opts.Records = func(t time.Time, seconds float64, recs []properties.Record, maxRecords int, energy sample.Energy) {
			up.Send(id, t, seconds, recs, maxRecords, energy)
		}
	}
	job, err := o.startKept(j, spec, opts, in.Prev, prev)
	if err != nil {
		return nil, err
	}
	o.log.Info().Uint32("job", id).Str("cpus", sample.FormatCPUList(spec.CPUs)).Str("perf_cgroup", spec.PerfCgroup).
		Str("procs", spec.ProcCgroup).Msg("measuring job")
	return job, nil
}

// cpuShare is job id's share of the cores the running jobs hold on the node (Slurm's
// lists of their cores); where one's cores are not known, one job's share of them all.
func cpuShare(running []*Job, id uint32) float64 {
	mine, all, found := 0, 0, false
	for _, j := range running {
		cores, err := sample.ParseCPUList(j.Cores)
		if j.Cores == "" || err != nil || len(cores) == 0 {
			all = -1
		} else if all >= 0 {
			all += len(cores)
		}
		if j.JobID == id {
			mine, found = len(cores), true
		}
	}
	switch {
	case !found || len(running) == 0:
		return 0
	case all <= 0:
		return 1 / float64(len(running))
	}
	return float64(mine) / float64(all)
}

// read reads what job j's spec is made of: its cgroups, their CPUs, what an earlier
// daemon measured of it (it stopped while the job ran: the header, and the samples) and
// the node's CPUs.
func (o *opener) read(j *Job, owned string) (specInput, []sample.Sample) {
	cg, _ := o.slurm.find(j, nil)
	in := specInput{ID: j.JobID, Started: j.Started, Cores: j.Cores, GPUs: j.GPUs, Steps: len(j.Steps), Cgroups: cg,
		CPUs: o.slurm.cpus(cg), Owned: owned, Now: o.now()}
	if len(cg) == 0 {
		return in, nil
	}
	prev, samples, err := o.samples.load(j.JobID, j.Recorded)
	if err != nil {
		o.log.Warn().Err(err).Uint32("job", j.JobID).Msg("samples of an earlier daemon not restored")
		o.samples.remove(j.JobID)
	}
	in.Prev = prev
	online, err := o.slurm.host.OnlineCPUs()
	if err != nil {
		o.log.Error().Err(err).Uint32("job", j.JobID).Msg("the node's online CPUs not read")
	}
	in.Online = online
	return in, samples
}

// startKept starts the job's pipeline with its samples kept on disk, and restores what an
// earlier daemon measured of it (prev, from its header h; nil: nothing).
func (o *opener) startKept(j *Job, spec measure.Spec, opts pipeline.Options, h *sampleHeader, prev []sample.Sample) (*pipeline.Job, error) {
	id := j.JobID
	keep := sampleHeader{JobID: id, JobStarted: j.Recorded, CPUs: sample.FormatCPUList(spec.CPUs), Topology: spec.Topology}
	var job *pipeline.Job
	if o.samples.dir != "" {
		failed := false // the first failure of a job is logged
		opts.Keep = func(s sample.Sample) {
			if err := o.samples.add(keep, s, job.Meter().Samples); err != nil && !failed {
				failed = true
				o.log.Warn().Err(err).Uint32("job", id).Msg("samples not kept on disk: a daemon restart would lose them")
			}
		}
	}
	job, err := pipeline.Start(o.env, spec, opts)
	if err != nil {
		return nil, err
	}
	keep.Started = job.Summary().Started
	if h != nil {
		n, err := job.Restore(prev, h.Started, "the persyst daemon was not running")
		if err != nil {
			o.log.Warn().Err(err).Uint32("job", id).Msg("samples of an earlier daemon not restored")
		} else {
			keep.Started = h.Started
			o.log.Info().Uint32("job", id).Int("samples", n).Time("since", h.Started).Msg("measurement of an earlier daemon restored")
		}
	}
	if err := o.samples.write(keep, job.Meter().Samples()); err != nil {
		o.log.Warn().Err(err).Uint32("job", id).Msg("samples not kept on disk: a daemon restart would lose them")
	}
	return job, nil
}

// recorded returns the pipeline of what an earlier daemon measured of job id, from its
// samples on disk; nil when there are none.
func (o *opener) recorded(id uint32) *pipeline.Job {
	j := o.reg.Job(id)
	if j == nil {
		return nil
	}
	h, prev, err := o.samples.load(id, j.Recorded)
	if err != nil {
		o.log.Warn().Err(err).Uint32("job", id).Msg("samples of an earlier daemon not read")
		return nil
	}
	if h == nil {
		return nil
	}
	cpus, err := sample.ParseCPUList(h.CPUs)
	if err != nil || len(cpus) == 0 {
		return nil
	}
	spec := measure.Spec{Name: "job " + strconv.FormatUint(uint64(id), 10), CPUs: cpus, Topology: h.Topology}
	return pipeline.Recorded(o.env, spec, pipeline.Options{Engine: o.engine}, h.Started, prev)
}

// notYet says whether err only means that the meter cannot be opened yet.
func notYet(err error) bool { return errors.Is(err, errNotYet) }
