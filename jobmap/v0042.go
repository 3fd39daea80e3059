package jobmap

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v0042 "github.com/persyst/persyst/jobmap/v0042"
	"github.com/persyst/persyst/slurmver"
)

// The data parser v0.0.42 (Slurm 24.11 to 26.05: slurmrestd, and `scontrol --json=v0.0.42
// show job`): numbers wrapped in {set, infinite, number}, the job's state a list of a base
// state and flags, the allocation every core of a node with its status, and the output
// paths expanded by Slurm itself (partly before 25.11, wholly from 25.11 on).

// releaseOf reads the Slurm release a v0.0.42 response names (zero: not said).
func releaseOf(m *v0042.V0042OpenapiMeta) slurmver.Release {
	if m == nil || m.Slurm == nil || m.Slurm.Version == nil {
		return slurmver.Release{}
	}
	v := m.Slurm.Version
	major, _ := strconv.Atoi(str(v.Major))
	minor, _ := strconv.Atoi(str(v.Minor))
	return slurmver.Release{Major: major, Minor: minor}
}

// fromV0042 converts one job of the v0.0.42 data parser served by Slurm release rel;
// hostname maps a node name to its host name (for %N before Slurm 25.11).
func fromV0042(p *v0042.V0042JobInfo, rel slurmver.Release, hostname func(string) string) (*Job, error) {
	if p.JobId == nil || *p.JobId <= 0 {
		return nil, errors.New("job without job_id")
	}
	j := &Job{
		JobID:        uint32(*p.JobId),
		Name:         str(p.Name),
		User:         str(p.UserName),
		Partition:    str(p.Partition),
		NodeList:     str(p.Nodes),
		BatchHost:    str(p.BatchHost),
		WorkDir:      str(p.CurrentWorkingDirectory),
		AdminComment: str(p.AdminComment),
		Submit:       noValTime(p.SubmitTime),
		Start:        noValTime(p.StartTime),
		End:          noValTime(p.EndTime),
		Preempted:    noValTime(p.PreemptTime),
	}
	if p.RestartCnt != nil {
		j.Restarts = int(*p.RestartCnt)
	}
	if p.JobState != nil {
		j.State = stateOf(*p.JobState)
		j.setRequeue(*p.JobState...)
	}
	if p.UserId != nil {
		j.UID = uint32(*p.UserId)
	}
	if p.GroupId != nil {
		j.GID = uint32(*p.GroupId)
	}
	pendingTasks := arrayOf(j, p)
	if n, ok := noVal64(p.MemoryPerNode); ok && n > 0 {
		j.MemPerNodeMB = int(n)
	}
	if n, ok := noVal64(p.MemoryPerCpu); ok && n > 0 {
		j.MemPerCPUMB = int(n)
	}
	if p.Flags != nil && (j.MemPerNodeMB > 0 || j.MemPerCPUMB > 0) {
		j.MemDefault = !slices.Contains(*p.Flags, "EXACT_MEMORY_REQUESTED")
	}
	if p.TimeLimit != nil && (p.TimeLimit.Infinite == nil || !*p.TimeLimit.Infinite) {
		if n, ok := noVal32(p.TimeLimit); ok && n > 0 {
			j.TimeLimit = time.Duration(n) * time.Minute
		}
	}
	if j.NodeList != "" && j.NodeList != "(null)" {
		nodes, err := ExpandHostlist(j.NodeList)
		if err != nil {
			return nil, fmt.Errorf("job %d: nodes: %w", j.JobID, err)
		}
		j.Nodes = nodes
	} else {
		j.NodeList = ""
	}
	j.Alloc = allocV0042(p.JobResources, j.Nodes)
	if pendingTasks {
		return j, nil // Stdout/Stderr unknown until the tasks exist
	}
	if err := j.slurmOutput(str(p.StandardOutput), str(p.StandardError), rel, hostname); err != nil {
		return nil, err
	}
	return j, nil
}

// arrayOf sets the job's array ids; it says whether the record stands for array tasks
// not started yet ("1-100"), whose output files are not known.
func arrayOf(j *Job, p *v0042.V0042JobInfo) bool {
	arr, ok := noVal32(p.ArrayJobId)
	if !ok || arr <= 0 {
		return false
	}
	if task, ok := noVal32(p.ArrayTaskId); ok && task >= 0 && uint32(task) < SlurmNoVal {
		j.IsArray, j.ArrayJobID, j.ArrayTaskID = true, uint32(arr), uint32(task)
		return false
	}
	if s := str(p.ArrayTaskString); s != "" {
		j.IsArray, j.ArrayJobID = true, uint32(arr)
		if t, err := strconv.ParseUint(s, 10, 32); err == nil {
			j.ArrayTaskID = uint32(t)
			return false
		}
		return true
	}
	return false
}

// allocV0042 is the allocation on each of the job's nodes, in their order: from 24.11 on
// a node lists every core, and those held by the job say ALLOCATED.
func allocV0042(r *v0042.V0042JobRes, nodes []string) []NodeAlloc {
	if r == nil || r.Nodes == nil || r.Nodes.Allocation == nil {
		return nil
	}
	byNode := map[string]NodeAlloc{}
	for _, a := range *r.Nodes.Allocation {
		n := NodeAlloc{Node: a.Name}
		if a.Memory != nil && a.Memory.Allocated != nil {
			n.MemoryMB = int(*a.Memory.Allocated)
		}
		for _, s := range a.Sockets {
			for _, c := range s.Cores {
				if slices.Contains(c.Status, "ALLOCATED") {
					n.Cores++
				}
			}
		}
		byNode[n.Node] = n
	}
	var out []NodeAlloc
	for _, node := range nodes {
		if a, ok := byNode[node]; ok {
			out = append(out, a)
		}
	}
	return out
}

// slurmOutput sets the job's output files from the paths Slurm gives (stdout, stderr:
// "" when not given apart) as release rel expands them: from 25.11 on wholly (Slurm's
// own expansion, %N the NODE's name); before, only %A %a %b %j %u %x, %% and widths, so
// what the batch step expands besides (%J %N %n %s %t) is finished here. The pattern as
// the user gave it is lost then: a width right before a '%' ("%3%j") is the one case
// that cannot be told apart.
func (j *Job) slurmOutput(stdout, stderr string, rel slurmver.Release, hostname func(string) string) error {
	pj := PatternJob{JobID: j.JobID, ArrayJobID: j.ArrayJobID, ArrayTaskID: j.ArrayTaskID, IsArray: j.IsArray,
		StepID: "batch", User: j.User, Name: j.Name, BatchHost: j.BatchHost}
	if hostname != nil && j.BatchHost != "" && !rel.AtLeast(25, 11) {
		pj.BatchHost = hostname(j.BatchHost)
	}
	finish := func(p string) string {
		if !rel.AtLeast(25, 11) {
			p = finishBatchPattern(p, &pj)
		}
		return ResolvePath(j.WorkDir, p)
	}
	j.StdoutPattern, j.StderrPattern = stdout, stderr
	if stdout == "" {
		j.Stdout = ResolvePath(j.WorkDir, DefaultOutput(pj))
	} else {
		j.Stdout = finish(stdout)
	}
	if stderr == "" || stderr == stdout {
		j.Stderr = j.Stdout
	} else {
		j.Stderr = finish(stderr)
	}
	return nil
}

// stateOf is a job's state as one word, as Slurm's job_state_string() names it: a flag
// that says where the job is in its end or start first (COMPLETING, CONFIGURING,
// REQUEUED, ...), else its base state.
func stateOf(states []string) string {
	for _, f := range []string{"COMPLETING", "STAGE_OUT", "CONFIGURING", "EXPEDITING", "RESIZING", "REQUEUED", "REQUEUE_FED",
		"REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING"} {
		if slices.Contains(states, f) {
			return f
		}
	}
	if len(states) == 0 {
		return ""
	}
	return states[0]
}

// noVal32 and noVal64 read Slurm's {set, infinite, number}: ok when set.
func noVal32(v *v0042.V0042Uint32NoValStruct) (int32, bool) {
	if v == nil || v.Set == nil || !*v.Set || v.Number == nil {
		return 0, false
	}
	return *v.Number, true
}

func noVal64(v *v0042.V0042Uint64NoValStruct) (int64, bool) {
	if v == nil || v.Set == nil || !*v.Set || v.Number == nil {
		return 0, false
	}
	return *v.Number, true
}

// noValTime is a {set, number} epoch time (zero: not set).
func noValTime(v *v0042.V0042Uint64NoValStruct) time.Time {
	n, ok := noVal64(v)
	if !ok || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}

// parseV0042JSON parses a v0.0.42 jobs document (slurmrestd's, or scontrol --json's).
func parseV0042JSON(b []byte, hosts func(string) string) ([]*Job, error) {
	var doc v0042.V0042OpenapiJobInfoResp
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse v0.0.42 jobs JSON: %w", err)
	}
	if err := v0042Errors(doc.Errors); err != nil {
		return nil, err
	}
	return convertV0042(doc.Jobs, releaseOf(doc.Meta), hosts)
}

func convertV0042(src []v0042.V0042JobInfo, rel slurmver.Release, hosts func(string) string) ([]*Job, error) {
	out := make([]*Job, 0, len(src))
	var errs []error
	for i := range src {
		j, err := fromV0042(&src[i], rel, hosts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, j)
	}
	return collected(out, errs)
}

func v0042Errors(errs *v0042.V0042OpenapiErrors) error {
	if errs == nil || len(*errs) == 0 {
		return nil
	}
	var parts []string
	for _, e := range *errs {
		msg := str(e.Error)
		if d := str(e.Description); d != "" {
			msg += ": " + d
		}
		if e.ErrorNumber != nil {
			msg = fmt.Sprintf("%s (errno %d)", msg, *e.ErrorNumber)
		}
		parts = append(parts, msg)
	}
	return fmt.Errorf("slurm errors: %s", strings.Join(parts, "; "))
}
