package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/wire"
)

// JobState is where a job is in its life on this node.
type JobState string

// Job states. OptedOut is sticky: once any event of a job says --persyst=off, the job is
// never measured on this node.
const (
	Running  JobState = "running"
	Ended    JobState = "ended"
	OptedOut JobState = "opted_out"
)

// Step is one job step seen on this node.
type Step struct {
	ID         string     `json:"id"`
	State      JobState   `json:"state"` // Running or Ended
	Started    time.Time  `json:"started"`
	Ended      *time.Time `json:"ended,omitempty"`
	LocalTasks uint32     `json:"local_tasks,omitempty"`
	TotalTasks uint32     `json:"total_tasks,omitempty"`
	Cores      string     `json:"cores,omitempty"`
	MemMB      uint64     `json:"mem_mb,omitempty"`
	ExitStatus *int       `json:"exit_status,omitempty"` // wait(2) status
	Exit       string     `json:"exit,omitempty"`        // as sacct shows it: "code:signal"
}

// exitString renders a wait(2) status as Slurm's ExitCode "code:signal".
func exitString(status int) string {
	ws := unix.WaitStatus(status)
	if ws.Signaled() {
		return fmt.Sprintf("0:%d", int(ws.Signal()))
	}
	return fmt.Sprintf("%d:0", ws.ExitStatus())
}

// Job is the registry's record of one job on this node.
type Job struct {
	JobID       uint32            `json:"job_id"`
	ArrayJobID  uint32            `json:"array_job_id,omitempty"`
	ArrayTaskID uint32            `json:"array_task_id,omitempty"`
	UID         uint32            `json:"uid"`
	GID         uint32            `json:"gid"`
	User        string            `json:"user,omitempty"`
	Node        string            `json:"node"`
	NodeID      uint32            `json:"node_id"`
	NNodes      uint32            `json:"nnodes,omitempty"`
	State       JobState          `json:"state"`
	Persyst     string            `json:"persyst"`
	NCPUs       uint32            `json:"ncpus,omitempty"`
	Cores       string            `json:"cores,omitempty"`
	GPUs        string            `json:"gpus,omitempty"` // Slurm's GRES indices of the job's GPUs ("0,2")
	MemMB       uint64            `json:"mem_mb,omitempty"`
	Cgroups     map[string]string `json:"cgroups,omitempty"`
	Started     time.Time         `json:"started"`
	Ended       *time.Time        `json:"ended,omitempty"`
	// Recorded is when this record was made (never changed: it tells this job from an
	// earlier one with the same id).
	Recorded time.Time `json:"recorded"`
	// JobStartSeen and JobEndSeen say whether the prolog/epilog events arrived (a job
	// whose prolog event was lost is still known from its steps).
	JobStartSeen bool    `json:"job_start_seen"`
	JobEndSeen   bool    `json:"job_end_seen"`
	Steps        []*Step `json:"steps"`
	// StepsDropped counts the oldest ended steps dropped to keep a job's record bounded
	// (MaxSteps).
	StepsDropped int       `json:"steps_dropped,omitempty"`
	Updated      time.Time `json:"updated"`
	// EndReason says why the job was ended other than by its job_end event (Slurm no
	// longer knows it as running).
	EndReason string `json:"end_reason,omitempty"`
}

func (j *Job) step(id string) *Step {
	for _, s := range j.Steps {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// jobFile is the on-disk form of one job: <Dir>/<job id>.json. One file per job keeps
// the cost of an event independent of how many jobs the node has seen (measured with one
// file for all: 1 ms per event with 10 jobs, 8 ms with 1,000; BenchmarkApply).
type jobFile struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
	Job     *Job   `json:"job"`
}

const stateVersion = 1

// Bounds of the registry: what one node holds at most. A job start beyond MaxRunning is
// refused (the job runs, unmeasured); beyond MaxEnded, the oldest ended jobs are dropped
// before their retention; beyond MaxSteps, a job's oldest ended steps are dropped (and
// counted).
const (
	MaxRunning = 1024
	MaxEnded   = 10000
	MaxSteps   = 512
)

// ErrFull is Apply's error for a job start beyond MaxRunning.
var ErrFull = errors.New("too many running jobs on this node")

// Registry holds the jobs of one node. It is safe for concurrent use. Every change of a
// job is written to its file (atomically, by rename) before Apply returns, so a
// restarted daemon knows every job whose events it acknowledged. The files are not
// fsynced: a daemon that dies leaves them in the page cache, and only a node crash loses
// them, which ends the node's jobs too (Slurm's NODE_FAIL; the registry reconciles with
// Slurm). Slurm waits for every event: an fsync of a state directory on disk cost it
// milliseconds each.
type Registry struct {
	mu        sync.Mutex
	node      string
	dir       string
	retention time.Duration
	jobs      map[uint32]*Job
	users     func(uid uint32) string
}

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	Node string
	// Dir holds one state file per job; empty keeps the registry in memory only.
	Dir string
	// Retention is how long ended jobs are kept (default 24h).
	Retention time.Duration
	// UserName resolves a uid to a user name ("" when unknown); nil resolves nothing.
	UserName func(uid uint32) string
}

// OpenRegistry loads the jobs in cfg.Dir, creating it if needed. A job file that cannot
// be parsed is moved aside (never deleted) and logged, and the other jobs load; files of
// another node mean a misconfigured state directory and are an error.
func OpenRegistry(cfg RegistryConfig, log zerolog.Logger) (*Registry, error) {
	if cfg.Retention <= 0 {
		cfg.Retention = 24 * time.Hour
	}
	r := &Registry{node: cfg.Node, dir: cfg.Dir, retention: cfg.Retention, jobs: map[uint32]*Job{}, users: cfg.UserName}
	if cfg.Dir == "" {
		return r, nil
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", cfg.Dir, err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", cfg.Dir, err)
	}
	// Files of saves that did not finish (ENOSPC, a crash) are garbage.
	if tmps, err := filepath.Glob(filepath.Join(cfg.Dir, "*.json.tmp")); err == nil {
		for _, p := range tmps {
			if err := os.Remove(p); err != nil {
				log.Warn().Err(err).Str("state", p).Msg("unfinished state file not removed")
			}
		}
	}
	names, err := filepath.Glob(filepath.Join(cfg.Dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("read state dir %s: %w", cfg.Dir, err)
	}
	for _, p := range names {
		if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
			log.Error().Str("state", p).Msg("not a regular file in the state directory; left alone")
			continue
		}
		j, err := readJobFile(p, cfg.Node)
		var wrongNode *wrongNodeError
		switch {
		case errors.As(err, &wrongNode):
			return nil, err
		case err != nil:
			aside, aerr := moveAside(p)
			if aerr != nil {
				return nil, fmt.Errorf("state %s unreadable (%v) and cannot be moved aside: %w", p, err, aerr)
			}
			log.Error().Err(err).Str("state", p).Str("moved_to", aside).Msg("job state file unreadable; moved aside")
		default:
			r.jobs[j.JobID] = j
		}
	}
	log.Info().Str("state_dir", cfg.Dir).Int("jobs", len(r.jobs)).Msg("registry restored")
	return r, nil
}

type wrongNodeError struct{ path, node, want string }

func (e *wrongNodeError) Error() string {
	return fmt.Sprintf("state %s belongs to node %q, this daemon is %q", e.path, e.node, e.want)
}

// readJobFile reads and checks one job file.
func readJobFile(p, node string) (*Job, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", p, err)
	}
	var f jobFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if f.Version != stateVersion {
		return nil, fmt.Errorf("state version %d, want %d", f.Version, stateVersion)
	}
	if f.Node != "" && node != "" && f.Node != node {
		return nil, &wrongNodeError{p, f.Node, node}
	}
	if f.Job == nil || f.Job.JobID == 0 || filepath.Base(p) != jobFileName(f.Job.JobID) {
		return nil, errors.New("no job, or a job whose id does not match the file name")
	}
	if f.Job.Steps == nil {
		f.Job.Steps = []*Step{}
	}
	return f.Job, nil
}

// moveAside renames path to a new name path.unreadable-<time>[-N], never replacing an
// earlier one (link fails if the name exists; rename would overwrite).
func moveAside(path string) (string, error) {
	base := fmt.Sprintf("%s.unreadable-%s", path, time.Now().UTC().Format("20060102T150405"))
	for i := 0; i < 1000; i++ {
		aside := base
		if i > 0 {
			aside = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Link(path, aside)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return aside, os.Remove(path)
	}
	return "", fmt.Errorf("too many unreadable state files next to %s", path)
}

func jobFileName(id uint32) string { return strconv.FormatUint(uint64(id), 10) + ".json" }

// Apply records one lifecycle event at time now and persists the registry. The job is
// recorded under this registry's node, whatever node name the event carries.
func (r *Registry) Apply(k wire.Kind, e *wire.Event, now time.Time) (*Job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[e.JobID]
	if ok && (k == wire.JobStart || k == wire.StepStart) && j.Ended != nil && j.JobEndSeen && e.Time.After(*j.Ended) {
		// A job or step start, newer than the end of the job with this id here: Slurm runs
		// the job again (it was requeued: a requeued job's next run may start with its
		// batch step, without a prolog here), or reused the id (its job ids wrap, or
		// restart from FirstJobId). A new run, with a new record. (A start older than the
		// end is that job's own, handled late: events that waited for a hung daemon are
		// handled in any order.)
		ok = false
	}
	if !ok {
		if r.runningLocked() >= MaxRunning {
			return nil, fmt.Errorf("job %d: %w (%d)", e.JobID, ErrFull, MaxRunning)
		}
		j = &Job{JobID: e.JobID, Node: r.node, State: Running, Persyst: e.Persyst, Started: e.Time, Recorded: now, Steps: []*Step{}}
		r.jobs[e.JobID] = j
	}
	r.merge(j, e)
	switch k {
	case wire.JobStart:
		j.JobStartSeen = true
		if e.Time.Before(j.Started) {
			j.Started = e.Time
		}
	case wire.StepStart:
		s := j.step(e.StepID)
		if s == nil {
			s = &Step{ID: e.StepID, State: Running, Started: e.Time}
			j.addStep(s)
		}
		s.LocalTasks, s.TotalTasks = e.LocalTasks, e.TotalTasks
		s.Cores, s.MemMB = e.StepCores, e.StepMemMB
	case wire.StepEnd:
		s := j.step(e.StepID)
		if s == nil { // start event lost (daemon was down): still record the end
			s = &Step{ID: e.StepID, Started: e.Time}
			j.addStep(s)
		}
		t := e.Time
		s.State, s.Ended = Ended, &t
		if e.ExitStatus != nil {
			st := *e.ExitStatus
			s.ExitStatus, s.Exit = &st, exitString(st)
		}
		if s.LocalTasks == 0 {
			s.LocalTasks, s.TotalTasks = e.LocalTasks, e.TotalTasks
		}
	case wire.JobEnd:
		j.JobEndSeen = true
		// A late step_end still sets its step's end time and exit status.
		j.end(e.Time)
	}
	j.Updated = now
	if err := errors.Join(r.save(j), r.prune(now)); err != nil {
		return copyJob(j), err
	}
	return copyJob(j), nil
}

// merge fills the job's facts from an event: later events complete what earlier ones
// could not know (the prolog sees no cores; steps do).
func (r *Registry) merge(j *Job, e *wire.Event) {
	if e.Persyst == wire.Off {
		j.Persyst, j.State = wire.Off, OptedOut
	}
	set32 := func(dst *uint32, v uint32) {
		if v != 0 {
			*dst = v
		}
	}
	set32(&j.UID, e.UID)
	set32(&j.GID, e.GID)
	set32(&j.ArrayJobID, e.ArrayJobID)
	set32(&j.ArrayTaskID, e.ArrayTaskID)
	// The batch step reports itself as one node: a job's node count is the largest any
	// of its events reports.
	j.NNodes = max(j.NNodes, e.NNodes)
	set32(&j.NCPUs, e.NCPUs)
	if e.NNodes != 0 {
		j.NodeID = e.NodeID
	}
	if e.JobCores != "" {
		j.Cores = e.JobCores
	}
	if e.GPUs != "" {
		j.GPUs = e.GPUs
	}
	if e.JobMemMB != 0 {
		j.MemMB = e.JobMemMB
	}
	for k, v := range e.Cgroups {
		if j.Cgroups == nil {
			j.Cgroups = map[string]string{}
		}
		j.Cgroups[k] = v
	}
	if j.User == "" {
		j.User = e.User
	}
	if j.User == "" && r.users != nil {
		j.User = r.users(j.UID)
	}
}

// addStep adds a step to the job, dropping its oldest ended steps beyond MaxSteps.
func (j *Job) addStep(s *Step) {
	j.Steps = append(j.Steps, s)
	for len(j.Steps) > MaxSteps {
		i := slices.IndexFunc(j.Steps, func(s *Step) bool { return s.State == Ended })
		if i < 0 {
			break // every step runs: keep them (a running step is never forgotten)
		}
		j.Steps = slices.Delete(j.Steps, i, i+1)
		j.StepsDropped++
	}
}

// runningLocked counts the jobs that have not ended. Caller holds mu.
func (r *Registry) runningLocked() int {
	n := 0
	for _, j := range r.jobs {
		if j.Ended == nil {
			n++
		}
	}
	return n
}

// prune drops ended jobs not updated for longer than the retention, with their files,
// and the oldest ended jobs beyond MaxEnded. It goes by the time events were received
// (Updated), not by the senders' clocks. Caller holds mu.
func (r *Registry) prune(now time.Time) error {
	var errs []error
	var ended []*Job
	for id, j := range r.jobs {
		if j.Ended == nil {
			continue
		}
		if now.Sub(j.Updated) > r.retention {
			errs = append(errs, r.drop(id))
			continue
		}
		ended = append(ended, j)
	}
	if len(ended) > MaxEnded {
		sort.Slice(ended, func(a, b int) bool { return ended[a].Updated.Before(ended[b].Updated) })
		for _, j := range ended[:len(ended)-MaxEnded] {
			errs = append(errs, r.drop(j.JobID))
		}
	}
	return errors.Join(errs...)
}

// drop forgets a job and removes its file. Caller holds mu.
func (r *Registry) drop(id uint32) error {
	delete(r.jobs, id)
	if r.dir == "" {
		return nil
	}
	if err := os.Remove(filepath.Join(r.dir, jobFileName(id))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Expire ends a running job that Slurm no longer knows as running on this node (its
// end event was lost: the daemon was down, or slurmd died), with the reason. It returns
// the job as ended, or nil if it was not running.
func (r *Registry) Expire(id uint32, why string, now time.Time) (*Job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[id]
	if !ok || j.Ended != nil {
		return nil, nil
	}
	j.EndReason, j.Updated = why, now
	j.end(now)
	return copyJob(j), r.save(j)
}

// end marks the job ended at t on this node, and so its steps: a step whose end event
// was lost (a crashed slurmstepd) or is still on its way is closed at t.
func (j *Job) end(t time.Time) {
	j.Ended = &t
	for _, s := range j.Steps {
		if s.State == Running {
			end := t
			s.State, s.Ended = Ended, &end
		}
	}
	if j.State != OptedOut {
		j.State = Ended
	}
}

// save writes one job's file atomically. Caller holds mu.
func (r *Registry) save(j *Job) error {
	if r.dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(&jobFile{Version: stateVersion, Node: r.node, Job: j}, "", " ")
	if err != nil {
		return err
	}
	path := filepath.Join(r.dir, jobFileName(j.JobID))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write state %s: %w", tmp, err)
	}
	fail := func(what string, err error) error {
		f.Close()
		os.Remove(tmp) // never leave an unfinished file behind
		return fmt.Errorf("%s state %s: %w", what, tmp, err)
	}
	if _, err := f.Write(b); err != nil {
		return fail("write", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close state %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename state to %s: %w", path, err)
	}
	return nil
}

func (r *Registry) sortedLocked() []*Job {
	out := make([]*Job, 0, len(r.jobs))
	for _, j := range r.jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].JobID < out[b].JobID })
	return out
}

// Jobs returns a copy of every job, by job id.
func (r *Registry) Jobs() []*Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	src := r.sortedLocked()
	out := make([]*Job, len(src))
	for i, j := range src {
		out[i] = copyJob(j)
	}
	return out
}

// RunningJobs returns copies of the jobs in state Running (the measurement cycle's:
// ended jobs, which the registry keeps for a while, are not copied at every cycle).
func (r *Registry) RunningJobs() []*Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Job
	for _, j := range r.jobs {
		if j.State == Running {
			out = append(out, copyJob(j))
		}
	}
	return out
}

func copyJob(j *Job) *Job {
	c := *j
	c.Steps = make([]*Step, len(j.Steps))
	for i, s := range j.Steps {
		sc := *s
		c.Steps[i] = &sc
	}
	if j.Cgroups != nil {
		c.Cgroups = make(map[string]string, len(j.Cgroups))
		for k, v := range j.Cgroups {
			c.Cgroups[k] = v
		}
	}
	return &c
}

// Running returns how many jobs (measured or opted out) have not ended on this node.
func (r *Registry) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runningLocked()
}

// Job returns a copy of one job, or nil.
func (r *Registry) Job(id uint32) *Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[id]; ok {
		return copyJob(j)
	}
	return nil
}
