package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/kmsg"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/properties"
)

// oomTracker counts the processes the kernel killed for lack of memory in each job:
// from the kernel's log (its record names the killed task's cgroup, which Slurm removes
// before the step's end event) and from the v1 memory cgroups of the job's steps at each
// step's end. It owns the kernel's log and its lock.
type oomTracker struct {
	node   string
	mounts map[string]string // hierarchy key → mount point
	log    zerolog.Logger
	now    func() time.Time

	// xid is given the NVIDIA driver's error reports the kernel's log holds (nil: none
	// wanted).
	xid func(kmsg.Xid)
	// following is told once the kernel's log is followed (nil: nobody asks).
	following func()

	mu   sync.Mutex
	kmsg *kmsg.Log // the kernel's log followed (nil: not)
	jobs map[uint32]*oomJob
	// unclaimed are kills the kernel logged in no watched job's cgroups, kept for a job
	// whose meter is still being opened (a program killed as it starts).
	unclaimed []unclaimedKill
}

// oomJob is what is known of one job's OOM kills.
type oomJob struct {
	uid   uint32
	ended bool
	// claimed: its meter opened, and the kills logged before were claimed.
	claimed bool
	// mem are the memory cgroups its meter reads, relative to their hierarchy's root as
	// the kernel logs a task's cgroup.
	mem []string
	// logged counts the kills the kernel logged in the job's cgroups; steps is the most
	// counted in its v1 memory cgroups at a step's end.
	logged, steps int
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

func newOOMTracker(node string, mounts map[string]string, log zerolog.Logger, now func() time.Time, xid func(kmsg.Xid)) *oomTracker {
	return &oomTracker{node: node, mounts: mounts, log: log, now: now, xid: xid, jobs: map[uint32]*oomJob{}}
}

// watch starts counting for job id of user uid (again, for a job id Slurm reused).
func (t *oomTracker) watch(id, uid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.jobs[id]; o == nil || o.ended {
		t.jobs[id] = &oomJob{uid: uid}
		return
	}
	t.jobs[id].uid = uid
}

// measure says which cgroups the job's meter reads (its key → directory); the first time,
// the kills logged in them before are claimed for the job.
func (t *oomTracker) measure(id uint32, cgroups map[string]string) {
	var mem []string
	for key, dir := range cgroups {
		if key != "unified" && !keyHas(key, "memory") {
			continue
		}
		if rel := strings.TrimPrefix(dir, t.mounts[key]); rel != "" && strings.HasPrefix(rel, "/") {
			mem = append(mem, rel)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.jobs[id]
	if o == nil || o.ended {
		return
	}
	o.mem = mem
	if !o.claimed {
		o.claimed = true
		t.claim(id, o)
	}
}

// end stops counting for job id (what was counted stays for its digest); forget drops it.
func (t *oomTracker) end(id uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.jobs[id]; o != nil {
		o.ended = true
	}
}

func (t *oomTracker) forget(id uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.jobs, id)
}

// stepEnded counts the kills in the v1 memory cgroups of job id's meter (stat) and of its
// steps and tasks, at a step's end.
func (t *oomTracker) stepEnded(h hostfs.FS, id uint32, stat map[string]string) {
	n := stepOOMKills(h, stat)
	if n <= 0 {
		return
	}
	t.mu.Lock()
	if o := t.jobs[id]; o != nil {
		o.steps = max(o.steps, n)
	}
	t.mu.Unlock()
	t.log.Info().Uint32("job", id).Int("oom_kills", n).Msg("processes of the job were killed for lack of memory")
}

// kills counts job id's OOM kills so far, the kernel's log read up to now first (a kill
// is logged before its process dies, so before the step's end).
func (t *oomTracker) kills(id uint32) int {
	t.catchUp()
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.jobs[id]; o != nil {
		return max(o.logged, o.steps)
	}
	return 0
}

// follow counts the kills the kernel logs until ctx is done. Without /dev/kmsg (a
// container, no permission) the kills are counted from the cgroups only, and it says so
// once.
func (t *oomTracker) follow(ctx context.Context, h hostfs.FS) {
	l, err := kmsg.Open(h.Path("dev/kmsg"), kmsg.Handlers{OOM: t.killed, Xid: t.xid})
	if err == nil {
		if t.following != nil {
			t.following()
		}
		t.mu.Lock()
		t.kmsg = l
		t.mu.Unlock()
		err = l.Follow(ctx)
	}
	if err != nil && ctx.Err() == nil {
		t.log.Info().Err(err).Msg("the kernel log cannot be followed: OOM kills are counted from the jobs' cgroups only (not those of steps that ended)")
	}
}

// catchUp counts the kills logged so far that follow has not read yet. t.mu is not held.
func (t *oomTracker) catchUp() {
	t.mu.Lock()
	l := t.kmsg
	t.mu.Unlock()
	if l != nil {
		if err := l.CatchUp(); err != nil {
			t.log.Debug().Err(err).Msg("kernel log not read")
		}
	}
}

// killed counts a kill for the job whose cgroups hold the killed task's; a kill in no
// watched job's cgroups is kept a while (unclaimed) for a job whose meter is being opened.
func (t *oomTracker) killed(k kmsg.OOMKill) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, o := range t.jobs {
		if o.ended || !t.holds(id, o, k.TaskCgroup) {
			continue
		}
		o.logged++
		t.logKill(id, k)
		return
	}
	now := t.now()
	t.prune(now)
	if len(t.unclaimed) >= maxUnclaimed {
		t.unclaimed = slices.Delete(t.unclaimed, 0, 1)
	}
	t.unclaimed = append(t.unclaimed, unclaimedKill{at: now, kill: k})
}

// prune drops the kills kept for longer than unclaimedFor. t.mu is held.
func (t *oomTracker) prune(now time.Time) {
	t.unclaimed = slices.DeleteFunc(t.unclaimed, func(u unclaimedKill) bool { return now.Sub(u.at) >= unclaimedFor })
}

// claim counts for job id, whose meter has just opened, the kills logged in its cgroups
// before. t.mu is held.
func (t *oomTracker) claim(id uint32, o *oomJob) {
	t.prune(t.now())
	t.unclaimed = slices.DeleteFunc(t.unclaimed, func(u unclaimedKill) bool {
		if !t.holds(id, o, u.kill.TaskCgroup) {
			return false
		}
		o.logged++
		t.logKill(id, u.kill)
		return true
	})
}

// holds says whether the cgroup of a task (relative to its hierarchy's root, as the
// kernel logs it) lies in job id's cgroup of Slurm's layout (whether the meter has found
// it yet or not: a program can be killed as it starts), or in one of the memory cgroups
// its meter reads.
func (t *oomTracker) holds(id uint32, o *oomJob, task string) bool {
	if jobcgroup.Holds(task, t.node, o.uid, id) {
		return true
	}
	for _, rel := range o.mem {
		if task == rel || strings.HasPrefix(task, rel+"/") {
			return true
		}
	}
	return false
}

func (t *oomTracker) logKill(id uint32, k kmsg.OOMKill) {
	t.log.Info().Uint32("job", id).Int("pid", k.PID).Str("task", properties.CleanText(k.Task, 32)).Str("cgroup", k.TaskCgroup).
		Msg("a process of the job was killed for lack of memory")
}

// maxOOMWalk bounds the cgroups read under a job's memory cgroup for OOM kills.
const maxOOMWalk = 512

// stepOOMKills counts the OOM kills in a job's v1 memory cgroup (in stat, the cgroups its
// meter reads) and the cgroups of its steps and tasks below it (v1 counts a kill only in
// the cgroup of the killed task, and Slurm removes step and task cgroups at the step's
// end: read them at each step's end). v2's memory.events counts a job's descendants
// already. -1: no v1 memory cgroup.
func stepOOMKills(h hostfs.FS, stat map[string]string) int {
	dir := ""
	for k, d := range stat {
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
		n += oomKillsIn(h.Path(d, "memory.oom_control"))
		if depth == 0 {
			return
		}
		ents, err := os.ReadDir(h.Path(d))
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
