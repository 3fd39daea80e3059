package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/sample"
)

// ListJobs asks the daemon at socket for its registry.
func ListJobs(ctx context.Context, socket string) (node string, jobs []JobStatus, err error) {
	l, err := List(ctx, socket)
	return l.Node, l.Jobs, err
}

// NodeList is a daemon's answer to a list: its node, the jobs the caller may see and, for
// root and admins, the jobs Slurm ran that the plugin never announced.
type NodeList struct {
	Node        string
	Jobs        []JobStatus
	Unannounced *UnannouncedJobs // nil: not given to this caller
}

// List asks the daemon at socket for its node's jobs.
func List(ctx context.Context, socket string) (NodeList, error) {
	rep, err := wire.Call(ctx, socket, &wire.Request{Kind: wire.List})
	if err != nil {
		return NodeList{}, err
	}
	l := NodeList{Node: rep.Node}
	if err := json.Unmarshal(rep.Jobs, &l.Jobs); err != nil {
		return NodeList{}, fmt.Errorf("reply from %s: jobs: %w", socket, err)
	}
	if len(rep.Unannounced) > 0 {
		l.Unannounced = new(UnannouncedJobs)
		if err := json.Unmarshal(rep.Unannounced, l.Unannounced); err != nil {
			return NodeList{}, fmt.Errorf("reply from %s: unannounced: %w", socket, err)
		}
	}
	return l, nil
}

// JobSamples asks the daemon at socket for a job's samples.
func JobSamples(ctx context.Context, socket string, job uint32) ([]sample.Sample, error) {
	rep, err := wire.Call(ctx, socket, &wire.Request{Kind: wire.Samples, JobID: job})
	if err != nil {
		return nil, err
	}
	var out []sample.Sample
	if err := json.Unmarshal(rep.Samples, &out); err != nil {
		return nil, fmt.Errorf("reply from %s: samples: %w", socket, err)
	}
	return out, nil
}

// JobReport asks the daemon at socket for a job's report.
func JobReport(ctx context.Context, socket string, job uint32) (*digest.Report, error) {
	rep, err := wire.Call(ctx, socket, &wire.Request{Kind: wire.Report, JobID: job})
	if err != nil {
		return nil, err
	}
	var out digest.Report
	if err := json.Unmarshal(rep.Report, &out); err != nil {
		return nil, fmt.Errorf("reply from %s: report: %w", socket, err)
	}
	return &out, nil
}

// FindArrayTask returns the job id of array task arr_task among the jobs the daemon at
// socket shows the caller (the newest, if Slurm reused the name).
func FindArrayTask(ctx context.Context, socket string, arr, task uint32) (uint64, error) {
	_, jobs, err := ListJobs(ctx, socket)
	if err != nil {
		return 0, err
	}
	var found *Job
	for _, js := range jobs {
		j := js.Job
		if j.ArrayJobID == arr && j.ArrayTaskID == task && (found == nil || j.Started.After(found.Started)) {
			found = j
		}
	}
	if found == nil {
		return 0, fmt.Errorf("job %d_%d: not known on this node (give --node, the job's batch host)", arr, task)
	}
	return uint64(found.JobID), nil
}

// WriteJobsTable prints jobs the way squeue users expect: one line per job.
func WriteJobsTable(w io.Writer, node string, jobs []JobStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "JOBID\tNODE\tSTATE\tUSER\tUID\tCORES\tSTEPS\tSAMPLES\tSTARTED\tENDED\n")
	for _, js := range jobs {
		j := js.Job
		samples := "-"
		if js.Measurement != nil {
			samples = strconv.Itoa(js.Measurement.Samples)
		}
		steps := make([]string, 0, len(j.Steps))
		for _, s := range j.Steps {
			mark := ""
			if s.State == Running {
				mark = "*"
			}
			steps = append(steps, s.ID+mark)
		}
		user := j.User
		if user == "" {
			user = "-"
		}
		ended := "-"
		if j.Ended != nil {
			ended = j.Ended.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", j.JobID, node, j.State, user, j.UID,
			orDash(j.Cores), orDash(strings.Join(steps, ",")), samples, j.Started.Local().Format(time.DateTime), ended)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
