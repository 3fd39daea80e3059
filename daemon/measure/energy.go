package measure

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/daemon/measure/powercap"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// Energy per job. A node's RAPL counters count whole processor packages, their DRAM or
// the platform, whatever runs there. A job alone on its node gets all of it. On a shared
// node each interval's energy is shared out among the jobs running there: the packages'
// (and the platform's) by the CPU time each job used in the interval, out of the CPU
// time of all of Slurm's jobs on the node (the cgroup that holds them), the DRAM's by the
// memory each holds; in an interval in which no job used the CPUs, by the CPUs each
// holds. What one job is given is then an estimate, and said so; the jobs' shares add
// up to the node's.
//
// Where the node has a power meter of its own (its BMC, read through Redfish: NodeMeter),
// the node's whole energy (fans, disks, network, the power supply's loss besides the
// processors and memory) is shared out the same way, by CPU time, as
// sample.EnergyNodeJoules; the seconds it could not be read in are
// sample.EnergyNodeMissedSeconds, and the job's energy is then RAPL's alone.
var energyRegistration = Registration{Name: "rapl", Default: true, Metrics: vocabulary(energyNames...), New: newEnergy}

var energyNames = []string{sample.EnergyPkgJoules, sample.EnergyRAMJoules, sample.EnergyPsysJoules, sample.EnergyNodeJoules, sample.EnergyNodeMissedSeconds,
	sample.EnergyShareCPUSeconds}

// raplNames are the RAPL counters' metrics.
var raplNames = []string{sample.EnergyPkgJoules, sample.EnergyRAMJoules, sample.EnergyPsysJoules}

// energyDomains are the metrics of the node's counters.
var energyDomains = map[powercap.Domain]string{
	powercap.Package: sample.EnergyPkgJoules, powercap.DRAM: sample.EnergyRAMJoules, powercap.Platform: sample.EnergyPsysJoules,
}

// NodeMeter is a node's own power meter (redfish.Meter): the energy counted so far,
// its resets, or why none.
type NodeMeter interface {
	Read(t time.Time) (joules float64, resets int, err error)
	Name() string
}

// perfDomains are the power PMU's events of each domain.
var perfDomains = map[string]powercap.Domain{"energy-pkg": powercap.Package, "energy-ram": powercap.DRAM, "energy-psys": powercap.Platform}

// NodeEnergy reads the node's energy counters, once for all jobs read at about the same
// time, and the CPU time and memory of all of Slurm's jobs on the node.
type NodeEnergy struct {
	now   func() time.Time
	stats *cgstats.Reader
	// How names the counters ("RAPL (powercap)"); "" : none, Why says why.
	How, Why string
	// Meter is the node's own power meter (nil: none).
	Meter NodeMeter

	mu       sync.Mutex
	zones    []powercap.Zone
	counters []*powercap.Counter
	perf     *perfcg.Energy
	at       time.Time
	last     energyNow
	total    map[string]float64
	resets   map[string]int
	usage    map[string]jobsUsage
}

// energyNow is one read of the node's counters by metric: joules counted since the daemon
// began reading them, how many times each went backwards, and why a read failed.
type energyNow struct {
	joules map[string]float64
	resets map[string]int
	errs   map[string]error
}

// jobsUsage is one read of the cgroup of all of Slurm's jobs on the node.
type jobsUsage struct {
	at       time.Time
	cpu, mem float64 // CPU seconds since the cgroup's start; bytes now
	hasMem   bool
	err      error
}

// maxUsageRoots bounds the cgroups of all jobs remembered (one per Slurm on the node).
const maxUsageRoots = 8

// OpenNodeEnergy opens the node's RAPL counters: the powercap tree in dir under the host's
// root ("": /sys/class/powercap), else the perf power PMU. Neither: How is "" and Why
// says why.
func OpenNodeEnergy(host hostfs.FS, dir string, stats *cgstats.Reader, now func() time.Time, log zerolog.Logger) *NodeEnergy {
	if now == nil {
		now = time.Now
	}
	e := &NodeEnergy{now: now, stats: stats, total: map[string]float64{}, resets: map[string]int{},
		usage: map[string]jobsUsage{}}
	zones, zerr := powercap.Zones(host.Path(cmp.Or(dir, "/sys/class/powercap")))
	if zerr == nil {
		e.zones, e.How = zones, "RAPL (powercap)"
		for _, z := range zones {
			e.counters = append(e.counters, powercap.NewCounter(z.MaxRange))
		}
		return e
	}
	evs, err := perfcg.PowerEvents(host)
	if err == nil {
		var cpus []int
		if cpus, err = host.OnlineCPUs(); err == nil {
			e.perf, err = perfcg.OpenEnergy(evs, host.PackageCPUs(cpus))
		}
	}
	if err != nil {
		e.Why = "not available: " + zerr.Error() + "; " + err.Error()
		log.Info().Str("why", e.Why).Msg("energy (RAPL) not measured")
		return e
	}
	e.How = "RAPL (perf power PMU)"
	return e
}

// Close closes the perf counters.
func (e *NodeEnergy) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.perf != nil {
		return e.perf.Close()
	}
	return nil
}

// read returns the counters now, or as read less than nodeViewShare ago.
func (e *NodeEnergy) read() energyNow {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.now()
	if !e.at.IsZero() && t.Sub(e.at) >= 0 && t.Sub(e.at) < nodeViewShare {
		return e.last
	}
	e.at = t
	var errs []error
	switch {
	case e.perf != nil:
		joules, err := e.perf.Read()
		errs = append(errs, err)
		for ev, j := range joules {
			if d, ok := perfDomains[ev]; ok {
				e.total[energyDomains[d]] = j
			}
		}
	default:
		for i, z := range e.zones {
			uj, err := z.Read()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			j, err := e.counters[i].Add(uj)
			if errors.Is(err, powercap.ErrBackwards) {
				e.resets[energyDomains[z.Domain]]++
			}
			e.total[energyDomains[z.Domain]] += j
		}
	}
	now := energyNow{joules: maps.Clone(e.total), resets: maps.Clone(e.resets), errs: map[string]error{}}
	if err := errors.Join(errs...); err != nil {
		for _, n := range raplNames {
			now.errs[n] = err
		}
	}
	if e.Meter != nil {
		j, resets, err := e.Meter.Read(t)
		now.joules[sample.EnergyNodeJoules], now.resets[sample.EnergyNodeJoules] = j, resets
		if err != nil {
			now.errs[sample.EnergyNodeJoules] = err
		}
	}
	e.last = now
	return e.last
}

// jobsUsage reads the cgroup of all jobs (hierarchy key to directory), or returns the read
// of it less than nodeViewShare ago.
func (e *NodeEnergy) jobsUsage(paths map[string]string) jobsUsage {
	key := usageKey(paths)
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.now()
	if u, ok := e.usage[key]; ok && t.Sub(u.at) >= 0 && t.Sub(u.at) < nodeViewShare {
		return u
	}
	u := readUsage(e.stats, paths, t)
	// Slurm's own processes (slurmstepd's "system" cgroup beside the jobs', cgroup v2)
	// are no job's: left out, so that the jobs' shares add up to the node's.
	sys := make(map[string]string, len(paths))
	for k, d := range paths {
		sys[k] = path.Join(d, "system")
	}
	if own := readUsage(e.stats, sys, t); u.err == nil && own.err == nil {
		u.cpu = max(u.cpu-own.cpu, 0)
		if own.hasMem {
			u.mem = max(u.mem-own.mem, 0)
		}
	}
	if len(e.usage) >= maxUsageRoots {
		clear(e.usage)
	}
	e.usage[key] = u
	return u
}

// readUsage reads the CPU time and memory of cgroups.
func readUsage(stats *cgstats.Reader, paths map[string]string, t time.Time) jobsUsage {
	u := jobsUsage{at: t}
	st, err := stats.Read(paths)
	switch {
	case st.Has(cgstats.CPUUser | cgstats.CPUSystem):
		u.cpu = float64(st.CPUUserNs+st.CPUSystemNs) / 1e9
		u.mem, u.hasMem = float64(st.MemCurrent), st.Has(cgstats.MemCurrent)
	case err != nil:
		u.err = err
	default:
		u.err = fmt.Errorf("the CPU time of %s is not measured", strings.Join(slices.Sorted(maps.Values(paths)), ", "))
	}
	return u
}

func usageKey(paths map[string]string) string {
	var keys []string
	for k, v := range paths {
		keys = append(keys, k+"="+v)
	}
	slices.Sort(keys)
	return strings.Join(keys, "\x00")
}

// energySource gives a job its share of the node's energy, interval by interval.
type energySource struct {
	node  *NodeEnergy
	stats *cgstats.Reader
	prev  energyNow
	// prevAll and prevJob are all jobs' and this job's CPU time and memory at the
	// previous read, read in the same hierarchies (usage).
	prevAll, prevJob jobsUsage
	have, prevAlone  bool
	alone, shared    bool // intervals the job had the node to itself, and shared it
	byCPUs           bool // an interval shared by the CPUs held (no job used any)
	// metered and missed are the seconds the node's meter gave the job a share in, and
	// did not; missedAt and missedWhy say when it first did not, and why.
	metered, missed float64
	missedAt        time.Time
	missedWhy       string
}

func newEnergy(env *Env, _ *Spec) (Source, error) {
	return &energySource{node: env.NodeEnergy, stats: env.Stats}, nil
}

func (s *energySource) Read(r *Read) error {
	e := s.node
	if e == nil || (e.How == "" && e.Meter == nil) {
		why := "not available: no energy counters read on this node"
		if e != nil {
			why = e.Why
		}
		for _, n := range energyNames {
			r.NotMeasured(n, why)
		}
		return nil
	}
	if e.How == "" {
		for _, n := range raplNames {
			r.NotMeasured(n, e.Why)
		}
	}
	if e.Meter == nil {
		r.NotMeasured(sample.EnergyNodeJoules, "not available: the node has no power meter configured (BMCRedfish)")
	}
	cur := e.read()
	alone, _ := r.Exclusive()
	all, job := s.usage(r.Spec)
	if s.have && r.Reason != sample.Start {
		s.share(r, cur, all, job, alone && s.prevAlone)
	}
	s.prev, s.prevAll, s.prevJob, s.prevAlone, s.have = cur, all, job, alone, true
	return cur.errs[sample.EnergyPkgJoules]
}

// usage reads all jobs' and the job's CPU time and memory: in Slurm's cgroups of the job
// as found now (persyst's own left out: it holds only measured jobs), and those that
// hold all of Slurm's jobs above them (jobcgroup.AllJobs), so that the numerator and the
// denominator of a share are counted alike.
func (s *energySource) usage(spec *Spec) (all, job jobsUsage) {
	paths, nodes := map[string]string{}, map[string]string{}
	for k, d := range spec.StatCgroups {
		if d == spec.OwnCgroup {
			continue
		}
		if n, ok := jobcgroup.AllJobs(d); ok {
			paths[k], nodes[k] = d, n
		}
	}
	if len(nodes) == 0 || s.stats == nil {
		err := errors.New("the cgroup of all jobs on the node is not known")
		return jobsUsage{err: err}, jobsUsage{err: err}
	}
	all = s.node.jobsUsage(nodes)
	return all, readUsage(s.stats, paths, all.at)
}

// share gives the job its share of the interval's energy, or says why none.
func (s *energySource) share(r *Read, cur energyNow, all, job jobsUsage, alone bool) {
	cpuShare, memShare, why := 1.0, 1.0, ""
	if !alone {
		cpuShare, memShare, why = s.shares(r, all, job)
	}
	for _, name := range energyNames[:4] {
		now, ok := cur.joules[name]
		before, had := s.prev.joules[name]
		err := cmp.Or(cur.errs[name], s.prev.errs[name])
		switch {
		case !ok && !had && cur.errs[name] == nil:
			if name != sample.EnergyNodeJoules {
				r.NotMeasured(name, "no such RAPL counter on this node")
			}
		case err != nil:
			r.NotMeasured(name, "not measured in this interval: "+err.Error())
		case !ok || !had:
			r.NotMeasured(name, "not measured in this interval: the counter was not read at both ends")
		case cur.resets[name] != s.prev.resets[name]:
			r.NotMeasured(name, "not measured in this interval: the node's counter went backwards")
		case why != "":
			r.NotMeasured(name, why)
		default:
			f := cpuShare
			if name == sample.EnergyRAMJoules {
				f = memShare
			}
			r.Sample.Job[name] = max(now-before, 0) * f
		}
	}
	s.meterCovered(r, cur, why)
	if why == "" {
		s.alone = s.alone || alone
		s.shared = s.shared || !alone
	}
}

// meterCovered counts the interval as one the node's meter gave the job its share of, or
// one it did not (the job's energy is then RAPL's alone, and the digest says so).
func (s *energySource) meterCovered(r *Read, cur energyNow, why string) {
	if s.node.Meter == nil || why != "" {
		return
	}
	if _, ok := r.Sample.Job[sample.EnergyNodeJoules]; ok {
		s.metered += r.Sample.Seconds
		return
	}
	r.Sample.Job[sample.EnergyNodeMissedSeconds] = r.Sample.Seconds
	if s.missed == 0 {
		s.missedAt = r.Sample.From()
		s.missedWhy = "its counter went backwards"
		if err := cmp.Or(cur.errs[sample.EnergyNodeJoules], s.prev.errs[sample.EnergyNodeJoules]); err != nil {
			s.missedWhy = err.Error()
		}
	}
	s.missed += r.Sample.Seconds
}

// shares are the job's shares of the packages' and of the DRAM's energy in an interval of
// a shared node: of all jobs' CPU time its own, of their memory its own.
func (s *energySource) shares(r *Read, all, job jobsUsage) (cpu, mem float64, why string) {
	switch {
	case all.err != nil:
		return 0, 0, "the node is shared, and " + all.err.Error()
	case job.err != nil:
		return 0, 0, "the node is shared, and " + job.err.Error()
	case s.prevAll.err != nil || s.prevJob.err != nil || s.prevAll.at.IsZero():
		return 0, 0, "the node is shared, and the CPU time of its jobs was not read at the interval's start"
	}
	used, total := job.cpu-s.prevJob.cpu, all.cpu-s.prevAll.cpu
	if total > 0.001*r.Sample.Seconds && total > 0 {
		cpu = min(max(used/total, 0), 1)
		r.Sample.Job[sample.EnergyShareCPUSeconds] = max(used, 0)
	} else {
		// No job used the CPUs: the node idled for them all, shared by the CPUs held.
		if r.Spec.CPUShare == nil {
			return 0, 0, "the node is shared, no job used its CPUs, and the CPUs each holds are not known"
		}
		cpu, s.byCPUs = min(max(r.Spec.CPUShare(), 0), 1), true
	}
	mem = cpu
	if job.hasMem && all.hasMem && all.mem > 0 {
		mem = min(max(job.mem/all.mem, 0), 1)
	}
	return cpu, mem, ""
}

// Method says where the energy came from and how the job's share was taken.
func (s *energySource) Method() (string, string) {
	e := s.node
	if e == nil || (!s.alone && !s.shared) {
		return "", ""
	}
	how, rapl := e.How, ""
	if e.Meter != nil && s.missed == 0 && s.metered > 0 {
		how = e.Meter.Name()
		if e.How != "" {
			rapl = "; of it, the processors and memory: " + e.How
		}
	}
	switch {
	case s.shared && s.alone:
		how += ": the node's while the job had it alone, else the job's share by its CPU time (DRAM: by its memory)"
	case s.shared:
		how += ": the job's share of the node's by its CPU time (DRAM: by its memory)"
	default:
		how += ": the node's, the job had it alone"
	}
	if s.byCPUs {
		how += "; while no job used the CPUs, by the CPUs each held"
	}
	if s.shared {
		how += ", an estimate"
	}
	if s.missed > 0 {
		how += fmt.Sprintf("; %s gave no reading for %.0f s of the job (from %s: %s)", e.Meter.Name(), s.missed, s.missedAt.Format(time.TimeOnly), s.missedWhy)
		if e.How != "" {
			how += ": the job's energy is RAPL's alone"
		} else {
			how += ": the node's energy without those seconds"
		}
	}
	return sample.MethodEnergy, how + rapl
}

func (s *energySource) Close() error { return nil }
