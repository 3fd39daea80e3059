package daemon

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// A job's report on its batch host: this node's results merged with the other nodes'
// (the tree's or the peers'), what the report covers, and how the job ended, handed to
// digest.Assemble.

// report evaluates the job's results on this node, merges the other nodes', and
// assembles the report.
func (d *digester) report(ctx context.Context, j *Job, pj *pipeline.Job, facts *jobmap.Job, mode digestMode, at time.Time) digest.Report {
	ncpus := len(pj.Meter().Spec().CPUs)
	req, judged := memRequest(facts, ncpus)
	results := pj.Results(judged)
	f := reportFacts(j, facts, d.node, ncpus, mode, at, 2*d.cycle+time.Second)
	why := ""
	reasons := map[string]string{}
	wide, whyNot := d.jobWide(ctx, j, facts)
	if wide != nil {
		// What comes from other agents is taken for its numbers only (properties.Adopt).
		results = properties.MergeResults(results, d.cfg.Engine.Adopt(wide.Properties))
		f.Nodes = nodeNames(wide.Nodes)
		if !slices.Contains(f.Nodes, d.node) {
			// This node's own measurement covers it, judged or too short to be.
			f.Nodes = append([]string{d.node}, f.Nodes...)
		}
		f.CPUs = jobCPUs(facts, f.Nodes, d.node, ncpus)
		why = "no data of it reached the batch host"
		if wide.Coverage != nil {
			for _, mn := range wide.Coverage.Missing {
				reasons[mn.Node] = mn.Why
			}
			f.Short = nodeNames(wide.Coverage.Short)
		}
	} else {
		why = whyNot
	}
	f.Missing = missingNodes(append(slices.Clone(f.Nodes), f.Short...), facts, int(j.NNodes), why, reasons)
	in := digest.Input{Facts: f, Results: results, MinSeconds: d.cfg.Engine.MinSeconds()}
	if mode != interactive || (facts != nil && !facts.Running()) {
		e := ending(j, facts, d.startFacts(j.JobID), req, f.JobEnd.Sub(f.JobStart), d.oom.kills(j.JobID), pj)
		in.Ending = &e
		in.Facts.Run = run(facts, e.Requeued)
	}
	in.Measured = pj.Summary()
	in.Phases, in.Interference = pj.Phases(judged)
	in.PhasesNode = d.node
	if wide != nil {
		whenAndWhy(&in, wide, f.Nodes)
	}
	in.Episodes = d.episodes(j.JobID, f.JobStart, f.JobEnd)
	return digest.Assemble(in)
}

// episodes are the site-wide I/O episodes that stalled the job within its life, as the
// collector tree's frontend last sent them (none without a tree).
func (d *digester) episodes(job uint32, start, end time.Time) []episodes.Episode {
	e, ok := d.uplink.(episodes.Source)
	if !ok {
		return nil
	}
	var out []episodes.Episode
	for _, ep := range e.Episodes(job) {
		if ep.To.After(start) && ep.From.Before(end) {
			out = append(out, ep)
		}
	}
	return out
}

// whenAndWhy takes from a multi-node job's job-wide report how alike its nodes behaved,
// and the interference of the node that lost the most where that is another node and
// lost more than this one. Node names come from other agents: only the job's nodes are
// taken.
func whenAndWhy(in *digest.Input, wide *digest.Report, nodes []string) {
	if a := wide.Alike; a != nil {
		c := *a
		c.Unlike = slices.DeleteFunc(slices.Clone(a.Unlike), func(u phases.UnlikeNode) bool { return !slices.Contains(nodes, u.Node) })
		in.Alike = &c
	}
	w := wide.Interference
	if w == nil || wide.InterferenceNode == in.PhasesNode || !slices.Contains(nodes, wide.InterferenceNode) {
		return
	}
	if in.Interference == nil || w.Share > in.Interference.Share {
		in.Interference, in.InterferenceNode = w, wide.InterferenceNode
	}
}

// memRequest is the job's memory request on this node in bytes (0: none), and what of it
// is judged: a request the job did not make (the site's default) is not judged as too
// large.
func memRequest(facts *jobmap.Job, ncpus int) (req, judged float64) {
	if facts == nil {
		return 0, 0
	}
	switch {
	case facts.MemPerNodeMB > 0:
		req = float64(facts.MemPerNodeMB) * (1 << 20)
	case facts.MemPerCPUMB > 0:
		req = float64(facts.MemPerCPUMB) * (1 << 20) * float64(ncpus)
	}
	if facts.MemDefault {
		return req, 0
	}
	return req, req
}

// reportFacts are the report's facts of job j on this node (its ncpus) before other
// nodes' are merged: which job, and its life on its batch host (at now; a late digest:
// as Slurm recorded it).
func reportFacts(j *Job, facts *jobmap.Job, node string, ncpus int, mode digestMode, now time.Time, tolerance time.Duration) digest.Facts {
	f := digest.Facts{JobID: j.JobID, Nodes: []string{node}, NNodes: int(j.NNodes), CPUs: ncpus,
		JobStart: j.Started, JobEnd: now, Tolerance: tolerance, Late: mode == late}
	if j.ArrayJobID != 0 {
		f.ArrayJobID, f.ArrayTaskID = j.ArrayJobID, j.ArrayTaskID
	} else if facts != nil && facts.IsArray {
		f.ArrayJobID, f.ArrayTaskID = facts.ArrayJobID, facts.ArrayTaskID
	}
	if mode == late {
		// The job's end as Slurm recorded it; else when this daemon found it ended.
		switch {
		case facts != nil && !facts.End.IsZero() && facts.End.After(j.Started) && facts.End.Before(f.JobEnd):
			f.JobEnd = facts.End
		case j.Ended != nil:
			f.JobEnd = *j.Ended
		}
	}
	return f
}

// jobWide fetches a multi-node job's job-wide results through the uplink (the collector
// tree, or the job's other node daemons); nil when there are none (the digest then
// covers this node), with why.
func (d *digester) jobWide(ctx context.Context, j *Job, facts *jobmap.Job) (*digest.Report, string) {
	multi := j.NNodes > 1 || (facts != nil && len(facts.Nodes) > 1)
	switch {
	case !multi:
		return nil, ""
	case d.uplink == nil:
		return nil, "this daemon gathers no other nodes' data"
	}
	wide, err := d.uplink.JobWide(ctx, j.JobID)
	if err != nil {
		d.log.Info().Err(err).Uint32("job", j.JobID).Msg("no job-wide results: the digest covers this node")
		return nil, "their data could not be gathered (the persyst daemon's log says why)"
	}
	return wide, ""
}

// ending gathers what is known of how job j ended, for its digest's events: Slurm's
// state, the batch script's exit status, the OOM kills, the memory peak against the
// request (bytes), the time limit, and how busy the job was at its end.
func ending(j *Job, facts, atStart *jobmap.Job, memRequested float64, elapsed time.Duration, kills int, pj *pipeline.Job) digest.Ending {
	e := digest.Ending{MemRequested: memRequested, Elapsed: elapsed, LastCPUShare: -1}
	if j.NNodes > 1 {
		e.Node = j.Node
	}
	if facts != nil {
		e.State, e.TimeLimit, e.MemDefault = facts.State, facts.TimeLimit, facts.MemDefault
		e.Requeued, e.Held, e.Preempted = requeue(facts, atStart, j.Started)
	}
	if s := j.step("batch"); s != nil {
		e.Exit = s.ExitStatus
	}
	sum := pj.Summary()
	e.MemPeak = sum.Totals[sample.MemPeakBytes]
	for _, x := range pj.Meter().Samples() {
		e.AnonPeak = max(e.AnonPeak, x.Job[sample.MemAnonBytes])
	}
	e.OOMKills = max(int(sum.Totals[sample.OOMKills]), kills)
	e.LastCPUShare = lastCPUShare(pj.Meter().Samples(), len(pj.Meter().Spec().CPUs))
	return e
}

// requeue says whether Slurm requeued the job as its run that started at started ended
// (facts: the job map now; atStart: at the run's start, nil if not looked up): Slurm's
// flags say so where the source shows them beside COMPLETING, the job waits to run
// again, or its restart count rose since the run started (Slurm raises it as it
// requeues). held: it waits for a release; preempted: Slurm preempted this run.
func requeue(facts, atStart *jobmap.Job, started time.Time) (requeued, held, preempted bool) {
	requeued, held = facts.Requeued, facts.Held
	if facts.State == "PENDING" || (atStart != nil && facts.Restarts > atStart.Restarts) {
		requeued = true
	}
	preempted = !facts.Preempted.IsZero() && !facts.Preempted.Before(started.Add(-time.Second))
	return requeued, held, preempted
}

// run is which run of the job this is (0: a job Slurm never requeued): Slurm's restart
// count says how often it was requeued, raised already when this run was requeued.
func run(facts *jobmap.Job, requeued bool) int {
	switch {
	case facts == nil || (facts.Restarts == 0 && !requeued):
		return 0
	case requeued:
		return max(facts.Restarts, 1)
	}
	return facts.Restarts + 1
}

// lastCPUShare is the share of ncpus busy over the job's last samples (its last 5
// minutes, or its last quarter when shorter); <0 when unknown.
func lastCPUShare(samples []sample.Sample, ncpus int) float64 {
	if len(samples) == 0 || ncpus == 0 {
		return -1
	}
	last := samples[len(samples)-1].Time
	span := 5 * time.Minute
	if total := last.Sub(samples[0].From()); total < 4*span {
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

// Report returns a job's report: kept in memory, else from the state directory; else why
// there is none.
func (m *Measurer) Report(id uint32) (*digest.Report, error) {
	r, err := m.dig.kept(id)
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
