package daemon

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/kmsg"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/measure/redfish"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/gres"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/nvml"
	"github.com/persyst/persyst/sample"
)

// MeasureConfig configures job measurement.
type MeasureConfig struct {
	// Root is the filesystem root ("/" in production).
	Root string
	// Cycle is the sampling period (reads at Unix times that are multiples of it).
	Cycle time.Duration
	// CgroupParent is the directory, under the perf hierarchy, where persyst creates a
	// cgroup per job when Slurm's own job cgroups cannot be used for perf events (cgroup
	// v1 without a perf_event hierarchy): "persyst_<node>" by default.
	CgroupParent string
	// Disabled turns measurement off (events are still recorded).
	Disabled bool
	// StateDir keeps job reports (StateDir/reports) for `persyst report`.
	StateDir string
	// Digest configures properties and the digest.
	Digest DigestConfig
	// Uplink, if set, carries each cycle's property records to the agent tree and
	// brings back the job-wide results of multi-node jobs.
	Uplink Uplink
	// Enable turns metric sources on or off by name (measure.Sources).
	Enable map[string]bool
	// SyscallBudget lets counting system calls sample beyond this share of one CPU (0:
	// every call; persyst.conf's SyscallBudget).
	SyscallBudget float64
	// GPUIndex is what a GRES index of SLURM_JOB_GPUS names: "slurmd" or "" (the device
	// GPUOrder gives it), "nvml" (NVML's index) or "minor" (the device's minor number;
	// persyst.conf's GPUIndex).
	GPUIndex string
	// GPUOrder is the node's GPUs in Slurm's order, asked of slurmd (nil: not asked; a
	// GRES index is then NVML's).
	GPUOrder *gres.Order
	// PowercapDir is where the node's powercap tree lies ("": the root's
	// sys/class/powercap; persyst.conf's PowercapDir).
	PowercapDir string
	// AMDGPUSysfs is the sysfs AMD GPUs are read in ("": the root's sys; persyst.conf's
	// AMDGPUSysfs).
	AMDGPUSysfs string
	// NodeMeter reads the node's own power meter, its BMC, at most once a cycle (nil:
	// none; persyst.conf's BMC keys).
	NodeMeter *redfish.Options
	// Metrics counts the daemon's work for Prometheus (nil: not counted).
	Metrics *exporter.Daemon
	// Notice says when a running job that holds resources without using them is told.
	Notice NoticeConfig
}

// Measurer measures the node's jobs: it opens a job's meter when the job starts (opener),
// reads every meter at each cycle boundary and once more at the job's end, counts their
// OOM kills (oomTracker) and makes their digests (digestPass), with what the job map
// says of them (jobLookups) and their reports kept (digester).
type Measurer struct {
	cfg   MeasureConfig
	log   zerolog.Logger
	now   func() time.Time
	reg   *Registry
	node  string
	host  hostfs.FS
	env   *measure.Env
	slurm slurmCgroups
	owned ownedCgroups

	meters  *meterSet
	open    *opener
	oom     *oomTracker
	lookups *jobLookups
	dig     *digester
	pass    *digestPass
	unann   *unannounced
	notices *noticer
	// starts counts the meters being opened in the background (Prepare).
	starts sync.WaitGroup
}

// withDefaults fills in what cfg leaves out, and refuses what it cannot be.
func (cfg MeasureConfig) withDefaults(node string) (MeasureConfig, error) {
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	if cfg.Cycle <= 0 {
		cfg.Cycle = 60 * time.Second
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "persyst_" + node
	}
	if strings.Contains(cfg.CgroupParent, "..") || strings.HasPrefix(cfg.CgroupParent, "/") {
		return cfg, fmt.Errorf("cgroup parent %q: want a relative path without ..", cfg.CgroupParent)
	}
	return cfg, measure.CheckEnable(cfg.Enable, "", nil)
}

// NewMeasurer probes what this node can measure (perf events, cgroup hierarchies) and
// removes persyst cgroups of jobs the registry no longer knows as running.
func NewMeasurer(cfg MeasureConfig, reg *Registry, node string, log zerolog.Logger, now func() time.Time) (*Measurer, error) {
	cfg, err := cfg.withDefaults(node)
	if err != nil {
		return nil, err
	}
	log = log.With().Str("part", "measure").Logger()
	m := &Measurer{cfg: cfg, log: log, now: now, reg: reg, node: node, host: hostfs.New(cfg.Root), meters: newMeterSet()}
	samples := newSampleFiles(cfg.StateDir, measure.DefaultSampleBytes, log)
	samples.sweep(func(id uint32) bool { j := reg.Job(id); return j != nil && j.Ended == nil })
	opts := measure.EnvOptions{Host: m.host, Enable: cfg.Enable, Log: log, Now: now, SyscallBudget: cfg.SyscallBudget,
		SyscallLinger: measure.SyscallLinger, NodeMeter: cfg.NodeMeter}
	var mounts []jobcgroup.Mount
	if cfg.Disabled {
		opts.PerfWhy = "measurement is turned off"
	} else {
		if mounts, err = jobcgroup.Mounts(m.host); err != nil {
			return nil, err
		}
		m.owned = newOwnedCgroups(m.host, mounts, cfg.CgroupParent, log)
		// Every perf event of the node's catalog is tried once, in persyst's cgroup.
		opts.Energy, opts.PowercapDir, opts.PerfWhy, opts.ProbeCgroup = true, cfg.PowercapDir, m.owned.why, m.owned.parent
		opts.GPU, opts.AMDGPUSysfs = &nvml.Options{}, cfg.AMDGPUSysfs
		if m.owned.mount.IsV2 {
			// System calls are counted with eBPF in the kernel this daemon runs on.
			opts.SyscallMount = m.host.Path(m.owned.mount.Path)
		}
	}
	m.env = measure.NewEnv(opts)
	m.slurm = newSlurmCgroups(m.host, node, mounts, jobcgroup.NewMountTable(m.host, now), log)
	m.oom = newOOMTracker(node, m.slurm.mounts, log, now, func(x kmsg.Xid) {
		if x.Hardware() {
			m.env.GPUErrors.Add(x.Bus)
			log.Warn().Str("gpu", x.Bus).Int("xid", x.Code).Str("text", x.Text).Msg("the NVIDIA driver reported a hardware error")
		}
	})
	m.oom.following = m.env.GPUErrors.Following
	m.unann = newUnannounced(m.host, node, reg, cfg.Metrics, log, now)
	m.digests(cfg.Digest.withDefaults())
	var appendNotice func(ctx context.Context, t digest.Target, text []byte) error
	if !cfg.Digest.Off {
		appendNotice = cfg.Digest.Append // a line in the output file, where digests go
	}
	ncfg := cfg.Notice
	if cfg.Uplink != nil {
		ncfg.Up = cfg.Uplink.KeepNotice // the site's view of the running jobs told
	}
	m.notices = newNoticer(ncfg, appendNotice, cfg.Metrics, log, now)
	m.open = &opener{env: m.env, slurm: m.slurm, samples: samples, reg: reg, engine: cfg.Digest.Engine, uplink: cfg.Uplink, log: log, now: now,
		node: specNode{Host: m.host, Topology: m.host.Topology, CpusetV1: m.slurm.cpusetV1, PerfParent: m.owned.parent, PerfWhy: m.owned.why, OwnedV2: m.owned.mount.IsV2, GPUIndex: cfg.GPUIndex}}
	if o := cfg.GPUOrder; o != nil {
		m.open.node.GPUOrder = o.Get
		go logGPUOrder(o, log)
	}
	if m.owned.parent == "" {
		return m, nil
	}
	// Stale cgroups may take a while to empty: removed in the background, so that the
	// daemon answers at once.
	go m.owned.sweep(func() map[uint32]bool {
		running := map[uint32]bool{}
		for _, j := range reg.Jobs() {
			if j.Ended == nil {
				running[j.JobID] = true
			}
		}
		return running
	})
	if m.dig.reports.dir != "" {
		m.dig.reports.sweep(func(id uint32) bool { return reg.Job(id) != nil }, log)
	}
	return m, nil
}

// digests makes the parts of the digests: the job map's lookups, the reports kept and
// written, and the pass that makes a digest with them.
func (m *Measurer) digests(cfg DigestConfig) {
	m.lookups = newJobLookups(cfg, m.cfg.Cycle, m.log, m.now)
	m.dig = &digester{off: cfg.Off, appendText: cfg.Append, uplink: m.cfg.Uplink, reports: newReportStore(m.cfg.StateDir),
		metrics: m.cfg.Metrics, log: m.log, kept: map[uint32]*digest.Report{}}
	m.pass = &digestPass{engine: cfg.Engine, timeout: cfg.Timeout, node: m.node, cycle: m.cfg.Cycle, uplink: m.cfg.Uplink, co2: cfg.CO2PerKWh,
		lookups: m.lookups, oom: m.oom, dig: m.dig, log: m.log, now: m.now,
		acct: accountant{write: cfg.Accounting, facts: cfg.Facts, metrics: m.cfg.Metrics, log: m.log}}
}

// Prepare is called for a job or step start of a measured job: it creates persyst's perf
// cgroup for the job when one is needed and returns it, so the plugin can move the
// step's tasks into it; the job's meter is opened in the background if its cgroups are
// known (Slurm waits for the answer; opening the counters takes ~5-30 ms, and counting
// from a few milliseconds later loses nothing: a job's start-up is never judged).
// No lock is held while files are read or created.
func (m *Measurer) Prepare(j *Job) (join string) {
	if m.cfg.Disabled || j.State != Running {
		return ""
	}
	m.oom.watch(j.JobID, j.UID)
	owned := m.owned.forJob(j)
	jm := m.meters.meter(j.JobID, true) // a new one when Slurm runs the job again (requeued)
	join, open := jm.started(owned)
	m.slurm.layout.Invalidate() // a step's cgroups appear with it
	if open {
		m.starts.Add(1)
		go func() {
			defer m.starts.Done()
			if job := jm.open(func() (*pipeline.Job, error) { return m.open.open(j, join) }, m.log); job != nil {
				m.oom.measure(j.JobID, job.Meter().Spec().StatCgroups)
			}
		}()
	}
	m.lookups.prefetch(j) // nothing when the reconciler's answer is awaited (Restore)
	return join
}

// Restore measures again, at once, a running job a previous daemon left whose cgroups
// are still there (Slurm's layout, or the directories its events named: 26.05's SLUID
// names). The job map is not asked here: the reconciler's first round asks about every
// such job, and the digest awaits that answer instead of asking beside it.
func (m *Measurer) Restore(j *Job, mounts func() []jobcgroup.Mount) bool {
	if m.cfg.Disabled || j.State != Running || !m.slurm.present(j, mounts()) {
		return false
	}
	m.lookups.await(j)
	m.Prepare(j)
	return true
}

// StepEnded follows the end of one of job j's steps (step): a read while the job's
// cgroups are still there (at the job's end Slurm may already have removed them), then
// the job's digest at its batch step's end, or the report of a job without a batch
// script at each of its steps' ends on its first node (interactive: kept for `persyst
// report`, which srun runs at the end of a job it started, and written into no file; its
// error is returned). A batch digest not written is the digester's to log, not an error
// of the event: the plugin, which waits for the answer, must not take it for a daemon
// that is down.
func (m *Measurer) StepEnded(ctx context.Context, j *Job, step string) error {
	mode, digest := atBatchEnd, step == "batch" && j.State == Running
	if step != "batch" && step != "extern" {
		mode, digest = interactive, reportsHere(j)
	}
	digest = digest && m.pass.engine != nil && j.State != OptedOut
	jm := m.meters.settled(j.JobID)
	if jm == nil {
		return nil
	}
	read, pj := jm.atStepEnd(mode, digest)
	m.slurm.layout.Invalidate()
	if read != nil {
		if _, err := read.Read(sample.Step); err != nil {
			m.log.Debug().Err(err).Uint32("job", j.JobID).Msg("step-end read incomplete")
		}
		m.oom.stepEnded(m.host, j.JobID, read.Meter().Spec().StatCgroups)
	}
	if pj == nil {
		return nil
	}
	if err := m.pass.make(ctx, j, pj, mode, nil); err != nil && mode == interactive {
		return err
	}
	return nil
}

// reportsHere says whether this node makes job j's report at its steps' ends and its
// end: a job without a batch script (srun, salloc) that ran a step, on its first node.
func reportsHere(j *Job) bool {
	return j.step("batch") == nil && j.NodeID == 0 && len(j.Steps) > 0
}

// End follows job j's end: its final read (end), then the report of a job without a
// batch script, made on its first node (reportsHere; its error is returned).
func (m *Measurer) End(ctx context.Context, j *Job) error {
	m.end(j.JobID)
	if !reportsHere(j) {
		return nil
	}
	return m.digest(ctx, j, interactive, nil)
}

// end takes the job's final read, stops its counters and removes persyst's cgroup. A job
// this daemon never measured (it ended while the daemon was down) gets what an earlier
// daemon measured of it, for a late digest.
func (m *Measurer) end(id uint32) {
	jm := m.meters.meter(id, false)
	jm.waitOpened()
	job, first := jm.end(func() *pipeline.Job {
		if m.cfg.Disabled {
			return nil
		}
		return m.open.recorded(id)
	})
	if !first {
		return
	}
	m.oom.end(id)
	defer m.open.samples.remove(id)
	switch {
	case job != nil && job.Meter().Summary().Ended:
		s := job.Summary()
		jm.setFinal(s)
		m.log.Info().Uint32("job", id).Int("samples", s.Samples).Float64("seconds", s.Seconds).Msg("job measured by an earlier daemon")
	case job != nil:
		s, err := job.End()
		if err != nil {
			m.log.Debug().Err(err).Uint32("job", id).Msg("final read incomplete")
		}
		jm.setFinal(s)
		m.log.Info().Uint32("job", id).Int("samples", s.Samples).Float64("seconds", s.Seconds).Msg("job measured")
	}
	if m.cfg.Uplink != nil {
		m.cfg.Uplink.Forget(id)
	}
	m.owned.remove(id, jm.ownedCgroup())
}

// Forget drops jobs the registry no longer holds.
// Their saved reports go with them: a report lives as long as the registry keeps its job.
func (m *Measurer) Forget(keep func(uint32) bool) {
	for _, id := range m.meters.forget(keep) {
		m.oom.forget(id)
	}
	m.lookups.forget(keep)
	m.dig.forget(keep)
	m.notices.forget(keep)
}

// Vanished returns the running jobs whose cgroups Slurm removed: a sign, not a proof
// (an allocation between steps may have none), that the job ended unseen.
func (m *Measurer) Vanished() []uint32 {
	var out []uint32
	for _, jm := range m.meters.sorted() {
		if jm.vanished() {
			out = append(out, jm.id)
		}
	}
	return out
}

// Summary returns a job's measurement so far, or nil.
func (m *Measurer) Summary(id uint32) *sample.Summary {
	if jm := m.meters.get(id); jm != nil {
		return jm.summary()
	}
	return nil
}

// Samples returns a job's samples so far, or nil.
func (m *Measurer) Samples(id uint32) []sample.Sample {
	if jm := m.meters.get(id); jm != nil {
		if job := jm.pipeline(); job != nil {
			return job.Meter().Samples()
		}
	}
	return nil
}

// Run reads every running job at each cycle boundary until ctx is done.
func (m *Measurer) Run(ctx context.Context, wait pipeline.Waiter) error {
	if m.cfg.Disabled {
		<-ctx.Done()
		return nil
	}
	go m.unann.watch(ctx, func() []jobcgroup.Mount { return m.slurm.lookOnce()() })
	if m.cfg.Cycle > suspendEvery {
		// With a cycle as short as the watch's period the cycle's own reads find a
		// suspension as soon (the suspend source).
		sw := suspendWatch{meters: m.meters, log: m.log}
		go sw.run(ctx, suspendEvery)
	}
	return pipeline.Loop(ctx, m.now, m.cfg.Cycle, wait, m.cycle)
}

// cycle reads all running jobs; jobs whose cgroups were not known yet are retried. Files
// are read without any lock of the measurer's: a job's events are never held up by a
// cycle.
func (m *Measurer) cycle() {
	defer func(start time.Time) { m.cfg.Metrics.Cycle(time.Since(start)) }(time.Now())
	jobs := m.reg.RunningJobs()
	byID := make(map[uint32]*Job, len(jobs))
	for _, j := range jobs {
		byID[j.JobID] = j
	}
	type read struct {
		jm  *jobMeter
		job *pipeline.Job
	}
	var reads []read
	for _, jm := range m.meters.sorted() {
		switch st, job := jm.now(); st {
		case waiting:
			if j := byID[jm.id]; j != nil && j.State == Running {
				// Once: an opening under way or done is not repeated. Its baseline is
				// read now.
				if jm.claimOpen() {
					if job := jm.open(func() (*pipeline.Job, error) { return m.open.open(j, jm.ownedCgroup()) }, m.log); job != nil {
						m.oom.measure(j.JobID, job.Meter().Spec().StatCgroups)
					}
				}
			}
		case measuring:
			reads = append(reads, read{jm, job})
		}
	}
	now := m.now()
	look := m.slurm.lookOnce()
	for _, r := range reads {
		// Slurm creates some of a job's cgroups after the job started (per step, or by
		// plugins that run later) and removes some before it ends: the job's cgroups are
		// looked for again after a step started or ended, when one of them was gone at
		// the last read, and at least every refindEvery.
		if j := byID[r.jm.id]; j != nil && r.jm.lookDue(now, r.job.Meter().StatCgroupsGone()) {
			found, present := m.slurm.find(j, look())
			stat := statCgroups(found, r.jm.ownedCgroup(), m.owned.mount.IsV2)
			r.job.Meter().SetStatCgroups(stat)
			m.oom.measure(j.JobID, stat)
			r.jm.looked(now, present)
		}
		if _, err := r.job.Read(sample.Cycle); err != nil {
			m.log.Debug().Err(err).Uint32("job", r.jm.id).Msg("cycle read incomplete")
		}
		// A job that holds what it does not use is told, by its batch host.
		if j := byID[r.jm.id]; j != nil && m.notices.on() && j.step("batch") != nil {
			if l, ok := r.job.Latest(); ok {
				m.notices.judge(j, l.Sample, len(r.job.Meter().Spec().CPUs), m.lookups.atStart(j))
			}
		}
	}
	m.unann.atCycle(look)
}

// Unannounced says what the daemon saw of jobs Slurm ran on this node that persyst's
// plugin did not announce.
func (m *Measurer) Unannounced() UnannouncedJobs { return m.unann.report() }

// LateDigest makes the digest of a job that ended while this node's daemon was not
// running (or missed its end): from what was measured of it, marked as made after the
// job ended, and appended to its output file if that is still the job's. facts is what
// the job map said of the job when its end was found (nil: it knew nothing of it); the
// job is not looked up again.
func (m *Measurer) LateDigest(ctx context.Context, j *Job, facts *jobmap.Job) error {
	return m.digest(ctx, j, late, facts)
}

// digest makes job j's digest once its meter's opening (if under way) is over, once per
// run (digestPass.make).
func (m *Measurer) digest(ctx context.Context, j *Job, mode digestMode, known *jobmap.Job) error {
	if m.pass.engine == nil || j.State == OptedOut {
		return nil
	}
	jm := m.meters.settled(j.JobID) // a job that ended moments after it started
	if jm == nil {
		return nil
	}
	if pj := jm.forDigest(mode); pj != nil {
		return m.pass.make(ctx, j, pj, mode, known)
	}
	return nil
}

// WatchOOM counts the OOM kills the kernel logs in each measured job's cgroups until ctx
// is done (oomTracker.follow).
func (m *Measurer) WatchOOM(ctx context.Context) {
	if !m.cfg.Disabled {
		m.oom.follow(ctx, m.host)
	}
}

// logGPUOrder says, once slurmd answered, which device each of the node's GRES indices
// is, or why they are taken as NVML's.
func logGPUOrder(o *gres.Order, log zerolog.Logger) {
	gpus, err := o.Wait(context.Background()) // slurmd's run is bounded
	if err != nil {
		log.Warn().Err(err).Msg("Slurm's order of the node's GPUs not read: a job's GPU indices are taken as NVML's")
		return
	}
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = cmp.Or(g.ID(), "?("+g.Why+")")
	}
	log.Info().Strs("gpus", ids).Msg("the node's GPUs in Slurm's order (slurmd -G)")
}
