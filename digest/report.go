package digest

import (
	"strconv"
	"time"

	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// SchemaVersion is the version of the Report JSON (docs/digest.md).
const SchemaVersion = 1

// Report is a job's digest: what `persyst report --json` and `persyst run --json` print,
// and what the text digest is rendered from. docs/digest.md documents every field.
type Report struct {
	Schema int    `json:"schema"`
	JobID  uint32 `json:"job_id,omitempty"`
	// An array task's array job and task ids (JobName: "416_1").
	ArrayJobID  uint32  `json:"array_job_id,omitempty"`
	ArrayTaskID *uint32 `json:"array_task_id,omitempty"`
	Command     string  `json:"command,omitempty"` // persyst run
	// Run is which run of a job Slurm requeued the report covers (0: never requeued).
	Run    int      `json:"run,omitempty"`
	Nodes  []string `json:"nodes"`          // nodes whose data the digest covers
	NNodes int      `json:"nnodes"`         // nodes of the job
	CPUs   int      `json:"cpus"`           // CPUs on the nodes covered
	GPUs   int      `json:"gpus,omitempty"` // GPUs measured on the nodes covered
	// GPUModel names the job's GPUs on its batch host, vendor first ("NVIDIA H100 80GB
	// HBM3", "AMD Instinct MI250X"; "1 × …, 2 × …" for a mix).
	GPUModel string `json:"gpu_model,omitempty"`
	// GPUSlices counts the GPUs that are MIG instances, slices of a GPU (of GPUs).
	GPUSlices int       `json:"gpu_slices,omitempty"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Seconds   float64   `json:"seconds"`
	Samples   int       `json:"samples"`
	// Short is set when the job was shorter than MinSeconds (or had fewer than 4
	// samples): properties that need a longer job are left out.
	Short      bool    `json:"short"`
	MinSeconds float64 `json:"min_seconds"`
	// StartupOnly is set when the job ended within its start-up (its first second), which
	// is never judged: it has no findings because there was nothing to judge.
	StartupOnly bool                `json:"startup_only,omitempty"`
	Findings    []properties.Result `json:"findings"`
	// Omitted counts findings left out of Findings (a summary from Slurm accounting keeps
	// the most important that fit in its size).
	Omitted     int                 `json:"omitted_findings,omitempty"`
	Properties  []properties.Result `json:"properties"`
	NotAssessed []NotAssessed       `json:"not_assessed,omitempty"`
	// Suspended are the stretches Slurm held the job suspended: measured, not judged,
	// and stated with the facts.
	Suspended []sample.Gap `json:"suspended,omitempty"`
	// Methods says how some things were measured on the batch host where that differs by
	// node (sample.Summary.Methods): "system calls" counted with eBPF or perf
	// tracepoints, every call or in samples.
	Methods map[string]string `json:"methods,omitempty"`
	// Energy is what the job used on the nodes measured (nil: no counter measured it).
	Energy *Energy `json:"energy,omitempty"`
	// Coverage says what of the job the digest covers (absent for `persyst run`).
	Coverage *Coverage `json:"coverage,omitempty"`
	// EndState is how the job (its batch script) ended, when that is known; Events are
	// what happened to it, stated before any finding (an OOM kill, a failure, a
	// cancellation, the time limit).
	EndState *EndState `json:"end_state,omitempty"`
	Events   []Event   `json:"events,omitempty"`
	// Notes are what the job's user should know that is no finding (memory close to
	// what Slurm enforces), stated after the findings.
	Notes []Event `json:"notes,omitempty"`
	// Phases are the job's phases on PhasesNode (its batch host), one for a job of one
	// behaviour; Interference is the time it lost to work outside it on
	// InterferenceNode (PhasesNode when empty; of a multi-node job, the node that lost
	// the most); Alike is how alike its nodes behaved, with those unlike the rest
	// (package phases has the rules).
	Phases           []phases.Phase       `json:"phases,omitempty"`
	Interference     *phases.Interference `json:"interference,omitempty"`
	PhasesNode       string               `json:"phases_node,omitempty"`
	InterferenceNode string               `json:"interference_node,omitempty"`
	Alike            *phases.Alikeness    `json:"alike,omitempty"`
	// Episodes are the site-wide I/O episodes (many of the site's jobs stalled on I/O at
	// once, found by the collector tree's frontend) that stalled the job.
	Episodes []episodes.Episode `json:"episodes,omitempty"`
}

// EndState is how a job ended: Slurm's state name (COMPLETED, FAILED, CANCELLED, TIMEOUT,
// OUT_OF_MEMORY, NODE_FAIL, ...) and its batch script's exit code or signal.
type EndState struct {
	State    string `json:"state"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
}

// Event is something that happened to a job, stated before its findings: what (key:
// oom_kill, failed, cancelled, timeout, node_fail), in words, and what to try.
type Event struct {
	Key            string `json:"key"`
	Text           string `json:"text"`
	Recommendation string `json:"recommendation,omitempty"`
}

// JobName is the job as Slurm's commands name it: "1234", or "416_1" for an array task.
func (r Report) JobName() string {
	if r.ArrayTaskID != nil && r.ArrayJobID != 0 {
		return strconv.FormatUint(uint64(r.ArrayJobID), 10) + "_" + strconv.FormatUint(uint64(*r.ArrayTaskID), 10)
	}
	return strconv.FormatUint(uint64(r.JobID), 10)
}

// Coverage is what of the job's life and nodes the digest covers.
type Coverage struct {
	// Elapsed is the job's life from its start to its end (on its batch host), Measured
	// the part of it that was measured; Gaps are the parts that were not, with why.
	Elapsed  float64      `json:"elapsed"`
	Measured float64      `json:"measured"`
	Gaps     []sample.Gap `json:"gaps,omitempty"`
	// Missing are the job's nodes the digest does not cover, with why.
	Missing []MissingNode `json:"missing_nodes,omitempty"`
	// Short are the job's nodes where its part ended within its start-up, which is never
	// judged: nothing there was left out, so they are no gap.
	Short []string `json:"short_nodes,omitempty"`
	// Late is set when the digest was made after the job ended (the node's daemon
	// missed the job's end, and found it ended later).
	Late bool `json:"late,omitempty"`
}

// MissingNode is a node of the job whose data the digest lacks.
type MissingNode struct {
	Node string `json:"node"`
	Why  string `json:"why"`
}

// Complete says whether the digest covers the whole job: all its nodes, all its time.
func (c *Coverage) Complete() bool {
	return c == nil || (len(c.Gaps) == 0 && len(c.Missing) == 0)
}

// NotAssessed groups properties that could not be assessed for the same reason.
type NotAssessed struct {
	Reason     string   `json:"reason"`
	Properties []string `json:"properties"`
}
