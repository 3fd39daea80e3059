package daemon

import (
	"context"
	"errors"
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

	"github.com/persyst/persyst/daemon/cgstats"
	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/netstat"
	"github.com/persyst/persyst/daemon/perfcg"
	"github.com/persyst/persyst/daemon/procio"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
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
	// Ship, if set, sends each cycle's property records to the job's collector.
	Ship *Shipper
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

// jobMeter is one job's measurement on this node.
type jobMeter struct {
	id       uint32
	meter    *measure.Meter
	owned    string // persyst's own perf cgroup of the job ("" if none)
	ended    bool
	summary  measure.Summary         // final, once ended
	acc      *properties.Accumulator // property records, sample by sample
	digested bool                    // the digest was made (never twice)
	report   *digest.Report
}

// Measurer measures the node's jobs: it owns the per-job perf cgroups, opens a Meter when
// a job starts, reads all meters at every cycle boundary and once more at job end.
type Measurer struct {
	cfg   MeasureConfig
	log   zerolog.Logger
	now   func() time.Time
	reg   *Registry
	node  string
	fs    jobcgroup.FS
	mfs   measure.FS
	env   *measure.Env
	mount jobcgroup.Mount // hierarchy for persyst's own perf cgroups
	// perfParent is <mount>/<CgroupParent> when persyst may create cgroups there.
	perfParent string
	perfWhy    string
	cpusetV1   bool // a v1 cpuset hierarchy is mounted (Slurm's job cpusets live there)

	dig      DigestConfig
	stateDir string

	mu   sync.Mutex
	jobs map[uint32]*jobMeter
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
		fs: jobcgroup.FS{Root: cfg.Root}, mfs: measure.FS{Root: cfg.Root},
		jobs: map[uint32]*jobMeter{}, dig: cfg.Digest, stateDir: cfg.StateDir,
	}
	m.env = &measure.Env{
		Stats: cgstats.NewReader(m.fs, cgstats.Options{}),
		Proc:  procio.FS{Root: cfg.Root},
		Net:   netstat.FS{Root: cfg.Root},
		Log:   m.log,
		Now:   now,
	}
	if cfg.Disabled {
		return m, nil
	}
	m.openEnergy()
	// Until the probe below succeeds, every perf event is not measured, for this reason.
	notPerf := func(why string) {
		m.perfWhy = why
		m.env.Unavailable = map[string]string{}
		for _, e := range perfcg.Catalog() {
			m.env.Unavailable[e.Name] = "not measured: " + why
		}
	}
	mounts, err := m.fs.Mounts()
	if err != nil {
		return nil, err
	}
	for _, mt := range mounts {
		m.cpusetV1 = m.cpusetV1 || (!mt.IsV2 && slices.Contains(mt.Ctrls, "cpuset"))
	}
	mnt, ok := jobcgroup.PerfHierarchy(mounts)
	if !ok {
		notPerf("no cgroup v2 or perf_event v1 hierarchy is mounted")
		m.log.Warn().Msg("perf events not measured: " + m.perfWhy)
		return m, nil
	}
	m.mount = mnt
	parent := filepath.Join(mnt.Path, cfg.CgroupParent)
	if err := m.fs.Create(parent); err != nil {
		notPerf(err.Error())
		m.log.Warn().Err(err).Msg("perf events not measured: cannot create persyst's cgroup")
		return m, nil
	}
	m.perfParent = parent
	probed, err := perfcg.Probe(perfcg.FS{Root: cfg.Root}, filepath.Join(cfg.Root, parent), m.log)
	if err != nil {
		notPerf(err.Error())
		m.log.Warn().Err(err).Msg("perf events not measured")
	} else {
		m.env.Unavailable = map[string]string{}
		for _, st := range probed {
			if !st.Available {
				m.env.Unavailable[st.Event.Name] = "not available: " + perfcg.Reason(st.Event, st.Err)
			}
		}
		m.env.Events = perfcg.WithIPC(probed.Available())
		names := make([]string, 0, len(m.env.Events))
		for _, e := range m.env.Events {
			names = append(names, e.Name)
		}
		m.log.Info().Strs("events", names).Int("not_available", len(m.env.Unavailable)).Str("cgroups", parent).Msg("perf events probed")
	}
	m.sweep()
	if m.stateDir != "" {
		m.sweepReports(func(id uint32) bool { return reg.Job(id) != nil })
	}
	return m, nil
}

// openEnergy opens the node's RAPL energy counters, if the kernel has them.
func (m *Measurer) openEnergy() {
	pfs := perfcg.FS{Root: m.cfg.Root}
	evs, err := pfs.PowerEvents()
	if err == nil {
		var cpus []int
		if cpus, err = m.mfs.OnlineCPUs(); err == nil {
			m.env.Energy, err = perfcg.OpenEnergy(evs, pfs.PackageCPUs(cpus))
		}
	}
	if err != nil {
		m.env.EnergyWhy = "not available: " + err.Error()
		m.log.Info().Err(err).Msg("energy (RAPL) not measured")
	}
}

// ownedDir is persyst's perf cgroup for job id.
func (m *Measurer) ownedDir(id uint32) string {
	return filepath.Join(m.perfParent, "job_"+strconv.FormatUint(uint64(id), 10))
}

// sweep removes persyst job cgroups left by a previous daemon for jobs that are not running.
func (m *Measurer) sweep() {
	ents, err := os.ReadDir(filepath.Join(m.cfg.Root, m.perfParent))
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
		if err := m.fs.Remove(m.mount.Path, dir, time.Second); err != nil {
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
		if strings.Contains(","+k+",", ",perf_event,") {
			return false
		}
	}
	return true
}

// Prepare is called for a job or step start of a measured job: it creates persyst's perf
// cgroup for the job when one is needed and returns it, so the plugin can move the
// step's tasks into it; then it starts measuring the job if its cgroups are known.
func (m *Measurer) Prepare(j *Job) (join string) {
	if m.cfg.Disabled || j.State != Running {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	jm := m.jobs[j.JobID]
	if jm == nil {
		jm = &jobMeter{id: j.JobID}
		m.jobs[j.JobID] = jm
	}
	if jm.owned == "" && m.usesOwned(j.Cgroups) {
		dir := m.ownedDir(j.JobID)
		if err := m.fs.Create(dir); err != nil {
			m.log.Error().Err(err).Uint32("job", j.JobID).Msg("perf cgroup not created; perf events not measured for this job")
		} else {
			jm.owned = dir
		}
	}
	m.startLocked(j, jm)
	return jm.owned
}

// startLocked opens the job's meter once its cgroups are known.
func (m *Measurer) startLocked(j *Job, jm *jobMeter) {
	if jm.meter != nil || jm.ended {
		return
	}
	cg := m.jobCgroups(j)
	if len(cg) == 0 {
		return // not created yet: the next event or cycle tries again
	}
	if m.cpusetV1 && !hasKey(cg, "cpuset") && m.now().Sub(j.Started) < cpusetWait {
		// Slurm creates the job's cpuset a moment after the prolog: wait for it, so that
		// per-CPU values cover the job's CPUs only (later: all online CPUs).
		return
	}
	spec := measure.Spec{Name: "job " + strconv.FormatUint(uint64(j.JobID), 10), StatCgroups: m.statCgroups(cg, jm)}
	for k, dir := range cg {
		if cpus, ok, err := m.mfs.CgroupCPUs(dir); err == nil && ok && strings.Contains(","+k+",", ",cpuset,") {
			spec.CPUs = cpus
		}
	}
	if d, ok := cg["unified"]; ok && len(spec.CPUs) == 0 {
		if cpus, ok, err := m.mfs.CgroupCPUs(d); err == nil && ok {
			spec.CPUs = cpus
		}
	}
	if len(spec.CPUs) == 0 {
		cpus, err := m.mfs.OnlineCPUs()
		if err != nil {
			m.log.Error().Err(err).Uint32("job", j.JobID).Msg("job not measured: no CPUs")
			return
		}
		spec.CPUs = cpus
	}
	spec.Topology = m.mfs.Topology(spec.CPUs)
	switch {
	case jm.owned != "":
		spec.PerfCgroup = filepath.Join(m.cfg.Root, jm.owned)
		spec.ProcCgroup = jm.owned
	case cg["unified"] != "" && m.perfParent != "":
		spec.PerfCgroup = filepath.Join(m.cfg.Root, cg["unified"])
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
	meter, err := measure.Open(m.env, spec)
	if err != nil {
		m.log.Error().Err(err).Uint32("job", j.JobID).Msg("job not measured")
		return
	}
	jm.meter = meter
	m.log.Info().Uint32("job", j.JobID).Str("cpus", measure.FormatCPUList(spec.CPUs)).Str("perf_cgroup", spec.PerfCgroup).
		Str("procs", spec.ProcCgroup).Msg("measuring job")
}

// cpusetWait is how long a job's meter waits for Slurm's cpuset cgroup of the job.
const cpusetWait = 10 * time.Second

func hasKey(cg map[string]string, ctrl string) bool {
	for k := range cg {
		if strings.Contains(","+k+",", ","+ctrl+",") {
			return true
		}
	}
	return false
}

// jobCgroups returns the job's Slurm cgroup directories: those found in Slurm's layout
// on every hierarchy (slurmstepd itself joins only some, e.g. only freezer on v1), and
// those the plugin reported.
func (m *Measurer) jobCgroups(j *Job) map[string]string {
	cg := map[string]string{}
	if found, err := m.fs.Find(m.node, j.UID, j.JobID); err == nil {
		maps.Copy(cg, found)
	}
	maps.Copy(cg, j.Cgroups)
	return cg
}

// statCgroups adds persyst's own v2 job cgroup to the Slurm ones: on hybrid hosts its
// cpu.stat gives the CPU time of the job's tasks even when Slurm made no cpuacct cgroup.
func (m *Measurer) statCgroups(cg map[string]string, jm *jobMeter) map[string]string {
	out := maps.Clone(cg)
	if _, ok := out["unified"]; !ok && jm.owned != "" && m.mount.IsV2 {
		out["unified"] = jm.owned
	}
	return out
}

// End takes the job's final read, stops its counters and removes persyst's cgroup.
func (m *Measurer) End(id uint32) {
	m.mu.Lock()
	jm := m.jobs[id]
	if jm == nil || jm.ended {
		m.mu.Unlock()
		return
	}
	jm.ended = true
	m.mu.Unlock()
	if jm.meter != nil {
		last, err := jm.meter.Read(measure.End)
		if err != nil {
			m.log.Debug().Err(err).Uint32("job", id).Msg("final read incomplete")
		}
		m.accumulate(jm, last)
		if err := jm.meter.Close(); err != nil {
			m.log.Warn().Err(err).Uint32("job", id).Msg("closing perf counters")
		}
		s := jm.meter.Summary()
		m.mu.Lock()
		jm.summary = s
		m.mu.Unlock()
		m.log.Info().Uint32("job", id).Int("samples", s.Samples).Float64("seconds", s.Seconds).Msg("job measured")
	}
	if m.cfg.Ship != nil {
		m.cfg.Ship.Forget(id)
	}
	if jm.owned != "" {
		if err := m.fs.Remove(m.mount.Path, jm.owned, 2*time.Second); err != nil {
			m.log.Warn().Err(err).Uint32("job", id).Msg("persyst cgroup not removed")
		}
	}
}

// StepEnded takes a read when one of the job's steps ended: the job's cgroups still
// exist then, while at job end Slurm may already have removed them.
func (m *Measurer) StepEnded(id uint32) {
	m.mu.Lock()
	jm := m.jobs[id]
	var mt *measure.Meter
	if jm != nil && !jm.ended {
		mt = jm.meter
	}
	m.mu.Unlock()
	if mt != nil {
		s, err := mt.Read(measure.Step)
		if err != nil {
			m.log.Debug().Err(err).Uint32("job", id).Msg("step-end read incomplete")
		}
		m.accumulate(jm, s)
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
	m.sweepReports(keep)
}

// sweepReports removes saved reports of jobs the registry no longer holds.
func (m *Measurer) sweepReports(keep func(uint32) bool) {
	ents, err := os.ReadDir(m.reportDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		id, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), ".json"), 10, 32)
		if err != nil || !strings.HasSuffix(e.Name(), ".json") || keep(uint32(id)) {
			continue
		}
		if err := os.Remove(filepath.Join(m.reportDir(), e.Name())); err != nil {
			m.log.Warn().Err(err).Msg("old report not removed")
		}
	}
}

// Summary returns a job's measurement so far, or nil.
func (m *Measurer) Summary(id uint32) *measure.Summary {
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
	if jm.meter == nil {
		return nil
	}
	s := jm.meter.Summary()
	return &s
}

// Samples returns a job's samples so far, or nil.
func (m *Measurer) Samples(id uint32) []measure.Sample {
	m.mu.Lock()
	jm := m.jobs[id]
	m.mu.Unlock()
	if jm == nil || jm.meter == nil {
		return nil
	}
	return jm.meter.Samples()
}

// Run reads every running job at each cycle boundary until ctx is done.
func (m *Measurer) Run(ctx context.Context, wait Waiter) error {
	if m.cfg.Disabled {
		<-ctx.Done()
		return nil
	}
	for {
		next := measure.NextTick(m.now(), m.cfg.Cycle)
		if err := wait(ctx, next); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return err
		}
		m.cycle()
	}
}

// cycle reads all running jobs; jobs whose cgroups were not known yet are retried.
func (m *Measurer) cycle() {
	jobs := m.reg.Jobs()
	byID := make(map[uint32]*Job, len(jobs))
	for _, j := range jobs {
		byID[j.JobID] = j
	}
	m.mu.Lock()
	var meters []*jobMeter
	ids := make([]uint32, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		jm := m.jobs[id]
		if jm.ended {
			continue
		}
		if jm.meter == nil {
			if j := byID[id]; j != nil && j.State == Running {
				m.startLocked(j, jm)
			}
			continue // the baseline was just read
		}
		// Slurm creates some of a job's cgroups after the job started (per step, or by
		// plugins that run later): pick them up.
		if j := byID[id]; j != nil {
			if cg := m.statCgroups(m.jobCgroups(j), jm); !maps.Equal(cg, jm.meter.Spec().StatCgroups) {
				jm.meter.SetStatCgroups(cg)
			}
		}
		meters = append(meters, jm)
	}
	m.mu.Unlock()
	for _, jm := range meters {
		s, err := jm.meter.Read(measure.Cycle)
		if err != nil {
			m.log.Debug().Err(err).Str("job", jm.meter.Spec().Name).Msg("cycle read incomplete")
		}
		m.accumulate(jm, s)
	}
}
