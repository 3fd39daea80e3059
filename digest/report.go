package digest

import (
	"sort"
	"strings"
	"time"

	"github.com/persyst/persyst/properties"
)

// SchemaVersion is the version of the Report JSON (docs/digest.md).
const SchemaVersion = 1

// Report is a job's digest: what `persyst report --json` and `persyst run --json` print,
// and what the text digest is rendered from. docs/digest.md documents every field.
type Report struct {
	Schema  int       `json:"schema"`
	JobID   uint32    `json:"job_id,omitempty"`
	Command string    `json:"command,omitempty"` // persyst run
	Nodes   []string  `json:"nodes"`             // nodes whose data the digest covers
	NNodes  int       `json:"nnodes"`            // nodes of the job
	CPUs    int       `json:"cpus"`              // CPUs on the nodes covered
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Seconds float64   `json:"seconds"`
	Samples int       `json:"samples"`
	// Short is set when the job was shorter than MinSeconds (or had fewer than 4
	// samples): properties that need a longer job are left out.
	Short       bool                `json:"short"`
	MinSeconds  float64             `json:"min_seconds"`
	Findings    []properties.Result `json:"findings"`
	Properties  []properties.Result `json:"properties"`
	NotAssessed []NotAssessed       `json:"not_assessed,omitempty"`
}

// NotAssessed groups properties that could not be assessed for the same reason.
type NotAssessed struct {
	Reason     string   `json:"reason"`
	Properties []string `json:"properties"`
}

// Facts are what the digest says about the job besides the properties: which job, and
// what its measurement covers.
type Facts struct {
	JobID   uint32
	Command string
	Nodes   []string
	NNodes  int
	CPUs    int
	// The time measured: from Start to End, Seconds long, in Samples intervals.
	Start, End time.Time
	Seconds    float64
	Samples    int
}

// Build makes a job's Report from its property results.
func Build(f Facts, results []properties.Result, minSeconds float64) Report {
	r := Report{
		Schema: SchemaVersion, JobID: f.JobID, Command: f.Command, Nodes: f.Nodes, NNodes: f.NNodes, CPUs: f.CPUs,
		Start: f.Start, End: f.End, Seconds: f.Seconds, Samples: f.Samples,
		MinSeconds: minSeconds, Properties: results, Findings: properties.Findings(results),
	}
	if r.NNodes == 0 {
		r.NNodes = len(r.Nodes)
	}
	r.Short = minSeconds > 0 && (f.Seconds < minSeconds || f.Samples < 4)
	if r.Findings == nil {
		r.Findings = []properties.Result{}
	}
	// Group the reasons of properties that could have been findings.
	groups := map[string][]string{}
	for _, p := range results {
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
		r.NotAssessed = append(r.NotAssessed, NotAssessed{Reason: why, Properties: keys})
	}
	sort.Slice(r.NotAssessed, func(i, j int) bool {
		if len(r.NotAssessed[i].Properties) != len(r.NotAssessed[j].Properties) {
			return len(r.NotAssessed[i].Properties) > len(r.NotAssessed[j].Properties)
		}
		return r.NotAssessed[i].Reason < r.NotAssessed[j].Reason
	})
	return r
}
