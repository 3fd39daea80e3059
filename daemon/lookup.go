package daemon

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/jobmap"
)

// What the job map says of a job, for its digest, asked at most once per digest: at the
// batch step's start in the background, so that the digest Slurm waits for at the step's
// end asks nothing; or the reconciler's answer, for a job a previous daemon left running;
// else at the digest.

// jobLookups asks the job map about the node's jobs for their digests. It owns what was
// looked up of each job's run and its lock.
type jobLookups struct {
	facts   JobFacts      // nil: the job map is not asked (no job map, or no digests)
	timeout time.Duration // the digest's (DigestConfig.Timeout)
	cycle   time.Duration
	log     zerolog.Logger
	now     func() time.Time

	mu   sync.Mutex
	jobs map[uint32]*lookup
}

// lookup is what was looked up of one run of a job.
type lookup struct {
	// run is the run's record (Job.Recorded): a job Slurm runs again (requeued) is
	// looked up again for its new run's digest.
	run time.Time
	// facts is what the job map said of the job when its batch step started, looked up
	// then so that the digest does not ask while Slurm waits at the step's end; looked is
	// closed once the lookup is over (facts nil: it failed). Nil: none started.
	facts  *jobmap.Job
	looked chan struct{}
	// awaited: looked is closed by found (another part's lookup), not by prefetch.
	awaited bool
}

func newJobLookups(cfg DigestConfig, cycle time.Duration, log zerolog.Logger, now func() time.Time) *jobLookups {
	l := &jobLookups{timeout: cfg.Timeout, cycle: cycle, log: log, now: now, jobs: map[uint32]*lookup{}}
	if cfg.Engine != nil { // without properties there are no digests
		l.facts = cfg.Facts
	}
	return l
}

// of returns the lookup of job j's run, made (none started) if there is none or it is an
// earlier run's. l.mu is held.
func (l *jobLookups) of(j *Job) *lookup {
	lk := l.jobs[j.JobID]
	if lk == nil || !lk.run.Equal(j.Recorded) {
		lk = &lookup{run: j.Recorded}
		l.jobs[j.JobID] = lk
	}
	return lk
}

// prefetch looks job j up in the job map once its batch step has started, in the
// background: the digest at the step's end then needs no lookup (prefetched). Nothing when
// a lookup of this run was started, or another part's answer is awaited.
func (l *jobLookups) prefetch(j *Job) {
	if l.facts == nil || j.step("batch") == nil {
		return
	}
	l.mu.Lock()
	lk := l.of(j)
	if lk.looked != nil {
		l.mu.Unlock()
		return
	}
	done := make(chan struct{})
	lk.looked = done
	l.mu.Unlock()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*l.timeout)
		defer cancel()
		f, err := l.facts.Job(ctx, strconv.FormatUint(uint64(j.JobID), 10))
		if err != nil {
			l.log.Debug().Err(err).Uint32("job", j.JobID).Msg("job not found in the job map at its start; looked up again at its end")
			return
		}
		l.mu.Lock()
		lk.facts = f
		l.mu.Unlock()
	}()
}

// await says that the job map is being asked about job j by another part (the
// reconciler, for a job a previous daemon left running): its digest waits for that answer
// (found) as for a lookup at the batch step's start, instead of asking beside it.
func (l *jobLookups) await(j *Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk := l.of(j)
	if lk.looked == nil {
		lk.looked = make(chan struct{})
		lk.awaited = true
	}
}

// found is another part's answer about job id (f nil: the job map could not tell), for
// a digest that awaits it.
func (l *jobLookups) found(id uint32, f *jobmap.Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk := l.jobs[id]
	if lk == nil || !lk.awaited {
		return
	}
	lk.awaited = false
	if f != nil {
		c := *f
		lk.facts = &c
	}
	close(lk.looked)
}

// answer is what the job map said of a job for its digest.
type answer struct {
	facts *jobmap.Job // nil: nothing
	// fresh: read after the job's end (the AdminComment the summary is merged with need
	// not be read again).
	fresh bool
	// atStart is what it said when the batch step started (nil: not looked up, or not
	// yet): a restart count risen since says that Slurm requeued the job.
	atStart *jobmap.Job
}

// atEnd returns what the job map says of job j for its digest, looked up at most once:
// for a late digest what it said when the job's end was found (known), else the lookup
// made at its batch step's start when that still holds, else a lookup now (its error:
// the job map did not answer, or does not know the job). When it did not answer at the
// batch step's end (a busy slurmctld), later brings its answer once it does (again):
// Slurm is not kept waiting for it.
func (l *jobLookups) atEnd(ctx context.Context, j *Job, mode digestMode, known *jobmap.Job) (a answer, later <-chan answer, err error) {
	switch {
	case l.facts == nil:
		return a, nil, nil
	case mode == late:
		a.fresh = true
		if known != nil {
			c := *known
			a.facts = &c
		}
	default:
		if a.facts = l.prefetched(ctx, j, mode); a.facts != nil {
			break
		}
		a.facts, err = l.facts.Job(ctx, strconv.FormatUint(uint64(j.JobID), 10))
		a.fresh = true
		if err != nil && (mode != atBatchEnd || errors.Is(err, jobmap.ErrNoJob)) {
			l.log.Warn().Err(err).Uint32("job", j.JobID).Msg("job not found in the job map: digest kept, not written")
		}
	}
	a.atStart = l.atStart(j)
	if a.facts == nil && mode == atBatchEnd && err != nil && !errors.Is(err, jobmap.ErrNoJob) {
		ch := make(chan answer, 1)
		go func() { ch <- l.again(j) }()
		later = ch
	}
	return a, later, err
}

// prefetched returns the job's facts as looked up at its batch step's start (waiting,
// within ctx, for a lookup under way), or nil when the digest must look the job up now:
// none was made or it failed, a late or interactive digest, or an end Slurm may have
// made (the batch script did not exit 0, or the job reached its time limit): then the
// job's state (TIMEOUT, CANCELLED, ...) is read as it is now. A copy: the digest may
// change it.
func (l *jobLookups) prefetched(ctx context.Context, j *Job, mode digestMode) *jobmap.Job {
	if mode != atBatchEnd {
		return nil
	}
	l.mu.Lock()
	done := l.of(j).looked
	l.mu.Unlock()
	if done == nil {
		return nil
	}
	// Half of what is left at most: a lookup under way that does not answer in time
	// leaves the digest time to ask itself.
	wait := time.Hour
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl) / 2
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return nil
	}
	f := l.atStart(j)
	b := j.step("batch")
	if f == nil || b == nil || b.ExitStatus == nil || *b.ExitStatus != 0 {
		return nil
	}
	if f.TimeLimit > 0 && l.now().Sub(j.Started) >= f.TimeLimit-2*l.cycle-time.Second {
		return nil
	}
	c := *f
	return &c
}

// atStart is what the job map said of job j's run when its batch step started (nil: not
// looked up, or not yet).
func (l *jobLookups) atStart(j *Job) *jobmap.Job {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lk := l.jobs[j.JobID]; lk != nil && lk.run.Equal(j.Recorded) {
		return lk.facts
	}
	return nil
}

// laterFor bounds how long a digest whose job map lookup failed at the batch step's end
// is tried again (laterFirst, then twice as long each time).
const (
	laterFor   = 3 * time.Minute
	laterFirst = 2 * time.Second
)

// again asks the job map about job j until it answers, within laterFor, for a digest
// it did not answer for at the batch step's end (facts nil: it never did, or it does not
// know the job).
func (l *jobLookups) again(j *Job) answer {
	ctx, cancel := context.WithTimeout(context.Background(), laterFor)
	defer cancel()
	a := answer{fresh: true}
	for wait := laterFirst; a.facts == nil && pipeline.RealWait(ctx, time.Now().Add(wait)) == nil; wait *= 2 {
		lctx, lcancel := context.WithTimeout(ctx, 4*l.timeout)
		f, err := l.facts.Job(lctx, strconv.FormatUint(uint64(j.JobID), 10))
		lcancel()
		if err != nil {
			l.log.Debug().Err(err).Uint32("job", j.JobID).Msg("job map asked again for a digest")
			if errors.Is(err, jobmap.ErrNoJob) {
				break
			}
			continue
		}
		a.facts = f
	}
	if a.facts == nil {
		l.log.Warn().Uint32("job", j.JobID).Msg("job not found in the job map: digest kept, not written")
	}
	a.atStart = l.atStart(j)
	return a
}

// forget drops what was looked up of jobs keep does not keep.
func (l *jobLookups) forget(keep func(uint32) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.jobs {
		if !keep(id) {
			delete(l.jobs, id)
		}
	}
}
