package daemon

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/kmsg"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
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
	// Metrics counts the daemon's work for Prometheus (nil: not counted).
	Metrics *exporter.Daemon
}

// jobMeter is one job's measurement on this node.
type jobMeter struct {
	id       uint32
	uid      *uint32 // the job's user (Prepare; nil: not known)
	job      *pipeline.Job
	owned    string // persyst's own perf cgroup of the job ("" if none)
	starting bool   // its meter is being opened (outside the lock)
	// startDone is closed when the opening under way ends (waitStart).
	startDone chan struct{}
	ended     bool
	summary   sample.Summary // final, once ended
	// oomKills is the most OOM kills counted in the job's v1 memory cgroups, its steps'
	// and tasks' (stepOOMKills, at each step's end).
	oomKills int
	// oomKilled counts the kills the kernel logged in the job's memory cgroups (WatchOOM).
	oomKilled int
	// present: Slurm's cgroups of the job were found at the last cycle; vanished: they
	// were found once and are gone (the job may have ended unseen: Vanished).
	present, vanished bool
	// foundAt is when the job's cgroups were last looked for; refind asks the next cycle
	// to look again (a job or step started or ended since).
	foundAt  time.Time
	refind   bool
	digested bool // the digest was made (never twice)
	report   *digest.Report
	// facts is what the job map said of the job when its batch step started, looked up
	// then so that the digest does not ask while Slurm waits at the step's end; factsDone
	// is closed once the lookup is over (facts nil: it failed). Nil: none started.
	facts     *jobmap.Job
	factsDone chan struct{}
}

// Measurer measures the node's jobs: it owns the per-job perf cgroups, opens a Meter when
// a job starts, reads all meters at every cycle boundary and once more at job end.
type Measurer struct {
	cfg   MeasureConfig
	log   zerolog.Logger
	now   func() time.Time
	reg   *Registry
	node  string
	host  hostfs.FS
	env   *measure.Env
	mount jobcgroup.Mount // hierarchy for persyst's own perf cgroups
	// perfParent is <mount>/<CgroupParent> when persyst may create cgroups there.
	perfParent string
	perfWhy    string
	cpusetV1   bool // a v1 cpuset hierarchy is mounted (Slurm's job cpusets live there)
	// mounts are the cgroup hierarchies by key: a job's cgroup directory from an event
	// must lie under its hierarchy's mount.
	mounts map[string]string

	dig     DigestConfig
	reports reportStore
	samples sampleFiles

	mu   sync.Mutex
	jobs map[uint32]*jobMeter
	// starts counts the meters being opened in the background (Prepare).
	starts sync.WaitGroup
	kmsg   *kmsg.Log // the kernel's log followed for OOM kills (WatchOOM; nil: not)
	// unclaimed are OOM kills the kernel logged in no measured job's cgroups, kept for
	// a job whose meter is still being opened (a program killed as it starts).
	unclaimed []unclaimedKill
}

// NewMeasurer probes what this node can measure (perf events, cgroup hierarchies) and
// removes persyst cgroups of jobs the registry no longer knows as running.
func NewMeasurer(cfg MeasureConfig, reg *Registry, node string, log zerolog.Logger, now func() time.Time) (*Measurer, error) {
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
		return nil, fmt.Errorf("cgroup parent %q: want a relative path without ..", cfg.CgroupParent)
	}
	m := &Measurer{
		cfg: cfg, log: log.With().Str("part", "measure").Logger(), now: now, reg: reg, node: node,
		host: hostfs.New(cfg.Root), jobs: map[uint32]*jobMeter{}, dig: cfg.Digest, reports: newReportStore(cfg.StateDir),
	}
	m.samples = newSampleFiles(cfg.StateDir, measure.DefaultSampleBytes, m.log)
	m.samples.sweep(func(id uint32) bool { j := reg.Job(id); return j != nil && j.Ended == nil })
	if err := measure.CheckEnable(cfg.Enable, "", nil); err != nil {
		return nil, err
	}
	opts := measure.EnvOptions{Host: m.host, Enable: cfg.Enable, Log: m.log, Now: now}
	if cfg.Disabled {
		opts.PerfWhy = "measurement is turned off"
		m.env = measure.NewEnv(opts)
		return m, nil
	}
	opts.Energy = true
	mounts, err := jobcgroup.Mounts(m.host)
	if err != nil {
		return nil, err
	}
	m.mounts = map[string]string{}
	for _, mt := range mounts {
		m.cpusetV1 = m.cpusetV1 || (!mt.IsV2 && slices.Contains(mt.Ctrls, "cpuset"))
		m.mounts[mt.Key] = mt.Path
	}
	if mnt, ok := jobcgroup.PerfHierarchy(mounts); !ok {
		m.perfWhy = "no cgroup v2 or perf_event v1 hierarchy is mounted"
		m.log.Warn().Msg("perf events not measured: " + m.perfWhy)
	} else {
		m.mount = mnt
		parent := filepath.Join(mnt.Path, cfg.CgroupParent)
		if err := jobcgroup.Create(m.host, parent); err != nil {
			m.perfWhy = err.Error()
			m.log.Warn().Err(err).Msg("perf events not measured: cannot create persyst's cgroup")
		} else {
			m.perfParent = parent
		}
	}
	// Every perf event of the node's catalog is tried once, in persyst's cgroup.
	opts.PerfWhy, opts.ProbeCgroup = m.perfWhy, m.perfParent
	m.env = measure.NewEnv(opts)
	if m.perfParent == "" {
		return m, nil
	}
	// Stale cgroups may take a while to empty: removed in the background, so that the
	// daemon answers at once (the directories are listed before the running jobs are
	// read, so a job that starts meanwhile keeps its own).
	go m.sweep()
	if m.reports.dir != "" {
		m.reports.sweep(func(id uint32) bool { return reg.Job(id) != nil }, m.log)
	}
	return m, nil
}

// ownedDir is persyst's perf cgroup for job id.
func (m *Measurer) ownedDir(id uint32) string {
	return filepath.Join(m.perfParent, "job_"+strconv.FormatUint(uint64(id), 10))
}

// sweep removes persyst job cgroups left by a previous daemon for jobs that are not running.
func (m *Measurer) sweep() {
	ents, err := os.ReadDir(m.host.Path(m.perfParent))
	if err != nil {
		return
	}
	running := map[uint32]bool{}
	for _, j := range m.reg.Jobs() {
		if j.Ended == nil {
			running[j.JobID] = true
		}
	}
	for _, e := range ents {
		id, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), "job_"), 10, 32)
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "job_") || err != nil || running[uint32(id)] {
			continue
		}
		dir := filepath.Join(m.perfParent, e.Name())
		if err := jobcgroup.Remove(m.host, m.mount.Path, dir, time.Second); err != nil {
			m.log.Warn().Err(err).Msg("stale persyst cgroup not removed")
		} else {
			m.log.Info().Str("cgroup", dir).Msg("removed stale persyst cgroup")
		}
	}
}

// usesOwned says whether a job with these Slurm cgroups needs persyst's own perf cgroup:
// Slurm on cgroup v2 has a job directory perf can count in directly.
func (m *Measurer) usesOwned(cg map[string]string) bool {
	if m.perfParent == "" {
		return false
	}
	if _, ok := cg["unified"]; ok {
		return false
	}
	for k := range cg {
		if keyHas(k, "perf_event") {
			return false
		}
	}
	return true
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
	m.mu.Lock()
	jm := m.jobs[j.JobID]
	if jm == nil || jm.ended {
		// A new job (or a job id Slurm reused after the old job ended here).
		jm = &jobMeter{id: j.JobID}
		m.jobs[j.JobID] = jm
	}
	jm.refind = true // a step's cgroups appear with it
	uid := j.UID
	jm.uid = &uid
	needOwned := jm.owned == "" && m.usesOwned(j.Cgroups)
	m.mu.Unlock()
	if needOwned {
		dir := m.ownedDir(j.JobID)
		if err := jobcgroup.Create(m.host, dir); err != nil {
			m.log.Error().Err(err).Uint32("job", j.JobID).Msg("perf cgroup not created; perf events not measured for this job")
		} else {
			m.mu.Lock()
			jm.owned = dir
			m.mu.Unlock()
		}
	}
	if m.claimStart(jm) {
		m.starts.Add(1)
		go func() {
			defer m.starts.Done()
			m.finishStart(j, jm)
		}()
	}
	m.prefetch(j, jm)
	m.mu.Lock()
	defer m.mu.Unlock()
	return jm.owned
}

// startWait bounds how long the end of a job or step waits for its meter's opening.
const startWait = 10 * time.Second

// waitStart waits until an opening of jm's meter under way has ended (at most startWait):
// a step or job that ends moments after it started still gets its final read.
func (m *Measurer) waitStart(jm *jobMeter) {
	m.mu.Lock()
	done := jm.startDone
	m.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(startWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// prefetch looks the job up in the job map once its batch step has started, in the
// background: the digest at the step's end then needs no lookup (prefetched).
func (m *Measurer) prefetch(j *Job, jm *jobMeter) {
	if m.dig.Facts == nil || m.dig.Engine == nil || j.step("batch") == nil {
		return
	}
	m.mu.Lock()
	if jm.factsDone != nil {
		m.mu.Unlock()
		return
	}
	done := make(chan struct{})
	jm.factsDone = done
	m.mu.Unlock()
	timeout := m.dig.Timeout
	if timeout <= 0 {
		timeout = 4 * time.Second
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		f, err := m.dig.Facts.Job(ctx, strconv.FormatUint(uint64(j.JobID), 10))
		if err != nil {
			m.log.Debug().Err(err).Uint32("job", j.JobID).Msg("job not found in the job map at its start; looked up again at its end")
			return
		}
		m.mu.Lock()
		jm.facts = f
		m.mu.Unlock()
	}()
}

// start opens the job's meter once its cgroups are known (once: a start under way or
// done is not repeated).
func (m *Measurer) start(j *Job, jm *jobMeter) {
	if m.claimStart(jm) {
		m.finishStart(j, jm)
	}
}

// claimStart says whether the caller is to open jm's meter (none is open or being
// opened, and the job has not ended); then it marks the opening under way.
func (m *Measurer) claimStart(jm *jobMeter) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if jm.job != nil || jm.ended || jm.starting {
		return false
	}
	jm.starting = true
	jm.startDone = make(chan struct{})
	return true
}

// finishStart opens jm's meter (claimStart) and ends the opening.
func (m *Measurer) finishStart(j *Job, jm *jobMeter) {
	m.mu.Lock()
	owned := jm.owned
	m.mu.Unlock()
	job := m.open(j, owned)
	m.mu.Lock()
	defer m.mu.Unlock()
	jm.starting = false
	close(jm.startDone)
	jm.startDone = nil
	if job == nil {
		return
	}
	if jm.job != nil || jm.ended {
		job.Meter().Close()
		return
	}
	jm.job = job
	m.claimKills(jm)
}

// open builds the job's spec from its cgroups and starts its pipeline; nil when its
// cgroups are not there yet (the next event or cycle tries again) or it cannot be
// measured.
func (m *Measurer) open(j *Job, owned string) *pipeline.Job {
	if cur := m.reg.Job(j.JobID); cur != nil && cur.Recorded.Equal(j.Recorded) {
		j = cur // the latest record: a step's start brings the job's cores
	}
	cg := m.jobCgroups(j)
	if len(cg) == 0 {
		return nil
	}
	if m.cpusetV1 && !hasKey(cg, "cpuset") && m.now().Sub(j.Started) < cpusetWait {
		// Slurm creates the job's cpuset a moment after the prolog: wait for it, so that
		// per-CPU values cover the job's CPUs only (later: all online CPUs).
		return nil
	}
	spec := measure.Spec{Name: "job " + strconv.FormatUint(uint64(j.JobID), 10), StatCgroups: m.statCgroups(cg, owned)}
	for k, dir := range cg {
		if !keyHas(k, "cpuset") {
			continue
		}
		cpus, ok, err := m.host.CgroupCPUs(dir)
		if err == nil && ok {
			spec.CPUs = cpus
		} else if m.now().Sub(j.Started) < cpusetWait {
			// A new v1 cpuset lists no CPUs until Slurm writes them: measured now, the
			// job would be taken to run on every CPU of the node.
			return nil
		}
	}
	if d, ok := cg["unified"]; ok && len(spec.CPUs) == 0 {
		if cpus, ok, err := m.host.CgroupCPUs(d); err == nil && ok {
			spec.CPUs = cpus
		}
	}
	if len(spec.CPUs) > 0 {
		spec.Topology = m.host.Topology(spec.CPUs)
		if m.now().Sub(j.Started) < cpusetWait && !cpusetSettled(j, spec.Topology) {
			// Slurm creates a job's cpuset with its parent's CPUs and then narrows it to
			// the job's: read in between, a 1-CPU job would be measured on the whole node.
			return nil
		}
	}
	// What an earlier daemon measured of the job (it stopped while the job ran).
	prevHdr, prev, err := m.samples.load(j.JobID, j.Recorded)
	if err != nil {
		m.log.Warn().Err(err).Uint32("job", j.JobID).Msg("samples of an earlier daemon not restored")
		m.samples.remove(j.JobID)
	}
	// The job's processes count from their birth, so that what a task does before the
	// meter's first read (which comes a moment after the start, in the background) is
	// the job's however the timing falls. After a restart, the processes there are
	// counted from now: what they did before is in the earlier daemon's samples.
	spec.ProcsSince = j.Started
	if prevHdr != nil {
		spec.ProcsSince = m.now()
	}
	if prevHdr != nil && len(spec.CPUs) == 0 {
		if cpus, err := sample.ParseCPUList(prevHdr.CPUs); err == nil && len(cpus) > 0 {
			spec.CPUs, spec.Topology = cpus, prevHdr.Topology
		}
	}
	if len(spec.CPUs) == 0 {
		cpus, err := m.host.OnlineCPUs()
		if err != nil {
			m.log.Error().Err(err).Uint32("job", j.JobID).Msg("job not measured: no CPUs")
			return nil
		}
		spec.CPUs = cpus
	}
	if spec.Topology == nil {
		spec.Topology = m.host.Topology(spec.CPUs)
	}
	switch {
	case owned != "":
		spec.PerfCgroup = m.host.Path(owned)
		spec.ProcCgroup = owned
	case cg["unified"] != "" && m.perfParent != "":
		spec.PerfCgroup = m.host.Path(cg["unified"])
		spec.ProcCgroup = cg["unified"]
	default:
		spec.PerfWhy = m.perfWhy
		if spec.PerfWhy == "" {
			spec.PerfWhy = "no cgroup of the job to count perf events in"
		}
	}
	if spec.ProcCgroup == "" {
		for _, k := range []string{"pids", "freezer", "cpuacct", "cpu,cpuacct", "memory"} {
			if d, ok := cg[k]; ok {
				spec.ProcCgroup = d
				break
			}
		}
	}
	id := j.JobID
	spec.Exclusive = func() bool {
		if m.reg.Running() != 1 {
			return false
		}
		cur := m.reg.Job(id)
		return cur != nil && cur.Ended == nil
	}
	opts := pipeline.Options{Engine: m.dig.Engine}
	if a, ok := m.cfg.Uplink.(interface{ Alone(job uint32) }); ok && j.NNodes == 1 {
		a.Alone(id) // no other node will ask for this job's part
	}
	if up := m.cfg.Uplink; up != nil {
		opts.Records = func(t time.Time, seconds float64, recs []properties.Record, maxRecords int) {
			up.Send(id, t, seconds, recs, maxRecords)
		}
	}
	job := m.startKept(j, spec, opts, prevHdr, prev)
	if job == nil {
		return nil
	}
	m.log.Info().Uint32("job", j.JobID).Str("cpus", sample.FormatCPUList(spec.CPUs)).Str("perf_cgroup", spec.PerfCgroup).
		Str("procs", spec.ProcCgroup).Msg("measuring job")
	return job
}

// startKept starts the job's pipeline with its samples kept on disk, and restores what an
// earlier daemon measured of it (prev, from its header h; nil: nothing).
func (m *Measurer) startKept(j *Job, spec measure.Spec, opts pipeline.Options, h *sampleHeader, prev []sample.Sample) *pipeline.Job {
	id := j.JobID
	keep := sampleHeader{JobID: id, JobStarted: j.Recorded, CPUs: sample.FormatCPUList(spec.CPUs), Topology: spec.Topology}
	var job *pipeline.Job
	if m.samples.dir != "" {
		failed := false // the first failure of a job is logged
		opts.Keep = func(s sample.Sample) {
			if err := m.samples.add(keep, s, job.Meter().Samples); err != nil && !failed {
				failed = true
				m.log.Warn().Err(err).Uint32("job", id).Msg("samples not kept on disk: a daemon restart would lose them")
			}
		}
	}
	job, err := pipeline.Start(m.env, spec, opts)
	if err != nil {
		m.log.Error().Err(err).Uint32("job", j.JobID).Msg("job not measured")
		return nil
	}
	keep.Started = job.Summary().Started
	if h != nil {
		n, err := job.Restore(prev, h.Started, "the persyst daemon was not running")
		if err != nil {
			m.log.Warn().Err(err).Uint32("job", id).Msg("samples of an earlier daemon not restored")
		} else {
			keep.Started = h.Started
			m.log.Info().Uint32("job", id).Int("samples", n).Time("since", h.Started).Msg("measurement of an earlier daemon restored")
		}
	}
	if err := m.samples.write(keep, job.Meter().Samples()); err != nil {
		m.log.Warn().Err(err).Uint32("job", id).Msg("samples not kept on disk: a daemon restart would lose them")
	}
	return job
}

// cpusetWait is how long a job's meter waits for Slurm's cpuset cgroup of the job, and
// for it to hold the job's cores only (cpusetSettled).
const cpusetWait = 10 * time.Second

// cpusetSettled says whether a job's cpuset (its CPUs' topology) is the job's: no more
// physical cores than the job was allocated on the node (Slurm's list of the job's cores,
// which its steps' events bring: before the first step, not settled; a step without it,
// from a plugin that does not say, settled). Slurm counts cores, the cpuset lists their
// hardware threads.
func cpusetSettled(j *Job, topo []sample.CPUTopo) bool {
	if j.Cores == "" {
		return len(j.Steps) > 0
	}
	alloc, err := sample.ParseCPUList(j.Cores)
	if err != nil || len(alloc) == 0 {
		return true
	}
	seen := make(map[sample.Core]struct{}, len(topo))
	for _, t := range topo {
		seen[sample.Core{Socket: t.Socket, Core: t.Core}] = struct{}{}
	}
	return len(seen) <= len(alloc)
}

// refindEvery is how often a running job's cgroups are looked for when no event says that
// they changed (a cgroup made by a plugin without an event).
const refindEvery = 10 * time.Second

// hasKey says whether one of a job's cgroup hierarchies (cg's keys) has the controller ctrl.
func hasKey(cg map[string]string, ctrl string) bool {
	for k := range cg {
		if keyHas(k, ctrl) {
			return true
		}
	}
	return false
}

// keyHas says whether a v1 hierarchy's key ("cpu,cpuacct") names the controller ctrl.
func keyHas(key, ctrl string) bool { return strings.Contains(","+key+",", ","+ctrl+",") }

// jobCgroups returns the job's Slurm cgroup directories: those found in Slurm's layout
// on every hierarchy (slurmstepd itself joins only some, e.g. only freezer on v1), and
// those the plugin reported.
func (m *Measurer) jobCgroups(j *Job) map[string]string {
	cg, _ := m.jobCgroupsFound(j, nil)
	return cg
}

// jobCgroupsFound is jobCgroups, and whether Slurm's layout holds the job's cgroups now,
// on the cgroup hierarchies mounts (nil: read the mount table).
func (m *Measurer) jobCgroupsFound(j *Job, mounts []jobcgroup.Mount) (map[string]string, bool) {
	cg := map[string]string{}
	var found map[string]string
	var err error
	if mounts == nil {
		found, err = jobcgroup.Find(m.host, m.node, j.UID, j.JobID)
	} else {
		found = jobcgroup.FindIn(m.host, mounts, m.node, j.UID, j.JobID)
	}
	if err == nil {
		maps.Copy(cg, found)
	}
	for k, dir := range j.Cgroups {
		if why := m.badCgroup(k, dir, j.JobID); why != "" {
			m.log.Warn().Uint32("job", j.JobID).Str("hierarchy", k).Str("cgroup", dir).Str("why", why).Msg("cgroup from an event ignored")
			continue
		}
		cg[k] = dir
	}
	return cg, len(found) > 0
}

// badCgroup says why a job's cgroup directory from an event is not taken ("" : it is): it
// must be a clean absolute path under the mount of its hierarchy, in the job's own
// cgroup (a path component job_<id>, as Slurm names them).
func (m *Measurer) badCgroup(key, dir string, id uint32) string {
	mnt, ok := m.mounts[key]
	switch {
	case !filepath.IsAbs(dir) || filepath.Clean(dir) != dir:
		return "not a clean absolute path"
	case !ok:
		return "no such cgroup hierarchy on this node"
	case !strings.HasPrefix(dir, mnt+"/"):
		return "not under its hierarchy's mount " + mnt
	case !slices.Contains(strings.Split(dir, "/"), "job_"+strconv.FormatUint(uint64(id), 10)):
		return "not the job's own cgroup"
	}
	return ""
}

// statCgroups adds persyst's own v2 job cgroup (owned) to the Slurm ones: on hybrid
// hosts its cpu.stat gives the CPU time of the job's tasks even when Slurm made no
// cpuacct cgroup.
func (m *Measurer) statCgroups(cg map[string]string, owned string) map[string]string {
	out := maps.Clone(cg)
	if _, ok := out["unified"]; !ok && owned != "" && m.mount.IsV2 {
		out["unified"] = owned
	}
	return out
}

// End takes the job's final read, stops its counters and removes persyst's cgroup. A job
// this daemon never measured (it ended while the daemon was down) gets what an earlier
// daemon measured of it, for a late digest.
func (m *Measurer) End(id uint32) {
	m.mu.Lock()
	if jm := m.jobs[id]; jm != nil {
		m.mu.Unlock()
		m.waitStart(jm)
		m.mu.Lock()
	}
	jm := m.jobs[id]
	if jm != nil && jm.ended {
		m.mu.Unlock()
		return
	}
	if jm == nil {
		jm = &jobMeter{id: id}
		m.jobs[id] = jm
	}
	jm.ended = true
	if jm.job == nil && !jm.starting {
		jm.job = m.recorded(id)
	}
	recorded := jm.job != nil && jm.job.Meter().Summary().Ended
	m.mu.Unlock()
	defer m.samples.remove(id)
	if recorded {
		s := jm.job.Summary()
		m.mu.Lock()
		jm.summary = s
		m.mu.Unlock()
		m.log.Info().Uint32("job", id).Int("samples", s.Samples).Float64("seconds", s.Seconds).Msg("job measured by an earlier daemon")
	} else if jm.job != nil {
		s, err := jm.job.End()
		if err != nil {
			m.log.Debug().Err(err).Uint32("job", id).Msg("final read incomplete")
		}
		m.mu.Lock()
		jm.summary = s
		m.mu.Unlock()
		m.log.Info().Uint32("job", id).Int("samples", s.Samples).Float64("seconds", s.Seconds).Msg("job measured")
	}
	if m.cfg.Uplink != nil {
		m.cfg.Uplink.Forget(id)
	}
	owned := jm.owned
	if owned == "" && m.perfParent != "" {
		// Made by an earlier daemon.
		if st, err := os.Stat(m.host.Path(m.ownedDir(id))); err == nil && st.IsDir() {
			owned = m.ownedDir(id)
		}
	}
	if owned != "" {
		if err := jobcgroup.Remove(m.host, m.mount.Path, owned, 2*time.Second); err != nil {
			m.log.Warn().Err(err).Uint32("job", id).Msg("persyst cgroup not removed")
		}
	}
}

// recorded returns the pipeline of what an earlier daemon measured of job id, from its
// samples on disk; nil when there are none. m.mu is held.
func (m *Measurer) recorded(id uint32) *pipeline.Job {
	j := m.reg.Job(id)
	if j == nil || m.cfg.Disabled {
		return nil
	}
	h, prev, err := m.samples.load(id, j.Recorded)
	if err != nil {
		m.log.Warn().Err(err).Uint32("job", id).Msg("samples of an earlier daemon not read")
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
	return pipeline.Recorded(m.env, spec, pipeline.Options{Engine: m.dig.Engine}, h.Started, prev)
}

// StepEnded takes a read when one of the job's steps ended: the job's cgroups still
// exist then, while at job end Slurm may already have removed them.
func (m *Measurer) StepEnded(id uint32) {
	m.mu.Lock()
	if jm := m.jobs[id]; jm != nil {
		m.mu.Unlock()
		m.waitStart(jm)
		m.mu.Lock()
	}
	jm := m.jobs[id]
	var job *pipeline.Job
	if jm != nil && !jm.ended {
		job = jm.job
		jm.refind = true // the step's cgroups go (on v1 the job's may too)
	}
	m.mu.Unlock()
	if job != nil {
		if _, err := job.Read(sample.Step); err != nil {
			m.log.Debug().Err(err).Uint32("job", id).Msg("step-end read incomplete")
		}
		if n := m.stepOOMKills(jm); n > 0 {
			m.mu.Lock()
			jm.oomKills = max(jm.oomKills, n)
			m.mu.Unlock()
			m.log.Info().Uint32("job", id).Int("oom_kills", n).Msg("processes of the job were killed for lack of memory")
		}
	}
}

// Forget drops jobs the registry no longer holds.
// Their saved reports go with them: a report lives as long as the registry keeps its job.
func (m *Measurer) Forget(keep func(uint32) bool) {
	m.mu.Lock()
	for id, jm := range m.jobs {
		if jm.ended && !keep(id) {
			delete(m.jobs, id)
		}
	}
	m.mu.Unlock()
	m.reports.sweep(keep, m.log)
}

// Vanished returns the running jobs whose cgroups Slurm removed: a sign, not a proof
// (an allocation between steps may have none), that the job ended unseen.
func (m *Measurer) Vanished() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []uint32
	for id, jm := range m.jobs {
		if jm.vanished && !jm.ended {
			out = append(out, id)
		}
	}
	return out
}

// Summary returns a job's measurement so far, or nil.
func (m *Measurer) Summary(id uint32) *sample.Summary {
	m.mu.Lock()
	jm := m.jobs[id]
	m.mu.Unlock()
	if jm == nil {
		return nil
	}
	if jm.ended {
		m.mu.Lock()
		defer m.mu.Unlock()
		if jm.summary.Started.IsZero() {
			return nil
		}
		s := jm.summary
		return &s
	}
	if jm.job == nil {
		return nil
	}
	s := jm.job.Summary()
	return &s
}

// Samples returns a job's samples so far, or nil.
func (m *Measurer) Samples(id uint32) []sample.Sample {
	m.mu.Lock()
	jm := m.jobs[id]
	m.mu.Unlock()
	if jm == nil || jm.job == nil {
		return nil
	}
	return jm.job.Meter().Samples()
}

// Run reads every running job at each cycle boundary until ctx is done.
func (m *Measurer) Run(ctx context.Context, wait pipeline.Waiter) error {
	if m.cfg.Disabled {
		<-ctx.Done()
		return nil
	}
	return pipeline.Loop(ctx, m.now, m.cfg.Cycle, wait, m.cycle)
}

// cycle reads all running jobs; jobs whose cgroups were not known yet are retried.
func (m *Measurer) cycle() {
	defer func(start time.Time) { m.cfg.Metrics.Cycle(time.Since(start)) }(time.Now())
	jobs := m.reg.RunningJobs()
	byID := make(map[uint32]*Job, len(jobs))
	for _, j := range jobs {
		byID[j.JobID] = j
	}
	type read struct {
		jm    *jobMeter
		job   *pipeline.Job
		owned string
	}
	m.mu.Lock()
	var reads []read
	var starts []*jobMeter
	ids := make([]uint32, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		jm := m.jobs[id]
		switch {
		case jm.ended:
		case jm.job == nil:
			if j := byID[id]; j != nil && j.State == Running {
				starts = append(starts, jm)
			}
		default:
			reads = append(reads, read{jm, jm.job, jm.owned})
		}
	}
	m.mu.Unlock()
	// Files are read without the lock: a job's events are never held up by a cycle.
	for _, jm := range starts {
		m.start(byID[jm.id], jm) // its baseline is read now
	}
	now := m.now()
	var mounts []jobcgroup.Mount // read at most once a cycle, when a job's cgroups are looked for
	for _, r := range reads {
		// Slurm creates some of a job's cgroups after the job started (per step, or by
		// plugins that run later) and removes some before it ends: the job's cgroups are
		// looked for again after a step started or ended, when one of them was gone at
		// the last read, and at least every refindEvery.
		if j := byID[r.jm.id]; j != nil {
			gone := r.job.Meter().StatCgroupsGone()
			m.mu.Lock()
			find := r.jm.refind || gone || now.Sub(r.jm.foundAt) >= refindEvery
			r.jm.refind = false
			m.mu.Unlock()
			if find {
				if mounts == nil {
					if all, err := jobcgroup.Mounts(m.host); err != nil {
						m.log.Debug().Err(err).Msg("cgroup mounts not read")
					} else {
						// Only where Slurm's layout is can a job's cgroups be: looked
						// at once for all the jobs of the cycle.
						mounts = jobcgroup.WithSlurm(m.host, all, m.node)
						if mounts == nil {
							mounts = []jobcgroup.Mount{} // read: not again this cycle
						}
					}
				}
				found, present := m.jobCgroupsFound(j, mounts)
				r.job.Meter().SetStatCgroups(m.statCgroups(found, r.owned))
				m.mu.Lock()
				r.jm.foundAt = now
				r.jm.vanished = !present && (r.jm.vanished || r.jm.present)
				r.jm.present = present
				m.mu.Unlock()
			}
		}
		if _, err := r.job.Read(sample.Cycle); err != nil {
			m.log.Debug().Err(err).Uint32("job", r.jm.id).Msg("cycle read incomplete")
		}
	}
}
