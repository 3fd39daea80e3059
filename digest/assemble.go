package digest

import (
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// Input is everything a job's report is made of. The node daemon, the collectors (a
// job-wide report) and `persyst run` fill it from what each knows, and Assemble makes
// the report: one way from a job's measurement to its digest.
type Input struct {
	// Facts say which job, on which nodes, and its life.
	Facts Facts
	// Measured is what the measurement covers: its first and last read, the seconds and
	// intervals between them, and the stretches in between it knows it missed (Gaps).
	Measured sample.Summary
	// Results are the job's property results (this node's, or merged with other
	// nodes'); MinSeconds is the engine's shortest judged job.
	Results    []properties.Result
	MinSeconds float64
	// CO2PerKWh, above 0, is the site's grams of CO2-equivalent per kWh (Energy.CO2Grams).
	CO2PerKWh float64
	// Energy is each node's energy of the job (NodeEnergy), summed into the report's
	// (nil: Measured's, on the first of Facts.Nodes).
	Energy map[string]*Energy
	// Ending is how the job ended (nil: not ended, or not known): its events lead the
	// report.
	Ending *Ending
	// Phases and Interference are when and why, on PhasesNode (the batch host): the
	// job's phases there, with the properties severe in each, and the time it lost to
	// work outside it (nil: not analysed), on InterferenceNode where that is another
	// node. Alike compares a multi-node job's nodes (nil: not compared).
	Phases           []phases.Phase
	Interference     *phases.Interference
	PhasesNode       string
	InterferenceNode string
	Alike            *phases.Alikeness
	// Episodes are the site-wide I/O episodes that stalled the job.
	Episodes []episodes.Episode
}

// Facts are what the digest says about the job besides its measurement and properties:
// which job, and what of its life and nodes the measurement covers.
type Facts struct {
	JobID   uint32
	Command string
	Nodes   []string
	NNodes  int
	CPUs    int
	// ArrayJobID and ArrayTaskID name an array task (ArrayJobID 0: not one).
	ArrayJobID, ArrayTaskID uint32
	// JobStart and JobEnd are the job's life on its batch host (zero: not a Slurm job, no
	// coverage is stated). A stretch of more than Tolerance unmeasured at the job's start
	// or end is a gap.
	JobStart, JobEnd time.Time
	Tolerance        time.Duration
	// Run is which run of a job Slurm requeued this is (1, 2, ...; 0: a job never
	// requeued): its report covers that run only.
	Run int
	// Missing are the job's nodes not covered; Short those whose part ended within its
	// start-up (nothing to judge there: no gap).
	Missing []MissingNode
	Short   []string
	Late    bool
}

// Assemble makes a job's Report.
func Assemble(in Input) Report {
	f, m, minSeconds := in.Facts, in.Measured, in.MinSeconds
	// One cause is reported once: its symptoms are folded under it.
	results := properties.Fold(in.Results)
	r := Report{
		Schema: SchemaVersion, JobID: f.JobID, Command: f.Command, Nodes: f.Nodes, NNodes: f.NNodes, CPUs: f.CPUs,
		Start: m.Started, End: m.Last, Seconds: m.Seconds, Samples: m.Samples,
		MinSeconds: minSeconds, Properties: results, Findings: properties.Findings(results),
	}
	if r.NNodes == 0 {
		r.NNodes = len(r.Nodes)
	}
	if len(r.Nodes) <= 1 {
		// The measurement is this node's: a multi-node job's other nodes' GPUs are not in
		// it, and its idle GPUs are said as a share of them all.
		r.GPUs = int(m.Totals[sample.GPUs])
		r.GPUSlices = int(m.Totals[sample.GPUSlices])
	}
	if f.ArrayJobID != 0 {
		task := f.ArrayTaskID
		r.ArrayJobID, r.ArrayTaskID = f.ArrayJobID, &task
	}
	r.Run = f.Run
	if len(in.Phases) > 0 || in.Interference != nil {
		r.Phases, r.Interference, r.PhasesNode = in.Phases, in.Interference, in.PhasesNode
		if in.InterferenceNode != in.PhasesNode {
			r.InterferenceNode = in.InterferenceNode
		}
		markPhases(r.Findings, in.Phases)
	}
	r.Alike = in.Alike
	r.Episodes = in.Episodes
	r.Coverage = coverage(f, m)
	r.Suspended = m.Suspended
	SliceWords(&r)
	r.Methods = m.Methods
	if model, ok := m.Methods[sample.GPUModelMethod]; ok {
		// Said as what the GPUs are, not as a way of measuring.
		r.GPUModel = model
		r.Methods = maps.Clone(m.Methods)
		delete(r.Methods, sample.GPUModelMethod)
		if len(r.Methods) == 0 {
			r.Methods = nil
		}
	}
	if in.Energy != nil {
		r.Energy = energyOfNodes(in.Energy, in.CO2PerKWh)
	} else {
		r.Energy = energyOf(m, r.Nodes, in.CO2PerKWh)
	}
	if in.Ending != nil {
		r.EndState, r.Events = EndEvents(*in.Ending)
		r.Notes = EndNotes(*in.Ending)
	}
	r.Short = minSeconds > 0 && (m.Seconds < minSeconds || m.Samples < 4)
	if r.Findings == nil {
		r.Findings = []properties.Result{}
	}
	r.StartupOnly, r.NotAssessed = notAssessed(results)
	return r
}

// coverage states what the measurement m covers of the job's life and nodes.
func coverage(f Facts, m sample.Summary) *Coverage {
	if f.JobStart.IsZero() {
		return nil
	}
	tol := max(f.Tolerance, 0)
	end := f.JobEnd
	if end.Before(m.Last) {
		end = m.Last
	}
	c := &Coverage{Elapsed: end.Sub(f.JobStart).Seconds(), Missing: f.Missing, Short: f.Short, Late: f.Late}
	switch {
	case m.Samples == 0 || m.Started.IsZero():
		c.Gaps = append(c.Gaps, sample.Gap{From: f.JobStart, To: end, Why: "nothing was measured"})
	default:
		if m.Started.Sub(f.JobStart) > tol {
			c.Gaps = append(c.Gaps, sample.Gap{From: f.JobStart, To: m.Started, Why: "before measurement began"})
		}
		for _, g := range m.Gaps {
			if g.To.Sub(g.From) > tol {
				c.Gaps = append(c.Gaps, g)
			}
		}
		if end.Sub(m.Last) > tol {
			why := "after the last read"
			if f.Late {
				why = "the persyst daemon was not running"
			}
			c.Gaps = append(c.Gaps, sample.Gap{From: m.Last, To: end, Why: why})
		}
	}
	c.Measured = c.Elapsed
	for _, g := range c.Gaps {
		c.Measured -= g.Seconds()
	}
	c.Measured = max(c.Measured, 0)
	return c
}

// notAssessed groups the reasons of the properties that could have been findings, and
// says whether the job ended within its start-up.
func notAssessed(results []properties.Result) (startupOnly bool, out []NotAssessed) {
	groups := map[string][]string{}
	for _, p := range results {
		if p.NotAssessed == properties.StartupOnly {
			startupOnly = true
			continue
		}
		if p.Assessed || strings.HasPrefix(p.NotAssessed, "not evaluated:") || p.NotAssessed == properties.NothingToAssess {
			continue
		}
		why := p.NotAssessed
		// "instructions: not available: no PMU ..." → group by what is behind the metric.
		if m, rest, ok := strings.Cut(why, ": "); ok && !strings.ContainsAny(m, " ") {
			why = rest
		}
		groups[why] = append(groups[why], p.Key)
	}
	for why, keys := range groups {
		sort.Strings(keys)
		out = append(out, NotAssessed{Reason: why, Properties: keys})
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i].Properties) != len(out[j].Properties) {
			return len(out[i].Properties) > len(out[j].Properties)
		}
		return out[i].Reason < out[j].Reason
	})
	return startupOnly, out
}
