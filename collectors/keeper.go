package collectors

import (
	"context"
	"encoding/json"
	"errors"
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
	now   func() time.Time
	facts func(ctx context.Context, job string) (*jobmap.Job, error)
	// refused logs the reports refused: at most a line in 10 s (a node gone wrong sends
	// one a job).
	refused *ratelog.Log
	// unkept logs what the store failed to keep (a database down: every report until
	// it is back): at most a line a minute; failed counts each (nil: not counted).
	unkept *ratelog.Log
	failed func()
}

func newReportKeeper(st *store.Store, facts func(ctx context.Context, job string) (*jobmap.Job, error), log zerolog.Logger, now func() time.Time) *reportKeeper {
	return &reportKeeper{store: st, now: now, facts: facts, refused: ratelog.New(log, 10*time.Second, now), unkept: ratelog.New(log, time.Minute, now)}
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
	claimed := ""
	if len(in.Nodes) == 1 {
		claimed = in.Nodes[0]
	}
	facts, refused, err := k.fromFirstNode(ctx, in.JobId, claimed, "final report")
	if refused != nil || err != nil {
		return refused, err
	}
	if err := k.store.Keep(ctx, factsOf(facts), r); err != nil {
		return nil, k.notKept(in.JobId, "final report", err)
	}
	return &pb.Ack{Ok: true}, nil
}

// notKept says what the store failed to keep, and answers the node with an error it
// sends again on (the uplink tries a report again for 15 minutes).
func (k *reportKeeper) notKept(job uint32, what string, err error) error {
	if k.failed != nil {
		k.failed()
	}
	k.unkept.Warn().Err(err).Uint32("job", job).Msg(what + " not kept: the site's store failed; its batch host sends it again (at most one line a minute)")
	return status.Error(codes.Internal, err.Error())
}

// fromFirstNode returns the job's facts when the caller is the job's batch host (its
// first node for a job without a batch script), or the answer refusing it (what: what
// it sent). The caller is who the tree authenticated, else (TreeAuth=none) the node its
// message names (claimed).
func (k *reportKeeper) fromFirstNode(ctx context.Context, job uint32, claimed, what string) (*jobmap.Job, *pb.Ack, error) {
	node := claimed
	if p := treeauth.PeerOf(ctx); p.OK {
		node = p.Identity.Name
	}
	facts, err := k.facts(ctx, strconv.FormatUint(uint64(job), 10))
	if err != nil {
		return nil, nil, status.Error(codes.Unavailable, fmt.Sprintf("job %d: %v", job, err))
	}
	first := facts.BatchHost
	if first == "" && len(facts.Nodes) > 0 {
		first = facts.Nodes[0]
	}
	if node == "" || node != first {
		k.refused.Warn().Uint32("job", job).Str("node", node).Str("batch_host", first).
			Msg(what + " refused: not from the job's batch host (at most one line in 10 s)")
		return nil, &pb.Ack{Error: fmt.Sprintf("job %d: %ss come from its batch host %s, not %q", job, what, first, node)}, nil
	}
	return facts, nil, nil
}

// maxNoticeAhead is how far a notice's times may lie after the keeper's clock (the
// nodes' clocks are not the frontend's).
const maxNoticeAhead = 10 * time.Minute

// notice keeps what a running job's batch host told its user, and whether it still
// holds. Only the job's batch host may send it.
func (k *reportKeeper) notice(ctx context.Context, in *pb.JobNotice) (*pb.Ack, error) {
	n, err := noticeOf(in, k.now().Add(maxNoticeAhead))
	if err != nil {
		return &pb.Ack{Error: fmt.Sprintf("notice of job %d: %v", in.JobId, err)}, nil
	}
	facts, refused, err := k.fromFirstNode(ctx, in.JobId, in.Node, "notice")
	if refused != nil || err != nil {
		return refused, err
	}
	if p := treeauth.PeerOf(ctx); p.OK {
		n.Node = p.Identity.Name
	}
	if err := k.store.Admin().KeepNotice(ctx, factsOf(facts), n); err != nil {
		return nil, k.notKept(in.JobId, "notice", err)
	}
	return &pb.Ack{Ok: true}, nil
}

// noticeOf reads a notice from its message: a reason persyst knows, and times in order,
// none after latest.
func noticeOf(in *pb.JobNotice, latest time.Time) (digest.Notice, error) {
	n := digest.Notice{JobID: in.JobId, Node: in.Node, Reason: in.Reason, Since: unixTime(in.Since), Told: unixTime(in.Told), Seen: unixTime(in.Seen), Until: unixTime(in.Until)}
	switch {
	case in.JobId == 0:
		return n, errors.New("job id 0")
	case digest.NoticeSubject(in.Reason) == "":
		return n, fmt.Errorf("reason %q: want %s or %s", clip(in.Reason), digest.NoticeGPUIdle, digest.NoticeCPUIdle)
	case in.Since <= 0 || in.Told < in.Since || in.Seen < in.Since || (in.Until != 0 && in.Until < in.Since):
		return n, fmt.Errorf("times out of order: since %d, told %d, seen %d, until %d", in.Since, in.Told, in.Seen, in.Until)
	case n.Told.After(latest) || n.Seen.After(latest) || n.Until.After(latest):
		return n, fmt.Errorf("times after %s: told %d, seen %d, until %d", latest.UTC().Format(time.RFC3339), in.Told, in.Seen, in.Until)
	}
	return n, nil
}

// unixTime is a Unix time of a message (0: none, the zero time).
func unixTime(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0).UTC()
}

// clip bounds a text from the network in an answer.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
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
