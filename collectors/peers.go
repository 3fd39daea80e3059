package collectors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// Peers makes multi-node jobs whole without a collector tree (the embedded default):
// each node daemon keeps its own part of every job it measures (the jobView a collector
// would keep of it, sketches only), serves it to the job's batch host (Node/Part), and
// on the batch host, at the job's end, gathers the other nodes' parts from their daemons,
// within a bounded time, and merges them with its own (MergePartials: the code the sync
// agents use for jobs split over collectors). The calls are authenticated like the
// tree's (treeauth: a node daemon may ask another for a part; nobody else may).
//
// Peers implements the daemon's Uplink: Send (records of a cycle), JobWide, Forget.
type Peers struct {
	cfg  PeersConfig
	tree Tree // nil: none

	mu    sync.Mutex
	views map[uint32]*jobView
	ended map[uint32]time.Time // jobs ended here: their parts are kept for a while
	conns map[string]*grpc.ClientConn
	// alone are the running jobs Slurm runs on this node only (Alone): no other node
	// asks for their part, so none is kept.
	alone map[uint32]bool
	// why says why this node has no part of a job it knew (Explain; nil: not said).
	why func(job uint32) (string, bool)
	// phasesOf returns this node's phases of a job (NodePhases; nil: none).
	phasesOf func(job uint32) []byte
}

// PeersConfig configures Peers.
type PeersConfig struct {
	Node   string
	Engine *properties.Engine
	// Nodes returns the job's nodes (the job map).
	Nodes func(ctx context.Context, job uint32) ([]string, error)
	// Addrs returns the node daemons' gRPC addresses (host:port) by node name.
	Addrs func(ctx context.Context) (map[string]string, error)
	// Dial authenticates the calls to other node daemons (treeauth; nil: plain).
	Dial grpc.DialOption
	// Wait bounds the gathering at a job's end (default 1.5 s).
	Wait time.Duration
	Now  func() time.Time
	Log  zerolog.Logger
}

// Tree is the collector tree as Peers uses it (uplink.Uplink), when there is one:
// records go there too, and a job with an aggregation point is asked there first.
type Tree interface {
	Send(job uint32, t time.Time, seconds float64, recs []properties.Record, maxRecords int, energy sample.Energy)
	JobWide(ctx context.Context, job uint32) (*digest.Report, error)
	Forget(job uint32)
	Aggregation(job uint32) string
	// Pending is how many jobs have a cycle waiting to be sent.
	Pending() int
	// Keep hands a job's final report to the tree's keeper (the frontend).
	Keep(job uint32, r digest.Report)
	// KeepNotice hands what a running job's user was told to the tree's keeper.
	KeepNotice(n digest.Notice)
}

// Episodes are the site-wide I/O episodes that stalled a job, as the collector tree's
// frontend last sent them (none without a tree).
func (p *Peers) Episodes(job uint32) []episodes.Episode {
	if e, ok := p.tree.(episodes.Source); ok {
		return e.Episodes(job)
	}
	return nil
}

// Keep hands a job's final report to the collector tree's keeper, when there is a tree.
func (p *Peers) Keep(job uint32, r digest.Report) {
	if p.tree != nil {
		p.tree.Keep(job, r)
	}
}

// KeepNotice hands what a running job's user was told to the collector tree's keeper,
// when there is a tree.
func (p *Peers) KeepNotice(n digest.Notice) {
	if p.tree != nil {
		p.tree.KeepNotice(n)
	}
}

// Pending returns how many jobs have a cycle of records waiting for the collector tree.
func (p *Peers) Pending() int {
	if p.tree == nil {
		return 0
	}
	return p.tree.Pending()
}

// UseTree makes Peers send through the collector tree too, and ask it first (call it
// before the first Send).
func (p *Peers) UseTree(t Tree) { p.tree = t }

// partKeep is how long a node keeps its part of a job after the job ended here: the
// batch host asks at the end of the batch script, before (or around) the job's end on
// the other nodes.
const partKeep = 2 * time.Minute

// NewPeers returns the embedded gathering of one node daemon.
func NewPeers(cfg PeersConfig) (*Peers, error) {
	if cfg.Engine == nil {
		return nil, errors.New("peers: no property engine")
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 1500 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Peers{cfg: cfg, views: map[uint32]*jobView{}, ended: map[uint32]time.Time{}, conns: map[string]*grpc.ClientConn{},
		alone: map[uint32]bool{}}, nil
}

// Alone says that Slurm runs job on this node only: its records still go to the tree, but
// no part of it is kept for other nodes (its digest is this node's). Forget ends it.
func (p *Peers) Alone(job uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.alone) < MaxJobs {
		p.alone[job] = true
	}
}

// Send adds this node's records of one interval of a job, and its energy so far, to
// its part.
func (p *Peers) Send(job uint32, ts time.Time, seconds float64, recs []properties.Record, maxRecords int, energy sample.Energy) {
	if p.tree != nil {
		p.tree.Send(job, ts, seconds, recs, maxRecords, energy)
	}
	if len(recs) == 0 || seconds <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.alone[job] {
		return
	}
	p.sweepLocked()
	v := p.views[job]
	if v == nil {
		if len(p.views) >= MaxJobs {
			return
		}
		v = newJobView()
		v.sketchOnly = true
		p.views[job] = v
	}
	v.addLocal(p.cfg.Node, ts.Unix(), seconds, recs)
	v.noteEnergy(p.cfg.Node, ts.Unix(), energy)
}

// sweepLocked drops the parts of jobs that ended here more than partKeep ago.
func (p *Peers) sweepLocked() {
	now := p.cfg.Now()
	for job, t := range p.ended {
		if now.Sub(t) > partKeep {
			delete(p.ended, job)
			delete(p.views, job)
		}
	}
}

// Forget marks a job ended on this node; its part is kept for partKeep.
func (p *Peers) Forget(job uint32) {
	if p.tree != nil {
		p.tree.Forget(job)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.alone, job)
	if _, ok := p.views[job]; ok {
		p.ended[job] = p.cfg.Now()
	}
	p.sweepLocked()
}

// Explain sets what says why this node has no part of a job it knew (the node daemon's
// view of its jobs): the words for the batch host's coverage line, and whether the part
// was too short to judge (then it is no gap).
func (p *Peers) Explain(why func(job uint32) (string, bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.why = why
}

// NodePhases sets what returns this node's phases and interference of a job
// (phases.NodePhases as JSON; nil: none), sent with its part.
func (p *Peers) NodePhases(of func(job uint32) []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phasesOf = of
}

// Part returns this node's part of a job (no nodes: none, and why where it is known),
// with its phases.
func (p *Peers) Part(job uint32) *pb.JobPartial {
	p.mu.Lock()
	var part *pb.JobPartial
	if v := p.views[job]; v != nil {
		part = v.partial(job, p.cfg.Node)
	}
	why, phasesOf := p.why, p.phasesOf
	p.mu.Unlock()
	// Outside the lock: both ask the node daemon.
	if part == nil {
		part = &pb.JobPartial{JobId: job, From: p.cfg.Node}
		if why != nil {
			part.Unmeasured, part.Short = why(job)
		}
		return part
	}
	if phasesOf != nil {
		if b := phasesOf(job); b != nil {
			part.NodePhases = [][]byte{b}
		}
	}
	return part
}

// JobWide gathers a multi-node job's parts from the other nodes' daemons and merges
// them with this node's. Nodes that do not answer within the wait are left out, and
// named with why in the report's coverage.
func (p *Peers) JobWide(ctx context.Context, job uint32) (*digest.Report, error) {
	if p.tree != nil && p.tree.Aggregation(job) != "" {
		wide, err := p.tree.JobWide(ctx, job)
		if err == nil {
			p.completeTree(ctx, job, wide)
			return wide, nil
		}
		p.cfg.Log.Info().Err(err).Uint32("job", job).Msg("no job-wide results from the collector tree: asking the job's nodes")
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Wait)
	defer cancel()
	nodes, addrs, err := p.jobNodes(ctx, job)
	if err != nil {
		return nil, err
	}
	own := p.Part(job)
	var parts []*pb.JobPartial
	if len(own.Nodes) > 0 {
		parts = append(parts, own)
	}
	others, missing, short := p.askAll(ctx, job, nodes, addrs)
	parts = append(parts, others...)
	cov := &digest.Coverage{Missing: missing, Short: short}
	if len(parts) == 0 {
		// No node has a part to judge (this one's too ended within its start-up): the
		// report has the coverage only; the batch host's digest is its own.
		return &digest.Report{Schema: digest.SchemaVersion, JobID: job, Nodes: []string{}, Coverage: cov}, nil
	}
	own0 := 0
	if len(own.Nodes) > 0 {
		own0 = 1 // this node's part first, the others by node
	}
	sort.Slice(parts[own0:], func(a, b int) bool { return parts[own0+a].From < parts[own0+b].From })
	rep, err := MergePartials(p.cfg.Engine, job, parts)
	if err != nil {
		return nil, err
	}
	rep.Coverage = cov
	p.cfg.Log.Info().Uint32("job", job).Strs("nodes", rep.Nodes).Int("missing", len(missing)).Msg("job-wide results gathered from the job's nodes")
	return &rep, nil
}

// jobNodes are the job's nodes and the addresses of the nodes' daemons.
func (p *Peers) jobNodes(ctx context.Context, job uint32) ([]string, map[string]string, error) {
	nodes, err := p.cfg.Nodes(ctx, job)
	if err != nil {
		return nil, nil, fmt.Errorf("the job's nodes: %w", err)
	}
	addrs, err := p.cfg.Addrs(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("the nodes' addresses: %w", err)
	}
	return nodes, addrs, nil
}

// askAll asks the daemons of the job's nodes other than this one for their parts, side
// by side: the parts to merge, the nodes that have none and why, and those whose part
// was too short to judge (no gap in the job's coverage).
func (p *Peers) askAll(ctx context.Context, job uint32, nodes []string, addrs map[string]string) (parts []*pb.JobPartial, missing []digest.MissingNode, short []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n == p.cfg.Node {
			continue
		}
		addr, ok := addrs[n]
		if !ok {
			mu.Lock()
			missing = append(missing, digest.MissingNode{Node: n, Why: "no address known for its persyst daemon"})
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			part, err := p.ask(ctx, addr, job)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				p.cfg.Log.Info().Err(err).Str("peer", n).Uint32("job", job).Msg("no part of the job from this node")
				missing = append(missing, digest.MissingNode{Node: n, Why: unanswered(err)})
			case len(part.Nodes) == 0 && part.Short:
				short = append(short, n) // nothing there to judge: no gap
			case len(part.Nodes) == 0 && part.Unmeasured != "":
				missing = append(missing, digest.MissingNode{Node: n, Why: properties.CleanText(part.Unmeasured, 120)})
			case len(part.Nodes) == 0:
				missing = append(missing, digest.MissingNode{Node: n, Why: "its persyst daemon did not see the job"})
			case !slices.Equal(part.Nodes, []string{n}):
				missing = append(missing, digest.MissingNode{Node: n, Why: "its persyst daemon answered for another node"})
			default:
				parts = append(parts, part)
			}
		}()
	}
	wg.Wait()
	sort.Slice(missing, func(a, b int) bool { return missing[a].Node < missing[b].Node })
	sort.Strings(short)
	return parts, missing, short
}

// completeTree completes the tree's job-wide report with what only the job's nodes
// know (explainAbsent, comparePhases), looking the nodes up once, all within the wait.
func (p *Peers) completeTree(ctx context.Context, job uint32, wide *digest.Report) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Wait)
	defer cancel()
	nodes, addrs, err := p.jobNodes(ctx, job)
	if err != nil {
		p.cfg.Log.Info().Err(err).Uint32("job", job).Msg("the tree's coverage is not completed")
		return
	}
	p.explainAbsent(ctx, job, wide, nodes, addrs)
	p.comparePhases(ctx, job, wide, nodes, addrs)
}

// explainAbsent completes the coverage of the tree's job-wide report: the job's nodes it
// neither covers nor names (their data never reached a collector: a part that ended
// before it could be measured, a daemon that is down) are asked why, as the peers' path
// would. A node that has a part the tree lacks is named, not merged.
func (p *Peers) explainAbsent(ctx context.Context, job uint32, wide *digest.Report, nodes []string, addrs map[string]string) {
	if wide.Coverage == nil {
		wide.Coverage = &digest.Coverage{}
	}
	known := map[string]bool{p.cfg.Node: true}
	for _, n := range wide.Nodes {
		known[n] = true
	}
	for _, n := range wide.Coverage.Short {
		known[n] = true
	}
	for _, m := range wide.Coverage.Missing {
		known[m.Node] = true
	}
	var absent []string
	for _, n := range nodes {
		if !known[n] {
			absent = append(absent, n)
		}
	}
	if len(absent) == 0 {
		return
	}
	parts, missing, short := p.askAll(ctx, job, absent, addrs)
	for _, part := range parts {
		missing = append(missing, digest.MissingNode{Node: part.From, Why: "its data did not reach the collector tree"})
	}
	wide.Coverage.Missing = append(wide.Coverage.Missing, missing...)
	wide.Coverage.Short = append(wide.Coverage.Short, short...)
	sort.Slice(wide.Coverage.Missing, func(a, b int) bool { return wide.Coverage.Missing[a].Node < wide.Coverage.Missing[b].Node })
	sort.Strings(wide.Coverage.Short)
}

// MaxComparedByAsking bounds the nodes of a job the collector tree gathers whose phases
// the batch host asks for itself (the tree carries records, not phases): a bigger job's
// nodes are not compared.
const MaxComparedByAsking = 64

// comparePhases completes the tree's job-wide report of a job of at most
// MaxComparedByAsking nodes with its nodes' comparison and the interference of the node
// that lost the most: the batch host asks the job's other nodes for their parts (within
// the wait), as without a tree.
func (p *Peers) comparePhases(ctx context.Context, job uint32, wide *digest.Report, nodes []string, addrs map[string]string) {
	if len(nodes) < 2 || len(nodes) > MaxComparedByAsking {
		return
	}
	parts, _, _ := p.askAll(ctx, job, nodes, addrs)
	if own := p.Part(job); len(own.Nodes) > 0 {
		parts = append(parts, own)
	}
	whenAndWhy(wide, parts)
}

// unanswered says, in a coverage line's words, why a node daemon gave no answer.
func unanswered(err error) string {
	switch st, _ := status.FromError(err); {
	case strings.Contains(err.Error(), "connection refused"):
		return "its persyst daemon is not running"
	case st.Code() == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return "its persyst daemon did not answer in time"
	}
	return "its persyst daemon did not answer"
}

// ask calls one node daemon for its part of a job.
func (p *Peers) ask(ctx context.Context, addr string, job uint32) (*pb.JobPartial, error) {
	p.mu.Lock()
	c, ok := p.conns[addr]
	if !ok {
		dial := p.cfg.Dial
		if dial == nil {
			dial = grpc.WithTransportCredentials(insecure.NewCredentials())
		}
		var err error
		if c, err = grpc.NewClient(addr, dial); err != nil {
			p.mu.Unlock()
			return nil, err
		}
		if len(p.conns) >= maxPeerConns {
			for a, old := range p.conns {
				old.Close()
				delete(p.conns, a)
			}
		}
		p.conns[addr] = c
	}
	p.mu.Unlock()
	return pb.NewNodeClient(c).Part(ctx, &pb.JobSummaryRequest{JobId: job})
}

// maxPeerConns bounds the connections kept to other node daemons.
const maxPeerConns = 1024

// Close closes the connections to other node daemons.
func (p *Peers) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.Close()
		delete(p.conns, a)
	}
}
