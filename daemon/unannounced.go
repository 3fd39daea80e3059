package daemon

import (
	"context"
	"maps"
	"path/filepath"
	"sync"
	"time"

	"github.com/persyst/persyst/hostfs"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/exporter"
)

const (
	// unannouncedGrace is how long a job's step may have its cgroup before the daemon
	// expects to have heard of the job: slurmstepd sends the step's start before it starts
	// the step's tasks, waiting at most the plugin's timeout (5 s by default). The extern
	// step is not waited for: it may start before a long prolog, and the prolog's event
	// with it.
	unannouncedGrace = 10 * time.Second
	// unannouncedWarnEvery bounds the daemon's warnings: one at the first unannounced job,
	// then at most one in this time, with how many there were.
	unannouncedWarnEvery = 10 * time.Minute
	// unannouncedRecent is how many of the latest unannounced job ids are kept.
	unannouncedRecent = 16
	// unannouncedLookEvery is how often at most the cycle looks for unannounced jobs: a
	// look lists every hierarchy's job directories, which at a short cycle cost the daemon
	// more than a few jobs' reads. A job is reported within this, a cycle and the grace.
	unannouncedLookEvery = unannouncedGrace / 2
)

// UnannouncedJobs says what the daemon saw of jobs Slurm ran on this node without
// persyst's plugin telling it of them.
type UnannouncedJobs struct {
	// Total counts them since the daemon started.
	Total int `json:"total"`
	// Recent are the latest of their ids, oldest first (0 for a job known only by its
	// SLUID).
	Recent []uint32 `json:"recent,omitempty"`
	// Last is when the latest was found.
	Last *time.Time `json:"last,omitempty"`
}

// unannounced finds jobs Slurm runs on this node that the daemon never heard of: a step of
// theirs has had its cgroup for a while, yet no event of the job came. That is what a node
// looks like whose slurmd did not load persyst's plugin (built for another Slurm release,
// missing from plugstack.conf, a wrong argument): Slurm logs it once at start, and every
// job goes unmeasured without a word. Jobs whose directories were there at the daemon's
// first look are not counted: they may have started while it was down.
type unannounced struct {
	host    hostfs.FS
	node    string
	reg     *Registry
	log     zerolog.Logger
	metrics *exporter.Daemon
	now     func() time.Time
	// again asks for a look before the next cycle (after that long): watch.
	again chan time.Duration

	mu       sync.Mutex
	primed   bool
	lastLook time.Time            // the last look's time
	first    map[string]time.Time // unknown job directories, by name: when first seen
	counted  map[string]bool      // directories settled: counted, known, or there at the first look
	seen     UnannouncedJobs
	lastWarn time.Time
	unwarned int // counted since the last warning
}

func newUnannounced(host hostfs.FS, node string, reg *Registry, metrics *exporter.Daemon, log zerolog.Logger, now func() time.Time) *unannounced {
	return &unannounced{host: host, node: node, reg: reg, log: log, metrics: metrics, now: now, again: make(chan time.Duration, 1),
		first: map[string]time.Time{}, counted: map[string]bool{}}
}

// atCycle looks (lookIn) unless the last look was less than unannouncedLookEvery ago;
// mounts are asked for only when it does.
func (u *unannounced) atCycle(mounts func() []jobcgroup.Mount) {
	now := u.now()
	u.mu.Lock()
	due := !u.primed || now.Sub(u.lastLook) >= unannouncedLookEvery || now.Before(u.lastLook)
	u.mu.Unlock()
	if due {
		u.lookIn(mounts())
	}
}

// lookIn lists Slurm's job cgroups on the node in mounts (those with Slurm's layout) and
// looks at them; a job that may be unannounced is looked at again when its grace time is
// over (watch), not a cycle later.
func (u *unannounced) lookIn(mounts []jobcgroup.Mount) {
	if again := u.look(u.now(), jobcgroup.List(u.host, mounts, u.node, u.unsettled)); again > 0 {
		select {
		case u.again <- again:
		default: // one is asked for already
		}
	}
}

// watch looks again when lookIn asked for it, until ctx is done: a node whose slurmd did
// not load the plugin is reported within the cycle of its first job and the grace time.
func (u *unannounced) watch(ctx context.Context, mounts func() []jobcgroup.Mount) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-u.again:
			t.Reset(d)
		case <-t.C:
			u.lookIn(mounts())
		}
	}
}

// look takes the job directories Slurm has on the node now (jobcgroup.List) at time now,
// and returns when to look again for a job that may be unannounced (0: at the next
// cycle). The maps hold only directories that exist: they are bounded by the node's jobs.
func (u *unannounced) look(now time.Time, dirs []jobcgroup.Dir) (again time.Duration) {
	known := u.knownSLUIDs(dirs)
	u.mu.Lock()
	defer u.mu.Unlock()
	present := make(map[string]bool, len(dirs))
	for _, d := range dirs {
		present[d.Name] = true
		switch {
		case !u.primed:
			u.counted[d.Name] = true
		case u.counted[d.Name]:
		case u.isKnown(d, known):
			// Settled: its steps are not looked for again.
			delete(u.first, d.Name)
			u.counted[d.Name] = true
		case !d.Steps:
			delete(u.first, d.Name)
		default:
			t, ok := u.first[d.Name]
			if !ok {
				t = now
				u.first[d.Name] = now
			}
			if wait := unannouncedGrace - now.Sub(t); wait > 0 {
				if again == 0 || wait < again {
					again = wait
				}
				continue
			}
			delete(u.first, d.Name)
			u.counted[d.Name] = true
			u.count(now, d)
		}
	}
	u.primed, u.lastLook = true, now
	maps.DeleteFunc(u.first, func(name string, _ time.Time) bool { return !present[name] })
	maps.DeleteFunc(u.counted, func(name string, _ bool) bool { return !present[name] })
	return again
}

// knownSLUIDs are the names of the registry's job cgroups that are not job_<id>, when a
// directory needs them (Slurm 26.05 names a job's v2 directory by its SLUID).
func (u *unannounced) knownSLUIDs(dirs []jobcgroup.Dir) map[string]bool {
	need := false
	for _, d := range dirs {
		need = need || d.JobID == 0
	}
	if !need {
		return nil
	}
	out := map[string]bool{}
	for _, j := range u.reg.Jobs() {
		for _, dir := range j.Cgroups {
			out[filepath.Base(dir)] = true
		}
	}
	return out
}

// unsettled says whether a directory's steps are to be looked for (a directory read in
// each hierarchy, every cycle): not those counted, known or there at the first look.
func (u *unannounced) unsettled(d jobcgroup.Dir) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.primed && !u.counted[d.Name]
}

func (u *unannounced) isKnown(d jobcgroup.Dir, sluids map[string]bool) bool {
	if d.JobID != 0 {
		return u.reg.Job(d.JobID) != nil
	}
	return sluids[d.Name]
}

// count records one unannounced job and warns, within unannouncedWarnEvery.
func (u *unannounced) count(now time.Time, d jobcgroup.Dir) {
	u.seen.Total++
	u.seen.Recent = append(u.seen.Recent, d.JobID)
	if len(u.seen.Recent) > unannouncedRecent {
		u.seen.Recent = u.seen.Recent[1:]
	}
	t := now
	u.seen.Last = &t
	u.metrics.Unannounced()
	u.unwarned++
	if !u.lastWarn.IsZero() && now.Sub(u.lastWarn) < unannouncedWarnEvery {
		return
	}
	ev := u.log.Warn().Str("cgroup", d.Path).Int("jobs_since_warning", u.unwarned).Int("total", u.seen.Total)
	if d.JobID != 0 {
		ev = ev.Uint32("job", d.JobID)
	}
	ev.Msg("Slurm runs jobs on this node that persyst never heard of: slurmd has not loaded persyst's SPANK plugin " +
		"(not in plugstack.conf, or built for another Slurm release: slurmd's log says \"Incompatible Slurm plugin\"); " +
		"these jobs are not measured. Run `persyst check` on this node")
	u.lastWarn, u.unwarned = now, 0
}

// report is what was seen so far.
func (u *unannounced) report() UnannouncedJobs {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.seen
	out.Recent = append([]uint32(nil), u.seen.Recent...)
	return out
}
