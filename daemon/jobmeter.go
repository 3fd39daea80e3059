package daemon

import (
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/sample"
)

// meterState is where a job's meter is in its life on this node.
type meterState int

const (
	waiting   meterState = iota // not opened: the job's cgroups are not there or not settled yet
	opening                     // being opened, outside every lock (jobMeter.opened is open)
	measuring                   // its pipeline reads at every cycle
	ended                       // its final read is taken (or it ended without one)
)

// cgroupsSeen is what the last look for a job's cgroups in Slurm's layout found.
type cgroupsSeen int

const (
	notSeen cgroupsSeen = iota // never found
	present                    // found at the last look
	gone                       // found once, and gone since: the job may have ended unseen
)

// jobMeter is one job's measurement on this node: its state, its pipeline once opened,
// and its lock.
type jobMeter struct {
	id uint32

	mu    sync.Mutex
	state meterState
	// opened is closed when the opening under way ends (state leaves opening).
	opened chan struct{}
	job    *pipeline.Job  // the job's pipeline (measuring, and ended when it was measured)
	owned  string         // persyst's own perf cgroup of the job ("" if none)
	final  sample.Summary // once ended
	// seen is what the last look for the job's cgroups found, at lookedAt; refind asks the
	// next cycle to look again (a job or step started or ended since).
	seen     cgroupsSeen
	lookedAt time.Time
	refind   bool
	// frozen: Slurm had the job's cgroups frozen (suspended) at the last look.
	frozen bool
	// digested: this run's digest was made (never twice; a requeued job's next run has a
	// meter of its own).
	digested bool
}

// setFrozen records whether the job's cgroups are frozen now, and says whether that
// changed since the last look.
func (jm *jobMeter) setFrozen(f bool) (changed bool) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	changed, jm.frozen = jm.frozen != f, f
	return changed
}

// claimOpen says whether the caller is to open the meter (it is waiting); then the
// opening is under way.
func (jm *jobMeter) claimOpen() bool {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	if jm.state != waiting {
		return false
	}
	jm.state, jm.opened = opening, make(chan struct{})
	return true
}

// finishOpen ends the opening (claimOpen) with its pipeline (nil: not opened, the next
// event or cycle tries again). It says whether the meter took the pipeline: one opened
// for a job that ended meanwhile is the caller's to close.
func (jm *jobMeter) finishOpen(job *pipeline.Job) bool {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	close(jm.opened)
	jm.opened = nil
	switch {
	case jm.state == ended:
		return false
	case job == nil:
		jm.state = waiting
		return true
	}
	jm.state, jm.job = measuring, job
	return true
}

// started readies the meter for a start of its job or of a step: a look for the step's
// cgroups, and persyst's own perf cgroup of the job (owned, "": none) kept unless it has
// one. It returns the cgroup the step's tasks are to join ("": none), and whether the
// caller is to open the meter (claimOpen).
func (jm *jobMeter) started(owned string) (join string, open bool) {
	jm.lookAgain()
	jm.mu.Lock()
	if jm.owned == "" {
		jm.owned = owned
	}
	join = jm.owned
	jm.mu.Unlock()
	return join, jm.claimOpen()
}

// atStepEnd is the end of one of the job's steps: the meter looks for the job's cgroups
// again (the step's go; on v1 the job's may too). It returns the pipeline to read now
// (nil: not measuring, or ended) and, when digest, the pipeline for a digest of kind
// mode (forDigest).
func (jm *jobMeter) atStepEnd(mode digestMode, digest bool) (read, pj *pipeline.Job) {
	st, job := jm.now()
	if st != ended {
		jm.lookAgain()
		read = job
	}
	if digest {
		pj = jm.forDigest(mode)
	}
	return read, pj
}

// open ends the opening under way (claimOpen) with the pipeline open makes, and returns
// it if the meter took it: nil when it was not opened (logged; the next event or cycle
// tries again) or when the job ended meanwhile (it is closed then).
func (jm *jobMeter) open(open func() (*pipeline.Job, error), log zerolog.Logger) *pipeline.Job {
	job, err := open()
	switch {
	case err != nil && !notYet(err):
		log.Error().Err(err).Uint32("job", jm.id).Msg("job not measured")
	case err != nil:
		log.Debug().Err(err).Uint32("job", jm.id).Msg("job's meter not opened yet")
	}
	if !jm.finishOpen(job) {
		if job != nil {
			job.Meter().Close() // the job ended meanwhile
		}
		return nil
	}
	return job
}

// startWait bounds how long the end of a job or step waits for its meter's opening.
const startWait = 10 * time.Second

// waitOpened waits until an opening of the meter under way has ended (at most
// startWait): a step or job that ends moments after it started still gets its final
// read.
func (jm *jobMeter) waitOpened() {
	jm.mu.Lock()
	done := jm.opened
	jm.mu.Unlock()
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

// now returns the meter's state and pipeline.
func (jm *jobMeter) now() (meterState, *pipeline.Job) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	return jm.state, jm.job
}

// pipeline returns the job's pipeline (nil: not measured).
func (jm *jobMeter) pipeline() *pipeline.Job {
	_, job := jm.now()
	return job
}

// forDigest returns the job's pipeline for a digest of kind mode (nil: not measured, or
// the digest was made): once per run, but an interactive job's report is made again at
// each step's end and at the job's end (it goes into no file).
func (jm *jobMeter) forDigest(mode digestMode) *pipeline.Job {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	if jm.job == nil || (jm.digested && mode != interactive) {
		return nil
	}
	jm.digested = jm.digested || mode != interactive
	return jm.job
}

// end marks the meter ended and returns its pipeline; first is false when it had ended
// already. A meter that was never opened and is not being opened takes recorded (what
// an earlier daemon measured of the job; nil: nothing).
func (jm *jobMeter) end(recorded func() *pipeline.Job) (job *pipeline.Job, first bool) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	if jm.state == ended {
		return jm.job, false
	}
	if jm.job == nil && jm.state != opening {
		jm.job = recorded()
	}
	jm.state = ended
	return jm.job, true
}

// setFinal keeps the job's summary once it ended.
func (jm *jobMeter) setFinal(s sample.Summary) {
	jm.mu.Lock()
	jm.final = s
	jm.mu.Unlock()
}

// summary is the job's measurement so far (nil: none).
func (jm *jobMeter) summary() *sample.Summary {
	jm.mu.Lock()
	st, job, final := jm.state, jm.job, jm.final
	jm.mu.Unlock()
	switch {
	case st == ended && final.Started.IsZero():
		return nil
	case st == ended:
		return &final
	case job == nil:
		return nil
	}
	s := job.Summary()
	return &s
}

// setOwned and ownedCgroup: persyst's own perf cgroup of the job.
func (jm *jobMeter) setOwned(dir string) {
	jm.mu.Lock()
	jm.owned = dir
	jm.mu.Unlock()
}

func (jm *jobMeter) ownedCgroup() string {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	return jm.owned
}

// lookAgain asks the next cycle to look for the job's cgroups again.
func (jm *jobMeter) lookAgain() {
	jm.mu.Lock()
	jm.refind = true
	jm.mu.Unlock()
}

// refindEvery is how often a running job's cgroups are looked for when no event says that
// they changed (a cgroup made by a plugin without an event).
const refindEvery = 10 * time.Second

// lookDue says whether the job's cgroups are to be looked for at now (asked, one of them
// gone at the last read, or refindEvery passed), and clears the request.
func (jm *jobMeter) lookDue(now time.Time, goneAtRead bool) bool {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	due := jm.refind || goneAtRead || now.Sub(jm.lookedAt) >= refindEvery
	jm.refind = false
	return due
}

// looked records a look for the job's cgroups at now: found says whether Slurm's layout
// held them.
func (jm *jobMeter) looked(now time.Time, found bool) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	jm.lookedAt = now
	switch {
	case found:
		jm.seen = present
	case jm.seen == present:
		jm.seen = gone
	}
}

// vanished says whether the job runs here but Slurm removed its cgroups: a sign, not a
// proof (an allocation between steps may have none), that it ended unseen.
func (jm *jobMeter) vanished() bool {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	return jm.seen == gone && jm.state != ended
}

// meterSet is the node's job meters by job id, and the lock of the map.
type meterSet struct {
	mu   sync.Mutex
	jobs map[uint32]*jobMeter
}

func newMeterSet() *meterSet { return &meterSet{jobs: map[uint32]*jobMeter{}} }

// get returns job id's meter (nil: none).
func (s *meterSet) get(id uint32) *jobMeter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[id]
}

// settled returns job id's meter once an opening of it under way has ended (nil: none).
func (s *meterSet) settled(id uint32) *jobMeter {
	jm := s.get(id)
	if jm != nil {
		jm.waitOpened()
	}
	return jm
}

// meter returns job id's meter, made (waiting) when there is none, or, for a start
// (renew), when the one there ended: Slurm reused the job id.
func (s *meterSet) meter(id uint32, renew bool) *jobMeter {
	s.mu.Lock()
	defer s.mu.Unlock()
	jm := s.jobs[id]
	if jm != nil && renew {
		if st, _ := jm.now(); st == ended {
			jm = nil
		}
	}
	if jm == nil {
		jm = &jobMeter{id: id}
		s.jobs[id] = jm
	}
	return jm
}

// sorted returns the meters by job id.
func (s *meterSet) sorted() []*jobMeter {
	s.mu.Lock()
	out := make([]*jobMeter, 0, len(s.jobs))
	for _, jm := range s.jobs {
		out = append(out, jm)
	}
	s.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

// forget drops the ended meters of jobs keep does not keep; it returns their ids.
func (s *meterSet) forget(keep func(uint32) bool) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint32
	for id, jm := range s.jobs {
		if st, _ := jm.now(); st == ended && !keep(id) {
			delete(s.jobs, id)
			out = append(out, id)
		}
	}
	return out
}
