package daemon

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// A job's report on its batch host, made from what the job's end knows (jobEnd) alone:
// this node's results merged with the other nodes' (the tree's or the peers'), what the
// report covers, and how the job ended, handed to digest.Assemble. Nothing here reads or
// asks anything: the same jobEnd gives the same report.

// report makes the job's report.
func (e *jobEnd) report() digest.Report {
	f := reportFacts(e)
	results := e.measured.results
	why := e.whyNot
	reasons := map[string]string{}
	if e.wide != nil {
		results = properties.MergeResults(results, e.others)
		f.Nodes = nodeNames(e.wide.Nodes)
		if !slices.Contains(f.Nodes, e.node) {
			// This node's own measurement covers it, judged or too short to be.
			f.Nodes = append([]string{e.node}, f.Nodes...)
		}
		f.CPUs = jobCPUs(e.facts, f.Nodes, e.node, e.measured.cpus)
		why = "no data of it reached the batch host"
		if e.wide.Coverage != nil {
			for _, mn := range e.wide.Coverage.Missing {
				reasons[mn.Node] = mn.Why
			}
			f.Short = nodeNames(e.wide.Coverage.Short)
		}
	}
	f.Missing = missingNodes(append(slices.Clone(f.Nodes), f.Short...), e.facts, int(e.job.NNodes), why, reasons)
	in := digest.Input{Facts: f, Results: results, MinSeconds: e.minSeconds, CO2PerKWh: e.co2, Measured: e.measured.summary,
		Phases: e.measured.phases, Interference: e.measured.interference, PhasesNode: e.node}
	if e.ended() {
		end := ending(e, f.JobEnd.Sub(f.JobStart))
		in.Ending = &end
		in.Facts.Run = run(e.facts, end.Requeued)
	}
	if e.wide != nil {
		whenAndWhy(&in, e.wide, f.Nodes)
		in.Energy = energies(e, f.Nodes)
	}
	in.Episodes = within(e.episodes, f.JobStart, f.JobEnd)
	return digest.Assemble(in)
}

// within are the episodes that overlap the job's life from start to end.
func within(eps []episodes.Episode, start, end time.Time) []episodes.Episode {
	var out []episodes.Episode
	for _, ep := range eps {
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

// energies is each node's energy of a multi-node job: this node's as it measured it, the
// job's other nodes' as the job-wide report brought them (each as of its latest cycle
// that reached the tree). Node names come from other agents: only the job's are taken.
func energies(e *jobEnd, nodes []string) map[string]*digest.Energy {
	sum := e.measured.summary
	out := map[string]*digest.Energy{e.node: digest.NodeEnergy(sample.EnergyOf(sum.Totals, sum.Methods))}
	w := e.wide.Energy
	if w == nil {
		return out
	}
	by := w.ByNode
	if len(by) == 0 && len(w.Nodes) == 1 {
		by = map[string]*digest.Energy{w.Nodes[0]: w}
	}
	job := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		job[n] = true
	}
	for n, ne := range by {
		if n != e.node && job[n] && ne != nil {
			c := *ne
			if c.How == "" {
				c.How = w.How // every node's the same: said once
			}
			out[n] = &c
		}
	}
	return out
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

// reportFacts are the report's facts of the job on this node (its CPUs as measured)
// before other nodes' are merged: which job, and its life on its batch host (up to when
// the digest began; a late digest: as Slurm recorded it).
func reportFacts(e *jobEnd) digest.Facts {
	j, facts := e.job, e.facts
	f := digest.Facts{JobID: j.JobID, Nodes: []string{e.node}, NNodes: int(j.NNodes), CPUs: e.measured.cpus,
		JobStart: j.Started, JobEnd: e.at, Tolerance: e.tolerance, Late: e.mode == late}
	if j.ArrayJobID != 0 {
		f.ArrayJobID, f.ArrayTaskID = j.ArrayJobID, j.ArrayTaskID
	} else if facts != nil && facts.IsArray {
		f.ArrayJobID, f.ArrayTaskID = facts.ArrayJobID, facts.ArrayTaskID
	}
	if e.mode == late {
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

// ending is what is known of how the job ended (elapsed: its life), for its digest's
// events: Slurm's state, the batch script's exit status, the OOM kills, the memory peak
// against the request, the time limit, and how busy the job was at its end.
func ending(e *jobEnd, elapsed time.Duration) digest.Ending {
	j, facts, m := e.job, e.facts, e.measured
	out := digest.Ending{MemRequested: m.memRequested, Elapsed: elapsed, LastCPUShare: -1}
	if j.NNodes > 1 {
		out.Node = j.Node
	}
	if facts != nil {
		out.State, out.TimeLimit, out.MemDefault = facts.State, facts.TimeLimit, facts.MemDefault
		out.Requeued, out.Held, out.Preempted = requeue(facts, e.atStart, j.Started)
	}
	if s := j.step("batch"); s != nil {
		out.Exit = s.ExitStatus
	}
	out.MemPeak = m.summary.Totals[sample.MemPeakBytes]
	for _, x := range m.samples {
		out.AnonPeak = max(out.AnonPeak, x.Job[sample.MemAnonBytes])
	}
	out.OOMKills = max(int(m.summary.Totals[sample.OOMKills]), e.kills)
	out.LastCPUShare = lastCPUShare(m.samples, m.cpus)
	return out
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
