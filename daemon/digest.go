package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
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
}

// Digest evaluates a job's properties on this node, keeps the report, and (unless the
// digest is off) appends the text digest to the job's output file as the job's user.
// It is called at the end of the batch step on the batch host, once per job.
func (m *Measurer) Digest(ctx context.Context, j *Job) error {
	if m.dig.Engine == nil || j.State != Running {
		return nil
	}
	m.mu.Lock()
	jm := m.jobs[j.JobID]
	if jm == nil || jm.job == nil || jm.digested {
		m.mu.Unlock()
		return nil
	}
	jm.digested = true
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
	if m.dig.Facts != nil {
		f, err := m.dig.Facts.Job(ctx, id)
		if err != nil {
			m.log.Warn().Err(err).Uint32("job", j.JobID).Msg("job not found in the job map: digest kept, not written")
		}
		facts = f
	}
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
	results := jm.job.Results(memRequested)
	df := digest.Facts{JobID: j.JobID, Nodes: []string{m.node}, NNodes: int(j.NNodes), CPUs: ncpus}
	if wide := m.jobWide(ctx, j); wide != nil {
		// What comes from the tree is taken for its numbers only (properties.Adopt).
		results = properties.MergeResults(results, m.dig.Engine.Adopt(wide.Properties))
		df.Nodes = nodeNames(wide.Nodes)
	}
	rep := jm.job.Report(df, results)
	m.mu.Lock()
	jm.report = &rep
	m.mu.Unlock()
	if err := m.reports.save(j.JobID, &rep); err != nil {
		m.log.Warn().Err(err).Uint32("job", j.JobID).Msg("report not saved")
	}
	log := m.log.With().Uint32("job", j.JobID).Int("findings", len(rep.Findings)).Logger()
	if m.dig.Off || facts == nil || m.dig.Append == nil {
		log.Info().Msg("job digest kept (not written into the output file)")
		return nil
	}
	path := facts.Stdout
	if path != "" && !filepath.IsAbs(path) {
		path = filepath.Join(facts.WorkDir, path)
	}
	if path == "" {
		log.Info().Msg("job has no output file: digest kept, not written")
		return nil
	}
	text := digest.Text(rep, digest.TextOptions{})
	err := m.dig.Append(ctx, digest.Target{Path: path, UID: j.UID, GID: j.GID}, []byte(text))
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

// Report returns a job's report: kept in memory, else from the state directory.
func (m *Measurer) Report(id uint32) (*digest.Report, error) {
	m.mu.Lock()
	jm := m.jobs[id]
	m.mu.Unlock()
	if jm != nil && jm.report != nil {
		return jm.report, nil
	}
	return m.reports.load(id)
}

// jobWide fetches a multi-node job's job-wide results through the uplink; nil when there
// is none (the digest then covers this node).
func (m *Measurer) jobWide(ctx context.Context, j *Job) *digest.Report {
	up := m.cfg.Uplink
	if up == nil || j.NNodes < 2 {
		m.log.Debug().Uint32("job", j.JobID).Bool("uplink", up != nil).Uint32("nnodes", j.NNodes).Msg("no job-wide results to fetch")
		return nil
	}
	wide, err := up.JobWide(ctx, j.JobID)
	if err != nil {
		m.log.Info().Err(err).Uint32("job", j.JobID).Msg("no job-wide results: the digest covers this node")
		return nil
	}
	return wide
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
