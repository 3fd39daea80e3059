package daemon

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
)

// JobFacts looks a job up in the cluster's job map (jobmap.Map in production).
type JobFacts interface {
	Job(ctx context.Context, id string) (*jobmap.Job, error)
}

// DigestConfig configures the digest the daemon writes at the end of a batch job.
type DigestConfig struct {
	Engine *properties.Engine // nil: no properties, no digest
	Facts  JobFacts           // where the job's output file is
	// Off: evaluate and keep reports, but write nothing into output files.
	Off bool
	// Append writes text at the end of the file as the user (digest.Append).
	Append func(ctx context.Context, t digest.Target, text []byte) error
	// Timeout bounds the whole digest (lookup, evaluation, write); the plugin waits for
	// it at the batch step's end (default DefaultDigestTimeout).
	Timeout time.Duration
	// Accounting, if set, keeps the job's summary in Slurm's accounting (accounting.Write:
	// job as Slurm names it, its id, its AdminComment as the job map read it); it returns
	// the result for the metrics.
	Accounting func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error)
}

// DefaultDigestTimeout bounds a digest when DigestConfig.Timeout does not: below the
// plugin's 5 s wait at the batch step's end.
const DefaultDigestTimeout = 4 * time.Second

// withDefaults fills in what c leaves unset.
func (c DigestConfig) withDefaults() DigestConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultDigestTimeout
	}
	return c
}

// Uplink is the node's side of the agent tree as the daemon sees it: property records
// out, job-wide results in (collectors/uplink implements it over gRPC).
type Uplink interface {
	// Send hands over a job's property records of one interval; it never blocks the
	// cycle (maxRecords: what the strategy would yield if every condition held).
	Send(job uint32, t time.Time, seconds float64, recs []properties.Record, maxRecords int)
	// JobWide returns a multi-node job's report over all its nodes, after sending this
	// node's last interval, or why there is none (bounded in time).
	JobWide(ctx context.Context, job uint32) (*digest.Report, error)
	// Forget drops what is kept for an ended job.
	Forget(job uint32)
	// Keep hands a job's final report to the tree, which keeps every job's report for
	// the site's view (persyst web); it never blocks.
	Keep(job uint32, r digest.Report)
}

// digestMode is when a digest is made.
type digestMode int

const (
	atBatchEnd  digestMode = iota // the batch script ended: the digest goes into the job's output
	late                          // the job ended while the daemon was down
	interactive                   // a job without a batch script ended: a report only
)

// digester makes jobs' digests: the job's facts looked up once, its report assembled,
// kept, written into its output file as its user, handed to the tree and to Slurm's
// accounting. It owns what is known of each job's digest (made, its report, the facts
// looked up at the batch step's start) and its lock.
type digester struct {
	cfg     DigestConfig // with its defaults
	node    string
	cycle   time.Duration
	uplink  Uplink
	oom     *oomTracker
	reports reportStore
	metrics *exporter.Daemon
	log     zerolog.Logger
	now     func() time.Time

	mu   sync.Mutex
	jobs map[uint32]*jobDigest
}

// jobDigest is what is known of one job's digest.
type jobDigest struct {
	made   bool // the digest was made (never twice)
	report *digest.Report
	// facts is what the job map said of the job when its batch step started, looked up
	// then so that the digest does not ask while Slurm waits at the step's end; looked is
	// closed once the lookup is over (facts nil: it failed). Nil: none started.
	facts  *jobmap.Job
	looked chan struct{}
	// awaited: looked is closed by found (another part's lookup), not by prefetch.
	awaited bool
}

// job returns job id's entry, made if there is none. d.mu is held.
func (d *digester) job(id uint32) *jobDigest {
	jd := d.jobs[id]
	if jd == nil {
		jd = &jobDigest{}
		d.jobs[id] = jd
	}
	return jd
}

// claim says whether a digest of job id is to be made now: once (an interactive job's
// report is made again at each step's end and at the job's end: it goes into no file).
func (d *digester) claim(id uint32, mode digestMode) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	jd := d.job(id)
	if jd.made && mode != interactive {
		return false
	}
	jd.made = jd.made || mode != interactive
	return true
}

// make makes job j's digest from its pipeline (known: for a late digest, what the job
// map said of the job when its end was found).
func (d *digester) make(ctx context.Context, j *Job, pj *pipeline.Job, mode digestMode, known *jobmap.Job) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	start, at := time.Now(), d.now()
	facts, fresh, err := d.facts(ctx, j, mode, known)
	if mode == interactive && facts != nil && facts.BatchHost != "" && facts.BatchHost != d.node {
		return nil // a step of a batch job that runs elsewhere
	}
	if facts == nil && mode == atBatchEnd && err != nil && !errors.Is(err, jobmap.ErrNoJob) {
		// The job map did not answer in time (a busy slurmctld): Slurm is not kept
		// waiting, and the digest is finished in the background once it answers,
		// covering the job up to now.
		d.log.Info().Err(err).Uint32("job", j.JobID).Msg("job map did not answer at the batch step's end: digest finished when it does")
		go d.later(j, pj, at, start)
		return nil
	}
	return d.finish(ctx, j, pj, mode, facts, fresh, at, start)
}

// laterFor bounds how long a digest whose job map lookup failed at the batch step's end
// is tried again (laterFirst, then twice as long each time).
const (
	laterFor   = 3 * time.Minute
	laterFirst = 2 * time.Second
)

// later finishes job j's digest (its batch step ended at at) once the job map answers,
// within laterFor; if it never does, the report is kept without being written, as when
// the job map does not know the job.
func (d *digester) later(j *Job, pj *pipeline.Job, at, start time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), laterFor)
	defer cancel()
	id := strconv.FormatUint(uint64(j.JobID), 10)
	var f *jobmap.Job
	for wait := laterFirst; f == nil && pipeline.RealWait(ctx, time.Now().Add(wait)) == nil; wait *= 2 {
		lctx, lcancel := context.WithTimeout(ctx, 4*d.cfg.Timeout)
		got, err := d.cfg.Facts.Job(lctx, id)
		lcancel()
		if err != nil {
			d.log.Debug().Err(err).Uint32("job", j.JobID).Msg("job map asked again for a digest")
			if errors.Is(err, jobmap.ErrNoJob) {
				break
			}
			continue
		}
		f = got
	}
	if f == nil {
		d.log.Warn().Uint32("job", j.JobID).Msg("job not found in the job map: digest kept, not written")
	}
	fctx, fcancel := context.WithTimeout(context.Background(), d.cfg.Timeout)
	defer fcancel()
	_ = d.finish(fctx, j, pj, atBatchEnd, f, true, at, start)
}

// finish makes job j's digest with the facts found (nil: none): its report covers the job
// up to at; kept, handed to the tree and to accounting, and written into its output.
func (d *digester) finish(ctx context.Context, j *Job, pj *pipeline.Job, mode digestMode, facts *jobmap.Job, fresh bool, at, start time.Time) error {
	factsTook := time.Since(start)
	phase := time.Now()
	rep := d.report(ctx, j, pj, facts, mode, at)
	d.log.Debug().Uint32("job", j.JobID).Dur("facts", factsTook).Dur("report", time.Since(phase)).Msg("digest phases")
	// A batch job's final report is its digest's; a job without a batch script's (srun,
	// salloc) is its report at its end. It goes to the tree's keeper, and its summary
	// into Slurm's accounting.
	final := mode != interactive || j.State != Running
	if final && d.uplink != nil {
		d.uplink.Keep(j.JobID, rep)
	}
	if facts != nil && final {
		// Written in the background (accounting.Write: slurmctld while it takes it, else
		// the database once the job's end is there). The batch step's end, which Slurm
		// waits for, never waits for it: waiting ~30 ms got more summaries to slurmctld
		// before the job completed, and cost every job's end those 30 ms (p90 50 ms under
		// a 100-task array); the database takes the others after the job.
		d.account(j, facts, fresh, rep)
	}
	d.keep(j.JobID, rep)
	if d.cfg.Off || facts == nil || d.cfg.Append == nil || mode == interactive {
		if mode != interactive {
			d.metrics.Digest(map[bool]string{true: "off", false: "no_job_facts"}[d.cfg.Off || d.cfg.Append == nil])
		}
		d.log.Info().Uint32("job", j.JobID).Int("findings", len(rep.Findings)).Msg("job digest kept (not written into the output file)")
		return nil
	}
	return d.write(ctx, j, rep, facts, mode, start)
}

// facts returns what the job map says of job j for its digest, looked up at most once:
// for a late digest what it said when the job's end was found (known), else the lookup
// made at its batch step's start when that still holds, else a lookup now. fresh says
// that they were read after the job's end (the AdminComment the summary is merged with
// need not be read again).
func (d *digester) facts(ctx context.Context, j *Job, mode digestMode, known *jobmap.Job) (*jobmap.Job, bool, error) {
	switch {
	case d.cfg.Facts == nil:
		return nil, false, nil
	case mode == late && known == nil:
		return nil, true, nil
	case mode == late:
		c := *known
		return &c, true, nil
	}
	if f := d.prefetched(ctx, j, mode); f != nil {
		return f, false, nil
	}
	f, err := d.cfg.Facts.Job(ctx, strconv.FormatUint(uint64(j.JobID), 10))
	if err != nil && (mode != atBatchEnd || errors.Is(err, jobmap.ErrNoJob)) {
		d.log.Warn().Err(err).Uint32("job", j.JobID).Msg("job not found in the job map: digest kept, not written")
	}
	return f, true, err
}

// prefetch looks the job up in the job map once its batch step has started, in the
// background: the digest at the step's end then needs no lookup (prefetched).
func (d *digester) prefetch(j *Job) {
	if d.cfg.Facts == nil || d.cfg.Engine == nil || j.step("batch") == nil {
		return
	}
	d.mu.Lock()
	jd := d.job(j.JobID)
	if jd.looked != nil {
		d.mu.Unlock()
		return
	}
	done := make(chan struct{})
	jd.looked = done
	d.mu.Unlock()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*d.cfg.Timeout)
		defer cancel()
		f, err := d.cfg.Facts.Job(ctx, strconv.FormatUint(uint64(j.JobID), 10))
		if err != nil {
			d.log.Debug().Err(err).Uint32("job", j.JobID).Msg("job not found in the job map at its start; looked up again at its end")
			return
		}
		d.mu.Lock()
		jd.facts = f
		d.mu.Unlock()
	}()
}

// await says that the job map is being asked about job id by another part (the
// reconciler, for a job a previous daemon left running): its digest waits for that answer
// (found) as for a lookup at the batch step's start, instead of asking beside it.
func (d *digester) await(id uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	jd := d.job(id)
	if jd.looked == nil {
		jd.looked = make(chan struct{})
		jd.awaited = true
	}
}

// found is another part's answer about job id (f nil: the job map could not tell), for
// a digest that awaits it.
func (d *digester) found(id uint32, f *jobmap.Job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	jd := d.jobs[id]
	if jd == nil || !jd.awaited {
		return
	}
	jd.awaited = false
	if f != nil {
		c := *f
		jd.facts = &c
	}
	close(jd.looked)
}

// prefetched returns the job's facts as looked up at its batch step's start (waiting,
// within ctx, for a lookup under way), or nil when the digest must look the job up now:
// none was made or it failed, a late or interactive digest, or an end Slurm may have
// made (the batch script did not exit 0, or the job reached its time limit): then the
// job's state (TIMEOUT, CANCELLED, ...) is read as it is now. A copy: the digest may
// change it.
func (d *digester) prefetched(ctx context.Context, j *Job, mode digestMode) *jobmap.Job {
	if mode != atBatchEnd {
		return nil
	}
	d.mu.Lock()
	done := d.job(j.JobID).looked
	d.mu.Unlock()
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
	d.mu.Lock()
	f := d.jobs[j.JobID].facts
	d.mu.Unlock()
	b := j.step("batch")
	if f == nil || b == nil || b.ExitStatus == nil || *b.ExitStatus != 0 {
		return nil
	}
	if f.TimeLimit > 0 && d.now().Sub(j.Started) >= f.TimeLimit-2*d.cycle-time.Second {
		return nil
	}
	c := *f
	return &c
}

// newRun forgets what was known of job id's digest: Slurm runs the job again (it was
// requeued), and the new run gets its own lookup and digest.
func (d *digester) newRun(id uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.jobs, id)
}

// startFacts is what the job map said of job id when its batch step started (nil: not
// looked up, or not yet).
func (d *digester) startFacts(id uint32) *jobmap.Job {
	d.mu.Lock()
	defer d.mu.Unlock()
	if jd := d.jobs[id]; jd != nil {
		return jd.facts
	}
	return nil
}

// keep keeps job id's report, in memory and in the state directory.
func (d *digester) keep(id uint32, rep digest.Report) {
	d.mu.Lock()
	d.job(id).report = &rep
	d.mu.Unlock()
	if err := d.reports.save(id, &rep); err != nil {
		d.log.Warn().Err(err).Uint32("job", id).Msg("report not saved")
	}
}

// kept returns job id's report: kept in memory, else from the state directory
// (errNoReport: none).
func (d *digester) kept(id uint32) (*digest.Report, error) {
	d.mu.Lock()
	var r *digest.Report
	if jd := d.jobs[id]; jd != nil {
		r = jd.report
	}
	d.mu.Unlock()
	if r != nil {
		return r, nil
	}
	return d.reports.load(id)
}

// forget drops what is known of the digests of jobs keep does not keep, and their saved
// reports: a report lives as long as the registry keeps its job.
func (d *digester) forget(keep func(uint32) bool) {
	d.mu.Lock()
	for id := range d.jobs {
		if !keep(id) {
			delete(d.jobs, id)
		}
	}
	d.mu.Unlock()
	d.reports.sweep(keep, d.log)
}

// write appends the text digest to the job's output file, as the job's user.
func (d *digester) write(ctx context.Context, j *Job, rep digest.Report, facts *jobmap.Job, mode digestMode, start time.Time) error {
	log := d.log.With().Uint32("job", j.JobID).Int("findings", len(rep.Findings)).Logger()
	path := facts.Stdout
	if path != "" && !filepath.IsAbs(path) {
		path = filepath.Join(facts.WorkDir, path)
	}
	if path == "" {
		d.metrics.Digest("no_output")
		log.Info().Msg("job has no output file: digest kept, not written")
		return nil
	}
	if mode == late && facts.Running() {
		log.Info().Msg("late digest not written: Slurm says the job still runs")
		return nil
	}
	text := digest.Text(rep, digest.TextOptions{})
	err := d.cfg.Append(ctx, digest.Target{Path: path, UID: j.UID, GID: j.GID}, []byte(text))
	d.metrics.Digest(digestResult(err))
	switch {
	case errors.Is(err, digest.ErrNotRegular):
		log.Debug().Str("path", path).Msg("output is not a regular file (e.g. /dev/null): no digest written")
		return nil
	case err != nil:
		log.Warn().Err(err).Str("path", path).Msg("digest not written")
		return err
	}
	log.Info().Str("path", path).Dur("took", time.Since(start)).Msg("digest written")
	return nil
}

// accountTimeout bounds writing a job's summary into Slurm's accounting. On a quiet test
// cluster the fresh read of the AdminComment and scontrol take 15-25 ms together; under
// load (a 100-task array) far longer; a summary that reaches slurmctld after the job
// completed goes into the database after the job's end (0.3-0.8 s), which no one waits
// for.
const accountTimeout = 20 * time.Second

// account writes the job's summary into Slurm's accounting, in the background; the
// returned channel is closed when it is done.
//
// fresh says facts were looked up after the job's end; facts looked up at the batch
// step's start are as old as the step, and the AdminComment the summary is merged with
// is read again first (a site may have set one while the job ran; it is never
// overwritten): the digest's one lookup after the job's end.
func (d *digester) account(j *Job, facts *jobmap.Job, fresh bool, rep digest.Report) <-chan struct{} {
	done := make(chan struct{})
	if d.cfg.Accounting == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), accountTimeout)
		defer cancel()
		start := time.Now()
		existing := facts.AdminComment
		if !fresh {
			f, err := d.cfg.Facts.Job(ctx, facts.ID())
			if err != nil {
				d.metrics.Accounting("error", time.Since(start))
				d.log.Warn().Err(err).Uint32("job", j.JobID).Msg("summary not written into Slurm accounting: the job's AdminComment could not be read")
				return
			}
			existing = f.AdminComment
		}
		res, err := d.cfg.Accounting(ctx, facts.ID(), facts.JobID, existing, rep)
		took := time.Since(start)
		d.metrics.Accounting(res, took)
		log := d.log.With().Uint32("job", j.JobID).Str("result", res).Dur("took", took).Logger()
		switch {
		case res == "written":
			log.Info().Msg("summary kept in Slurm accounting (AdminComment)")
		case res == "present":
			log.Info().Msg("summary not written: the job's AdminComment holds one already")
		default:
			log.Warn().Err(err).Msg("summary not written into Slurm accounting")
		}
	}()
	return done
}

// digestResult names the outcome of writing a digest, for persyst_daemon_digests_total.
func digestResult(err error) string {
	switch {
	case err == nil:
		return "written"
	case errors.Is(err, digest.ErrNotRegular):
		return "not_regular"
	case errors.Is(err, digest.ErrSymlink):
		return "symlink"
	case errors.Is(err, digest.ErrNotOwner):
		return "not_owner"
	case errors.Is(err, digest.ErrUnlinked):
		return "unlinked"
	case errors.Is(err, fs.ErrNotExist):
		return "not_found"
	case errors.Is(err, fs.ErrPermission):
		return "permission"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}
