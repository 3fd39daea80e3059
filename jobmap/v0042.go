package jobmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	v0042 "github.com/persyst/persyst/jobmap/v0042"
	"github.com/persyst/persyst/slurmver"
)

// The data parser v0.0.42 (Slurm 24.11 to 26.05: slurmrestd, and `scontrol --json=v0.0.42
// show job`): numbers wrapped in {set, infinite, number}, the job's state a list of a base
// state and flags, the allocation every core of a node with its status, and the output
// paths expanded by Slurm itself (slurmver.OutputPartlyExpanded, OutputExpanded).

// parserV0042 is the v0.0.42 adapter; c is nil where only documents are read.
type parserV0042 struct{ c *v0042.ClientWithResponses }

func newParserV0042(server string, hc *http.Client, edit func(context.Context, *http.Request) error) (parserV0042, error) {
	opts := []v0042.ClientOption{v0042.WithHTTPClient(hc)}
	if edit != nil {
		opts = append(opts, v0042.WithRequestEditorFn(edit))
	}
	c, err := v0042.NewClientWithResponses(server, opts...)
	return parserV0042{c}, err
}

func (parserV0042) version() string { return APIv0042 }

func (parserV0042) inCommands(rel slurmver.Release) bool { return rel.Has(slurmver.DataParserV0042) }

// parse reads a v0.0.42 jobs document (scontrol --json=v0.0.42's, or slurmrestd's).
func (parserV0042) parse(b []byte, hosts func(string) string) ([]*Job, error) {
	var doc v0042.V0042OpenapiJobInfoResp
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse v0.0.42 jobs JSON: %w", err)
	}
	return readDoc(jobsV0042{&doc}, hosts)
}

func (p parserV0042) getJobs(ctx context.Context, id string) (answer, error) {
	doc := func(d *v0042.V0042OpenapiJobInfoResp) jobsDoc { return jobsV0042{d} }
	if id == "" {
		rep, err := p.c.SlurmV0042GetJobsWithResponse(ctx, nil)
		if err != nil {
			return answer{}, err
		}
		return answerOf(rep.HTTPResponse, rep.Body, rep.JSON200, doc)
	}
	rep, err := p.c.SlurmV0042GetJobWithResponse(ctx, id, nil)
	if err != nil {
		return answer{}, err
	}
	return answerOf(rep.HTTPResponse, rep.Body, rep.JSON200, doc)
}

func (p parserV0042) getNodes(ctx context.Context) ([]node, error) {
	rep, err := p.c.SlurmV0042GetNodesWithResponse(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := decode200(rep.HTTPResponse, rep.Body, &rep.JSON200); err != nil || rep.JSON200 == nil {
		return nil, fmt.Errorf("slurmrestd: nodes: status %d %v", rep.StatusCode(), err)
	}
	var out []node
	for _, n := range rep.JSON200.Nodes {
		out = append(out, node{str(n.Name), str(n.Hostname), str(n.Address)})
	}
	return out, nil
}

// jobsV0042 is a v0.0.42 jobs document.
type jobsV0042 struct{ *v0042.V0042OpenapiJobInfoResp }

func (d jobsV0042) slurmErrors() error {
	if d.Errors == nil {
		return nil
	}
	var msgs []string
	for _, e := range *d.Errors {
		msg := str(e.Error)
		if desc := str(e.Description); desc != "" {
			msg += ": " + desc
		}
		msgs = append(msgs, withErrno(msg, e.ErrorNumber))
	}
	return listedErrors(msgs)
}

// jobs are the document's jobs, as the Slurm release its meta names gives them.
func (d jobsV0042) jobs(hosts func(string) string) ([]*Job, error) {
	rel := releaseOf(d.Meta)
	return convert(d.Jobs, func(p *v0042.V0042JobInfo) (*Job, error) { return fromV0042(p, rel, hosts) })
}

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
// hostname maps a node name to its host name (for %N where Slurm leaves it).
func fromV0042(p *v0042.V0042JobInfo, rel slurmver.Release, hostname func(string) string) (*Job, error) {
	if p.JobId == nil || *p.JobId <= 0 {
		return nil, errors.New("job without job_id")
	}
	j := &Job{
		JobID:        uint32(*p.JobId),
		Name:         str(p.Name),
		User:         str(p.UserName),
		UID:          uint32(num(p.UserId)),
		GID:          uint32(num(p.GroupId)),
		Partition:    str(p.Partition),
		Account:      str(p.Account),
		QOS:          str(p.Qos),
		Cluster:      str(p.Cluster),
		NodeList:     str(p.Nodes),
		BatchHost:    str(p.BatchHost),
		WorkDir:      str(p.CurrentWorkingDirectory),
		AdminComment: str(p.AdminComment),
		Submit:       noValTime(p.SubmitTime),
		Start:        noValTime(p.StartTime),
		End:          noValTime(p.EndTime),
		Preempted:    noValTime(p.PreemptTime),
		Restarts:     int(num(p.RestartCnt)),
	}
	if p.JobState != nil {
		j.State = stateOf(*p.JobState)
		j.setRequeue(*p.JobState...)
	}
	arr, _ := noVal32(p.ArrayJobId)
	task, ok := noVal32(p.ArrayTaskId)
	if !ok {
		task = -1
	}
	pendingTasks := j.setArray(int64(arr), int64(task), str(p.ArrayTaskString))
	perNode, _ := noVal64(p.MemoryPerNode)
	perCPU, _ := noVal64(p.MemoryPerCpu)
	j.setMemory(perNode, perCPU, p.Flags, "EXACT_MEMORY_REQUESTED")
	if p.TimeLimit != nil && (p.TimeLimit.Infinite == nil || !*p.TimeLimit.Infinite) {
		n, _ := noVal32(p.TimeLimit)
		j.setTimeLimit(int64(n))
	}
	if err := j.setNodes("nodes", allocV0042(p.JobResources)); err != nil {
		return nil, err
	}
	if pendingTasks {
		return j, nil // Stdout/Stderr unknown until the tasks exist
	}
	if err := j.slurmOutput(str(p.StandardOutput), str(p.StandardError), rel, hostname); err != nil {
		return nil, err
	}
	return j, nil
}

// allocV0042 is the allocation on each node of the job's resources, by node name: from
// 24.11 on a node lists every core, and those held by the job say ALLOCATED.
func allocV0042(r *v0042.V0042JobRes) map[string]NodeAlloc {
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
	return byNode
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
