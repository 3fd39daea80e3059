package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/kmsg"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// How a job ended, for its digest's events (digest.EndEvents): Slurm's state, the batch
// script's exit status, the OOM kills, the memory peak against the request, the time
// limit, and how busy the job was at its end.

// ending gathers what is known of the job's end. memRequested is in bytes.
func (m *Measurer) ending(j *Job, jm *jobMeter, facts *jobmap.Job, memRequested float64, start, end time.Time) digest.Ending {
	e := digest.Ending{MemRequested: memRequested, Elapsed: end.Sub(start), LastCPUShare: -1}
	e.MemDefault = facts != nil && facts.MemDefault
	if facts != nil {
		e.State, e.TimeLimit = facts.State, facts.TimeLimit
	}
	if s := j.step("batch"); s != nil {
		e.Exit = s.ExitStatus
	}
	sum := jm.job.Summary()
	e.MemPeak = sum.Totals[sample.MemPeakBytes]
	m.catchUpOOM()
	m.mu.Lock()
	e.OOMKills = max(int(sum.Totals[sample.OOMKills]), jm.oomKills, jm.oomKilled)
	m.mu.Unlock()
	e.LastCPUShare = lastCPUShare(jm.job.Meter().Samples(), len(jm.job.Meter().Spec().CPUs))
	return e
}

// lastCPUShare is the share of ncpus busy over the job's last samples (its last 5
// minutes, or its last quarter when shorter); <0 when unknown.
func lastCPUShare(samples []sample.Sample, ncpus int) float64 {
	if len(samples) == 0 || ncpus == 0 {
		return -1
	}
	last := samples[len(samples)-1].Time
	span := 5 * time.Minute
	if total := last.Sub(samples[0].Time.Add(-time.Duration(samples[0].Seconds * float64(time.Second)))); total < 4*span {
		span = max(total/4, time.Second)
	}
	var busy, secs float64
	known := false
	for i := len(samples) - 1; i >= 0 && last.Sub(samples[i].Time) < span; i-- {
		u, uok := samples[i].Job[sample.CPUUserSeconds]
		sy, sok := samples[i].Job[sample.CPUSystemSeconds]
		if !uok && !sok {
			continue
		}
		known = true
		busy += u + sy
		secs += samples[i].Seconds
	}
	if !known || secs <= 0 {
		return -1
	}
	return busy / (secs * float64(ncpus))
}

// maxOOMWalk bounds the cgroups read under a job's memory cgroup for OOM kills.
const maxOOMWalk = 512

// stepOOMKills counts the OOM kills in a job's v1 memory cgroup and the cgroups of its
// steps and tasks below it (v1 counts a kill only in the cgroup of the killed task, and
// Slurm removes step and task cgroups at the step's end: read them at each step's end).
// v2's memory.events counts a job's descendants already. -1: no v1 memory cgroup.
func (m *Measurer) stepOOMKills(jm *jobMeter) int {
	if jm.job == nil {
		return -1
	}
	dir := ""
	for k, d := range jm.job.Meter().Spec().StatCgroups {
		if k != "unified" && keyHas(k, "memory") {
			dir = d
		}
	}
	if dir == "" {
		return -1
	}
	n, seen := 0, 0
	var walk func(string, int)
	walk = func(d string, depth int) {
		if seen >= maxOOMWalk {
			return
		}
		seen++
		n += oomKillsIn(m.host.Path(d, "memory.oom_control"))
		if depth == 0 {
			return
		}
		ents, err := os.ReadDir(m.host.Path(d))
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.IsDir() {
				walk(filepath.Join(d, e.Name()), depth-1)
			}
		}
	}
	walk(dir, 3) // job_N/step_S/task_T
	return n
}

// oomKillsIn reads oom_kill from a v1 memory.oom_control file (0: none, or unreadable).
func oomKillsIn(path string) int {
	b, err := hostfs.ReadRegular(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// WatchOOM counts the OOM kills the kernel logs in each measured job's memory cgroups
// (kmsg: the record names the killed task's cgroup, which Slurm removes before the
// step's end event), until ctx is done. Without /dev/kmsg (a container, no permission)
// the kills are counted from the cgroups only, and it says so once.
func (m *Measurer) WatchOOM(ctx context.Context) {
	if m.cfg.Disabled {
		return
	}
	l, err := kmsg.Open(m.host.Path("dev/kmsg"), m.oomKilled)
	if err == nil {
		m.mu.Lock()
		m.kmsg = l
		m.mu.Unlock()
		err = l.Follow(ctx)
	}
	if err != nil && ctx.Err() == nil {
		m.log.Info().Err(err).Msg("the kernel log cannot be followed: OOM kills are counted from the jobs' cgroups only (not those of steps that ended)")
	}
}

// catchUpOOM counts the OOM kills logged so far that WatchOOM has not read yet (a kill is
// logged before its process dies, so before the step's end). m.mu is not held.
func (m *Measurer) catchUpOOM() {
	m.mu.Lock()
	l := m.kmsg
	m.mu.Unlock()
	if l != nil {
		if err := l.CatchUp(); err != nil {
			m.log.Debug().Err(err).Msg("kernel log not read")
		}
	}
}

// oomKilled counts a kill for the job whose memory cgroup holds the killed task's; a
// kill in no measured job's cgroups is kept a while (unclaimed) for a job whose meter is
// being opened.
func (m *Measurer) oomKilled(k kmsg.OOMKill) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, jm := range m.jobs {
		if jm.ended || !m.holdsTask(jm, k.TaskCgroup) {
			continue
		}
		jm.oomKilled++
		m.logKill(id, k)
		return
	}
	now := m.now()
	m.pruneUnclaimed(now)
	if len(m.unclaimed) >= maxUnclaimed {
		m.unclaimed = slices.Delete(m.unclaimed, 0, 1)
	}
	m.unclaimed = append(m.unclaimed, unclaimedKill{at: now, kill: k})
}

// pruneUnclaimed drops the kills kept for longer than unclaimedFor. m.mu is held.
func (m *Measurer) pruneUnclaimed(now time.Time) {
	m.unclaimed = slices.DeleteFunc(m.unclaimed, func(u unclaimedKill) bool { return now.Sub(u.at) >= unclaimedFor })
}

// unclaimedKill is an OOM kill in no measured job's cgroups, logged at a time.
type unclaimedKill struct {
	at   time.Time
	kill kmsg.OOMKill
}

// maxUnclaimed bounds the OOM kills kept for jobs not measured yet; unclaimedFor is how
// long one is kept (a job's meter opens within cpusetWait of its start).
const (
	maxUnclaimed = 64
	unclaimedFor = cpusetWait + 5*time.Second
)

// claimKills counts for jm, whose meter has just opened, the kills logged in its cgroups
// before. m.mu is held.
func (m *Measurer) claimKills(jm *jobMeter) {
	m.pruneUnclaimed(m.now())
	m.unclaimed = slices.DeleteFunc(m.unclaimed, func(u unclaimedKill) bool {
		if !m.holdsTask(jm, u.kill.TaskCgroup) {
			return false
		}
		jm.oomKilled++
		m.logKill(jm.id, u.kill)
		return true
	})
}

// holdsTask says whether the cgroup of a task (relative to its hierarchy's root, as the
// kernel logs it) lies in jm's cgroup of Slurm's layout (whether the meter has found it
// yet or not: a program can be killed as it starts), or in one of the memory cgroups its
// meter reads.
func (m *Measurer) holdsTask(jm *jobMeter, task string) bool {
	if jm.uid != nil && jobcgroup.Holds(task, m.node, *jm.uid, jm.id) {
		return true
	}
	if jm.job == nil {
		return false
	}
	for key, dir := range jm.job.Meter().Spec().StatCgroups {
		if key != "unified" && !keyHas(key, "memory") {
			continue
		}
		rel := strings.TrimPrefix(dir, m.mounts[key])
		if rel == "" || !strings.HasPrefix(rel, "/") {
			continue
		}
		if task == rel || strings.HasPrefix(task, rel+"/") {
			return true
		}
	}
	return false
}

func (m *Measurer) logKill(id uint32, k kmsg.OOMKill) {
	m.log.Info().Uint32("job", id).Int("pid", k.PID).Str("task", properties.CleanText(k.Task, 32)).Str("cgroup", k.TaskCgroup).
		Msg("a process of the job was killed for lack of memory")
}
