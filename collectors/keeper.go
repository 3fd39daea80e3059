package collectors

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/internal/ratelog"
	"github.com/persyst/persyst/jobmap"
)

// reportKeeper keeps the jobs' final reports in the site's store, each with the job's
// facts from the job map: it owns the store's job rows, reports and roll-ups.
type reportKeeper struct {
	store *store.Store
	facts func(ctx context.Context, job string) (*jobmap.Job, error)
	// refused logs the reports refused: at most a line in 10 s (a node gone wrong sends
	// one a job).
	refused *ratelog.Log
}

func newReportKeeper(st *store.Store, facts func(ctx context.Context, job string) (*jobmap.Job, error), log zerolog.Logger, now func() time.Time) *reportKeeper {
	return &reportKeeper{store: st, facts: facts, refused: ratelog.New(log, 10*time.Second, now)}
}

// MaxKeptReport bounds a final report sent to the frontend (a report with every property
// of the strategy is some tens of KB).
const MaxKeptReport = 1 << 20

// keep keeps a job's final report, sent by its batch host (its first node for a job
// without a batch script), with the job's user from the job map: the site's view lists
// every job from here. A node may send only the reports of jobs it ran as their first
// node, whatever its message says.
func (k *reportKeeper) keep(ctx context.Context, in *pb.JobSummary) (*pb.Ack, error) {
	if len(in.ReportJson) > MaxKeptReport {
		return &pb.Ack{Error: fmt.Sprintf("report of %d bytes, more than %d", len(in.ReportJson), MaxKeptReport)}, nil
	}
	var r digest.Report
	if err := json.Unmarshal(in.ReportJson, &r); err != nil {
		return &pb.Ack{Error: "report: " + err.Error()}, nil
	}
	if r.JobID == 0 || r.JobID != in.JobId || r.Schema <= 0 || r.Schema > digest.SchemaVersion {
		return &pb.Ack{Error: fmt.Sprintf("report of job %d (schema %d) for job %d", r.JobID, r.Schema, in.JobId)}, nil
	}
	node := ""
	if p := treeauth.PeerOf(ctx); p.OK {
		node = p.Identity.Name
	} else if len(in.Nodes) == 1 {
		node = in.Nodes[0] // TreeAuth=none: the node's word
	}
	facts, err := k.facts(ctx, strconv.FormatUint(uint64(in.JobId), 10))
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("job %d: %v", in.JobId, err))
	}
	first := facts.BatchHost
	if first == "" && len(facts.Nodes) > 0 {
		first = facts.Nodes[0]
	}
	if node == "" || node != first {
		k.refused.Warn().Uint32("job", in.JobId).Str("node", node).Str("batch_host", first).
			Msg("final report refused: not from the job's batch host (at most one line in 10 s)")
		return &pb.Ack{Error: fmt.Sprintf("job %d: reports come from its batch host %s, not %q", in.JobId, first, node)}, nil
	}
	if err := k.store.Keep(ctx, factsOf(facts), r); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.Ack{Ok: true}, nil
}

// factsOf is what the store keeps of a job's facts from the job map: who and what it was
// charged to, what it asked for, and, once it ended, its end and end state. The cluster
// is the store's own (its cycles were written under it).
func factsOf(j *jobmap.Job) store.Job {
	sj := store.Job{ID: j.JobID, JobName: j.Name, User: j.User, Account: j.Account, Partition: j.Partition, QOS: j.QOS,
		Nodes: j.NodeList, NNodes: len(j.Nodes), Start: j.Start, TimeLimit: j.TimeLimit}
	// The memory given per node where the job map has it (a per-CPU request counts only
	// through the nodes' allocations: CPUs and cores are not always the same count).
	for _, a := range j.Alloc {
		sj.ReqMemMB += int64(a.MemoryMB)
	}
	if sj.ReqMemMB == 0 && j.MemPerNodeMB > 0 {
		sj.ReqMemMB = int64(j.MemPerNodeMB) * int64(len(j.Nodes))
	}
	if !j.Running() && !j.End.IsZero() {
		sj.End, sj.State = j.End, j.State
	}
	return sj
}
