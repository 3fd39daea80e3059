package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
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
	// it at the batch step's end (default 4 s, below the plugin's 5 s).
	Timeout time.Duration
	// Accounting, if set, keeps the job's summary in Slurm's accounting (accounting.Write:
	// job as Slurm names it, its id, its AdminComment as the job map read it); it returns
	// the result for the metrics.
	Accounting func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error)
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

// Digest evaluates a job's properties on this node, keeps the report, and (unless the
// digest is off) appends the text digest to the job's output file as the job's user.
// It is called at the end of the batch step on the batch host, once per job.
func (m *Measurer) Digest(ctx context.Context, j *Job) error {
	if j.State != Running {
		return nil
	}
	return m.digest(ctx, j, atBatchEnd)
}

// LateDigest makes the digest of a job that ended while this node's daemon was not
// running (or missed its end): from what was measured of it, marked as made after the
// job ended, and appended to its output file if that is still the job's.
func (m *Measurer) LateDigest(ctx context.Context, j *Job) error {
	return m.digest(ctx, j, late)
}

// InteractiveDigest makes the report of a job without a batch script (srun, salloc) on
// its first node, at each step's end and at the job's end: kept for `persyst report`
// (which srun runs at the end of a job it started, to print it), written into no file
// (the job's output went to a terminal).
func (m *Measurer) InteractiveDigest(ctx context.Context, j *Job) error {
	if j.step("batch") != nil || j.NodeID != 0 || len(j.Steps) == 0 {
		return nil
	}
	return m.digest(ctx, j, interactive)
}

// digestMode is when a digest is made.
type digestMode int

const (
	atBatchEnd  digestMode = iota // the batch script ended: the digest goes into the job's output
	late                          // the job ended while the daemon was down
	interactive                   // a job without a batch script ended: a report only
)

func (m *Measurer) digest(ctx context.Context, j *Job, mode digestMode) error {
	if m.dig.Engine == nil || j.State == OptedOut {
		return nil
	}
	m.mu.Lock()
	if jm := m.jobs[j.JobID]; jm != nil {
		m.mu.Unlock()
		m.waitStart(jm) // a job that ended moments after it started
		m.mu.Lock()
	}
	jm := m.jobs[j.JobID]
	// A digest is made once; an interactive job's report is made again at each step's
	// end and at the job's end (it goes into no file).
	if jm == nil || jm.job == nil || (jm.digested && mode != interactive) {
		m.mu.Unlock()
		return nil
	}
	jm.digested = jm.digested || mode != interactive
	m.mu.Unlock()

	timeout := m.dig.Timeout
	if timeout <= 0 {
		timeout = 4 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	id := strconv.FormatUint(uint64(j.JobID), 10)
	var facts *jobmap.Job
	phase := time.Now()
	fresh := false
	if m.dig.Facts != nil {
		facts = m.prefetched(ctx, j, jm, mode)
		if facts == nil {
			f, err := m.dig.Facts.Job(ctx, id)
			if err != nil {
				m.log.Warn().Err(err).Uint32("job", j.JobID).Msg("job not found in the job map: digest kept, not written")
			}
			facts, fresh = f, true
		}
	}
	if mode == interactive && facts != nil && facts.BatchHost != "" && facts.BatchHost != m.node {
		return nil // a step of a batch job that runs elsewhere
	}
	factsTook := time.Since(phase)
	phase = time.Now()
	rep := m.jobReport(ctx, j, jm, facts, mode)
	reportTook := time.Since(phase)
	defer func() {
		m.log.Debug().Uint32("job", j.JobID).Dur("facts", factsTook).Dur("report", reportTook).
			Dur("took", time.Since(start)).Msg("digest phases")
	}()
	// A batch job's final report is its digest's; a job without a batch script's (srun,
	// salloc) is its report at its end. It goes to the tree's keeper, and its summary
	// into Slurm's accounting.
	final := mode != interactive || j.State != Running
	if final && m.cfg.Uplink != nil {
		m.cfg.Uplink.Keep(j.JobID, rep)
	}
	if facts != nil && final {
		// Written in the background (accounting.Write: slurmctld while it takes it, else
		// the database once the job's end is there). The batch step's end, which Slurm
		// waits for, never waits for it: waiting ~30 ms got more summaries to slurmctld
		// before the job completed, and cost every job's end those 30 ms (p90 50 ms under
		// a 100-task array); the database takes the others after the job.
		m.account(j, facts, fresh, rep)
	}
	m.mu.Lock()
	jm.report = &rep
	m.mu.Unlock()
	if err := m.reports.save(j.JobID, &rep); err != nil {
		m.log.Warn().Err(err).Uint32("job", j.JobID).Msg("report not saved")
	}
	if m.dig.Off || facts == nil || m.dig.Append == nil || mode == interactive {
		if mode != interactive {
			m.cfg.Metrics.Digest(map[bool]string{true: "off", false: "no_job_facts"}[m.dig.Off || m.dig.Append == nil])
		}
		m.log.Info().Uint32("job", j.JobID).Int("findings", len(rep.Findings)).Msg("job digest kept (not written into the output file)")
		return nil
	}
	return m.write(ctx, j, rep, facts, mode, start)
}

// write appends the text digest to the job's output file, as the job's user.
func (m *Measurer) write(ctx context.Context, j *Job, rep digest.Report, facts *jobmap.Job, mode digestMode, start time.Time) error {
	log := m.log.With().Uint32("job", j.JobID).Int("findings", len(rep.Findings)).Logger()
	path := facts.Stdout
	if path != "" && !filepath.IsAbs(path) {
		path = filepath.Join(facts.WorkDir, path)
	}
	if path == "" {
		m.cfg.Metrics.Digest("no_output")
		log.Info().Msg("job has no output file: digest kept, not written")
		return nil
	}
	if mode == late && facts.Running() {
		log.Info().Msg("late digest not written: Slurm says the job still runs")
		return nil
	}
	text := digest.Text(rep, digest.TextOptions{})
	err := m.dig.Append(ctx, digest.Target{Path: path, UID: j.UID, GID: j.GID}, []byte(text))
	m.cfg.Metrics.Digest(digestResult(err))
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
// fresh says facts were looked up at the digest; prefetched facts are as old as the batch
// step, and the AdminComment the summary is merged with is read again first (a site may
// have set one while the job ran; it is never overwritten).
func (m *Measurer) account(j *Job, facts *jobmap.Job, fresh bool, rep digest.Report) <-chan struct{} {
	done := make(chan struct{})
	if m.dig.Accounting == nil {
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
			f, err := m.dig.Facts.Job(ctx, facts.ID())
			if err != nil {
				m.cfg.Metrics.Accounting("error", time.Since(start))
				m.log.Warn().Err(err).Uint32("job", j.JobID).Msg("summary not written into Slurm accounting: the job's AdminComment could not be read")
				return
			}
			existing = f.AdminComment
		}
		res, err := m.dig.Accounting(ctx, facts.ID(), facts.JobID, existing, rep)
		took := time.Since(start)
		m.cfg.Metrics.Accounting(res, took)
		log := m.log.With().Uint32("job", j.JobID).Str("result", res).Dur("took", took).Logger()
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

// prefetched returns the job's facts as looked up at its batch step's start (waiting,
// within ctx, for a lookup under way), or nil when the digest must look the job up now:
// none was made or it failed, a late or interactive digest, or an end Slurm may have
// made (the batch script did not exit 0, or the job reached its time limit): then the
// job's state (TIMEOUT, CANCELLED, ...) is read as it is now. A copy: the digest may
// change it.
func (m *Measurer) prefetched(ctx context.Context, j *Job, jm *jobMeter, mode digestMode) *jobmap.Job {
	if mode != atBatchEnd {
		return nil
	}
	m.mu.Lock()
	done := jm.factsDone
	m.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil
	}
	m.mu.Lock()
	f := jm.facts
	m.mu.Unlock()
	b := j.step("batch")
	if f == nil || b == nil || b.ExitStatus == nil || *b.ExitStatus != 0 {
		return nil
	}
	if f.TimeLimit > 0 && m.now().Sub(j.Started) >= f.TimeLimit-2*m.cfg.Cycle-time.Second {
		return nil
	}
	c := *f
	return &c
}

// jobReport evaluates the job's results on this node, merges the other nodes' (the
// tree's or the peers'), and builds the report with what it covers.
func (m *Measurer) jobReport(ctx context.Context, j *Job, jm *jobMeter, facts *jobmap.Job, mode digestMode) digest.Report {
	ncpus := len(jm.job.Meter().Spec().CPUs)
	var memRequested float64
	if facts != nil {
		switch {
		case facts.MemPerNodeMB > 0:
			memRequested = float64(facts.MemPerNodeMB) * (1 << 20)
		case facts.MemPerCPUMB > 0:
			memRequested = float64(facts.MemPerCPUMB) * (1 << 20) * float64(ncpus)
		}
	}
	// A request the job did not make (the site's default) is not judged as too large.
	judged := memRequested
	if facts != nil && facts.MemDefault {
		judged = 0
	}
	results := jm.job.Results(judged)
	df := digest.Facts{JobID: j.JobID, Nodes: []string{m.node}, NNodes: int(j.NNodes), CPUs: ncpus,
		JobStart: j.Started, JobEnd: m.now(), Tolerance: 2*m.cfg.Cycle + time.Second, Late: mode == late}
	if j.ArrayJobID != 0 {
		df.ArrayJobID, df.ArrayTaskID = j.ArrayJobID, j.ArrayTaskID
	} else if facts != nil && facts.IsArray {
		df.ArrayJobID, df.ArrayTaskID = facts.ArrayJobID, facts.ArrayTaskID
	}
	if mode == late {
		// The job's end as Slurm recorded it; else when this daemon found it ended.
		switch {
		case facts != nil && !facts.End.IsZero() && facts.End.After(j.Started) && facts.End.Before(df.JobEnd):
			df.JobEnd = facts.End
		case j.Ended != nil:
			df.JobEnd = *j.Ended
		}
	}
	var why string
	reasons := map[string]string{}
	if wide := m.jobWide(ctx, j, facts, &why); wide != nil {
		// What comes from other agents is taken for its numbers only (properties.Adopt).
		results = properties.MergeResults(results, m.dig.Engine.Adopt(wide.Properties))
		df.Nodes = nodeNames(wide.Nodes)
		df.CPUs = jobCPUs(facts, df.Nodes, m.node, ncpus)
		why = "no data of it reached the batch host"
		if wide.Coverage != nil {
			for _, mn := range wide.Coverage.Missing {
				reasons[mn.Node] = mn.Why
			}
		}
	}
	df.Missing = missingNodes(df.Nodes, facts, int(j.NNodes), why, reasons)
	in := digest.Input{Facts: df, Measured: jm.job.Summary(), Results: results, MinSeconds: m.dig.Engine.MinSeconds()}
	if mode != interactive || (facts != nil && !facts.Running()) {
		e := m.ending(j, jm, facts, memRequested, df.JobStart, df.JobEnd)
		in.Ending = &e
	}
	return digest.Assemble(in)
}

// Report returns a job's report: kept in memory, else from the state directory.
func (m *Measurer) Report(id uint32) (*digest.Report, error) {
	m.mu.Lock()
	jm := m.jobs[id]
	m.mu.Unlock()
	if jm != nil && jm.report != nil {
		return jm.report, nil
	}
	r, err := m.reports.load(id)
	if !errors.Is(err, errNoReport) {
		return r, err
	}
	j := m.reg.Job(id)
	switch {
	case j == nil:
		return nil, fmt.Errorf("job %d: not known on this node", id)
	case j.State == OptedOut:
		return nil, fmt.Errorf("job %d opted out of persyst (--persyst=off)", id)
	case j.step("batch") == nil && j.NodeID == 0 && len(j.Steps) > 0:
		return nil, fmt.Errorf("job %d: no report yet; a job without a batch script gets one here at the end of each step and of the job", id)
	case j.step("batch") == nil && j.Ended == nil:
		return nil, fmt.Errorf("job %d: no report yet; it is made on the job's batch host at the end of the job (run there, or give --node)", id)
	case j.step("batch") == nil:
		return nil, fmt.Errorf("job %d ran here, but its report is on its batch host (give --node)", id)
	case j.Ended == nil && j.step("batch").Ended == nil:
		return nil, fmt.Errorf("job %d: no report yet; it is made when the job's batch script ends", id)
	}
	return nil, fmt.Errorf("job %d: no report was made (see the persyst daemon's log)", id)
}

// jobWide fetches a multi-node job's job-wide results through the uplink (the collector
// tree, or the job's other node daemons); nil when there are none (the digest then covers
// this node, and why says why).
func (m *Measurer) jobWide(ctx context.Context, j *Job, facts *jobmap.Job, why *string) *digest.Report {
	up := m.cfg.Uplink
	multi := j.NNodes > 1 || (facts != nil && len(facts.Nodes) > 1)
	switch {
	case !multi:
		return nil
	case up == nil:
		*why = "this daemon gathers no other nodes' data"
		return nil
	}
	wide, err := up.JobWide(ctx, j.JobID)
	if err != nil {
		m.log.Info().Err(err).Uint32("job", j.JobID).Msg("no job-wide results: the digest covers this node")
		*why = "their data could not be gathered (the persyst daemon's log says why)"
		return nil
	}
	return wide
}

// jobCPUs counts the CPUs on the nodes covered: this node's as measured, the others'
// as Slurm allocated them (own alone when the job map does not say).
func jobCPUs(facts *jobmap.Job, covered []string, self string, own int) int {
	if facts == nil {
		return own
	}
	n := own
	for _, node := range covered {
		if node == self {
			continue
		}
		i := slices.IndexFunc(facts.Alloc, func(a jobmap.NodeAlloc) bool { return a.Node == node })
		if i < 0 {
			return own
		}
		switch a := facts.Alloc[i]; {
		case len(a.CPUIDs) > 0:
			n += len(a.CPUIDs)
		case a.Cores > 0:
			n += a.Cores
		default:
			return own
		}
	}
	return n
}

// missingNodes are the job's nodes the digest does not cover: from the job map when it
// knows them, else counted from the job's node count.
func missingNodes(covered []string, facts *jobmap.Job, nnodes int, why string, reasons map[string]string) []digest.MissingNode {
	var out []digest.MissingNode
	if facts != nil && len(facts.Nodes) > 0 {
		for _, n := range facts.Nodes {
			if !slices.Contains(covered, n) {
				w := why
				if r, ok := reasons[n]; ok {
					w = r
				}
				out = append(out, digest.MissingNode{Node: n, Why: w})
			}
		}
		return out
	}
	if n := nnodes - len(covered); n > 0 {
		out = append(out, digest.MissingNode{Node: fmt.Sprintf("%d other node%s", n, map[bool]string{true: "", false: "s"}[n == 1]), Why: why})
	}
	return out
}

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// nodeNames keeps the well-formed node names of a list from the tree (at most
// sample.MaxCPUs of them).
func nodeNames(in []string) []string {
	out := make([]string, 0, min(len(in), 1024))
	for _, n := range in {
		if nodeNameRE.MatchString(n) && len(out) < sample.MaxCPUs {
			out = append(out, n)
		}
	}
	return out
}
