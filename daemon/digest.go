package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
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
	// it at the batch step's end (default DefaultDigestTimeout).
	Timeout time.Duration
	// Accounting, if set, keeps the job's summary in Slurm's accounting (accounting.Write:
	// job as Slurm names it, its id, its AdminComment as the job map read it); it returns
	// the result for the metrics.
	Accounting func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error)
	// CO2PerKWh, above 0, gives a job's emissions beside its energy (persyst.conf's
	// EnergyCO2PerKWh, grams per kWh).
	CO2PerKWh float64
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
	Send(job uint32, t time.Time, seconds float64, recs []properties.Record, maxRecords int, energy sample.Energy)
	// JobWide returns a multi-node job's report over all its nodes, after sending this
	// node's last interval, or why there is none (bounded in time).
	JobWide(ctx context.Context, job uint32) (*digest.Report, error)
	// Forget drops what is kept for an ended job.
	Forget(job uint32)
	// Keep hands a job's final report to the tree, which keeps every job's report for
	// the site's view (persyst web); it never blocks.
	Keep(job uint32, r digest.Report)
	// KeepNotice hands what a running job's user was told to the tree, which keeps the
	// site's view of the running jobs that hold what they do not use; it never blocks.
	KeepNotice(n digest.Notice)
}

// digestMode is when a digest is made.
type digestMode int

const (
	atBatchEnd  digestMode = iota // the batch script ended: the digest goes into the job's output
	late                          // the job ended while the daemon was down
	interactive                   // a job without a batch script ended: a report only
)

// digester keeps jobs' reports and writes their digests: a report is kept in memory, in
// the state directory and (a job's final one) by the tree; a digest's text is appended to
// the job's output file as the job's user. It owns the reports kept in memory and their
// lock.
type digester struct {
	off bool // evaluate and keep reports, but write nothing into output files
	// appendText writes text at the end of a file as its user (DigestConfig.Append; nil:
	// nothing is written).
	appendText func(ctx context.Context, t digest.Target, text []byte) error
	uplink     Uplink
	reports    reportStore
	metrics    *exporter.Daemon
	log        zerolog.Logger

	mu   sync.Mutex
	kept map[uint32]*digest.Report
}

// keep keeps the report of a job's end e: in memory, in the state directory, and by the
// tree when it is the job's final one.
func (d *digester) keep(e *jobEnd, rep digest.Report) {
	id := e.job.JobID
	if e.final() && d.uplink != nil {
		d.uplink.Keep(id, rep)
	}
	d.mu.Lock()
	d.kept[id] = &rep
	d.mu.Unlock()
	if err := d.reports.save(id, &rep); err != nil {
		d.log.Warn().Err(err).Uint32("job", id).Msg("report not saved")
	}
}

// report returns job id's report: kept in memory, else from the state directory
// (errNoReport: none).
func (d *digester) report(id uint32) (*digest.Report, error) {
	d.mu.Lock()
	r := d.kept[id]
	d.mu.Unlock()
	if r != nil {
		return r, nil
	}
	return d.reports.load(id)
}

// forget drops the reports of jobs keep does not keep, saved ones too: a report lives as
// long as the registry keeps its job.
func (d *digester) forget(keep func(uint32) bool) {
	d.mu.Lock()
	for id := range d.kept {
		if !keep(id) {
			delete(d.kept, id)
		}
	}
	d.mu.Unlock()
	d.reports.sweep(keep, d.log)
}

// Report returns a job's report: kept in memory, else from the state directory; else why
// there is none.
func (m *Measurer) Report(id uint32) (*digest.Report, error) {
	r, err := m.dig.report(id)
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

// write appends the text of the digest of a job's end e to the job's output file, as the
// job's user: unless digests are off, the job map said nothing of the job, or it is the
// report of a job without a batch script (its output went to a terminal).
func (d *digester) write(ctx context.Context, e *jobEnd, rep digest.Report) error {
	j, facts := e.job, e.facts
	log := d.log.With().Uint32("job", j.JobID).Int("findings", len(rep.Findings)).Logger()
	if d.off || facts == nil || d.appendText == nil || e.mode == interactive {
		if e.mode != interactive {
			d.metrics.Digest(map[bool]string{true: "off", false: "no_job_facts"}[d.off || d.appendText == nil])
		}
		log.Info().Msg("job digest kept (not written into the output file)")
		return nil
	}
	path := facts.Stdout
	if path != "" && !filepath.IsAbs(path) {
		path = filepath.Join(facts.WorkDir, path)
	}
	if path == "" {
		d.metrics.Digest("no_output")
		log.Info().Msg("job has no output file: digest kept, not written")
		return nil
	}
	if e.mode == late && facts.Running() {
		log.Info().Msg("late digest not written: Slurm says the job still runs")
		return nil
	}
	text := digest.Text(rep, digest.TextOptions{})
	err := d.appendText(ctx, digest.Target{Path: path, UID: j.UID, GID: j.GID}, []byte(text))
	d.metrics.Digest(digestResult(err))
	switch {
	case errors.Is(err, digest.ErrNotRegular):
		log.Debug().Str("path", path).Msg("output is not a regular file (e.g. /dev/null): no digest written")
		return nil
	case err != nil:
		log.Warn().Err(err).Str("path", path).Msg("digest not written")
		return err
	}
	log.Info().Str("path", path).Dur("took", time.Since(e.began)).Msg("digest written")
	return nil
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
