package jobmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	v0038 "github.com/persyst/persyst/jobmap/v0038"
	"github.com/persyst/persyst/slurmver"
)

// The data parser v0.0.38 (Slurm 22.05: slurmrestd's openapi/v0.0.38, and the JSON of
// squeue --json and scontrol --json before data_parser plugins): plain numbers with
// NO_VAL, the job's state one word, the allocation the allocated cores of each socket, and
// the output patterns as the user gave them.

// parserV0038 is the v0.0.38 adapter; c is nil where only documents are read.
type parserV0038 struct{ c *v0038.ClientWithResponses }

func newParserV0038(server string, hc *http.Client, edit func(context.Context, *http.Request) error) (parserV0038, error) {
	opts := []v0038.ClientOption{v0038.WithHTTPClient(hc)}
	if edit != nil {
		opts = append(opts, v0038.WithRequestEditorFn(edit))
	}
	c, err := v0038.NewClientWithResponses(server, opts...)
	return parserV0038{c}, err
}

func (parserV0038) version() string { return APIv0038 }

// inCommands: squeue --json and scontrol --json print v0.0.38 until the data parser
// plugins.
func (parserV0038) inCommands(rel slurmver.Release) bool {
	return !rel.Has(slurmver.DataParserPlugins)
}

// parse reads the jobs document of squeue --json or scontrol --json.
func (parserV0038) parse(b []byte, hosts func(string) string) ([]*Job, error) {
	var doc v0038.V0038JobsResponse
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse jobs JSON: %w", err)
	}
	d := jobsV0038{&doc}
	if err := d.slurmErrors(); err != nil {
		return nil, err
	}
	if doc.Jobs == nil {
		return nil, errors.New("parse jobs JSON: no \"jobs\" list")
	}
	return d.jobs(hosts)
}

func (p parserV0038) getJobs(ctx context.Context, id string) (answer, error) {
	doc := func(d *v0038.V0038JobsResponse) jobsDoc { return jobsV0038{d} }
	if id == "" {
		rep, err := p.c.SlurmV0038GetJobsWithResponse(ctx, nil)
		if err != nil {
			return answer{}, err
		}
		return answerOf(rep.HTTPResponse, rep.Body, rep.JSON200, doc)
	}
	rep, err := p.c.SlurmV0038GetJobWithResponse(ctx, id)
	if err != nil {
		return answer{}, err
	}
	return answerOf(rep.HTTPResponse, rep.Body, rep.JSON200, doc)
}

func (p parserV0038) getNodes(ctx context.Context) ([]node, error) {
	rep, err := p.c.SlurmV0038GetNodesWithResponse(ctx, nil)
	if err != nil {
		return nil, err
	}
	if rep.JSON200 == nil || rep.JSON200.Nodes == nil {
		return nil, fmt.Errorf("slurmrestd: nodes: status %d", rep.StatusCode())
	}
	var out []node
	for _, n := range *rep.JSON200.Nodes {
		out = append(out, node{str(n.Name), str(n.Hostname), str(n.Address)})
	}
	return out, nil
}

// jobsV0038 is a v0.0.38 jobs document.
type jobsV0038 struct{ *v0038.V0038JobsResponse }

func (d jobsV0038) slurmErrors() error {
	if d.Errors == nil {
		return nil
	}
	var msgs []string
	for _, e := range *d.Errors {
		msgs = append(msgs, withErrno(str(e.Error), e.ErrorNumber))
	}
	return listedErrors(msgs)
}

func (d jobsV0038) jobs(hosts func(string) string) ([]*Job, error) {
	if d.Jobs == nil {
		return nil, nil
	}
	return convert(*d.Jobs, func(p *v0038.V0038JobResponseProperties) (*Job, error) { return fromV0038(p, hosts) })
}

// fromV0038 converts one job of the v0.0.38 data parser (slurmrestd, squeue --json).
// hostname maps a node name to its host name, for %N in output file names.
func fromV0038(p *v0038.V0038JobResponseProperties, hostname func(string) string) (*Job, error) {
	if p.JobId == nil || *p.JobId <= 0 {
		return nil, fmt.Errorf("job without job_id")
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
		State:        str(p.JobState),
		NodeList:     str(p.Nodes),
		BatchHost:    str(p.BatchHost),
		WorkDir:      str(p.CurrentWorkingDirectory),
		AdminComment: str(p.AdminComment),
		Submit:       unix(p.SubmitTime),
		Start:        unix(p.StartTime),
		End:          unix(p.EndTime),
		Preempted:    unix(p.PreemptTime),
		Restarts:     num(p.RestartCnt),
	}
	j.setRequeue(j.State)
	// A job array's tasks carry array_job_id ≠ 0 and an array_task_id; for other jobs
	// array_task_id is null (slurmrestd) or NO_VAL.
	task := int64(-1)
	if p.ArrayTaskId != nil {
		task = int64(*p.ArrayTaskId)
	}
	pendingTasks := j.setArray(int64(num(p.ArrayJobId)), task, str(p.ArrayTaskString))
	j.setMemory(int64(num(p.MemoryPerNode)), int64(num(p.MemoryPerCpu)), p.Flags, "JOB_MEM_SET")
	j.setTimeLimit(num(p.TimeLimit))
	if err := j.setNodes("nodes", allocV0038(p.JobResources)); err != nil {
		return nil, err
	}
	j.StdoutPattern, j.StderrPattern = str(p.StandardOutput), str(p.StandardError)
	if pendingTasks {
		return j, nil // Stdout/Stderr unknown until the tasks exist
	}
	if err := j.resolveOutput(hostname); err != nil {
		return nil, err
	}
	return j, nil
}

// allocV0038 is the allocation on each node the job's resources list, by node name.
func allocV0038(r *v0038.V0038JobResources) map[string]NodeAlloc {
	if r == nil || r.AllocatedNodes == nil {
		return nil
	}
	byNode := map[string]NodeAlloc{}
	for _, a := range *r.AllocatedNodes {
		n := NodeAlloc{Node: str(a.Nodename), MemoryMB: num(a.MemoryAllocated)}
		if a.Sockets != nil {
			n.Cores = countAllocated(*a.Sockets)
		}
		byNode[n.Node] = n
	}
	return byNode
}
