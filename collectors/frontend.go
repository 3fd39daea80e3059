package collectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
)

// FrontendConfig configures the frontend.
type FrontendConfig struct {
	// Metrics records the balancing cycles for Prometheus (nil: not recorded).
	Metrics *exporter.Frontend
	// Collectors maps collector names to their gRPC addresses.
	Collectors map[string]string
	// Syncs maps the sync agents of Tree to their gRPC addresses: the aggregation
	// points of jobs split over several collectors below them.
	Syncs map[string]string
	// NodeAddr gives a node daemon's gRPC address (where routes are pushed).
	NodeAddr func(node string) string
	// Nodes are the cluster's compute nodes, in topology order.
	Nodes []string
	// Tree, if set, is the agent tree (from topology.conf or persyst's tree description:
	// collectors named as in Collectors, sync agents as in Syncs); else a flat tree cuts
	// Nodes evenly over the collectors, below the frontend.
	Tree *balance.Tree
	// Jobs returns the running jobs (from the job map).
	Jobs    func(ctx context.Context) ([]balance.Job, error)
	Balance balance.Config
	// AssumeMaxLoads balances every job on the load the PerSyst thesis assumes (§5.3) (every node
	// sends every property of the strategy on every device). By default a job is charged
	// its measured load once a collector has reported it: the largest share of the
	// maximum one of its nodes sent in one cycle so far (CycleRecords.max_records), so
	// jobs whose nodes send fewer records fit more of them on one collector.
	AssumeMaxLoads bool
	Timeout        time.Duration // deadline of one ping or route push (default 2 s)
	// Auth authenticates the frontend's connections (nil: plain). With it the frontend
	// calls only its configured agents and nodes.
	Auth *treeauth.Tree
	// Self is the frontend's own address: the aggregation point of jobs split over
	// collectors with no sync agent in common below it (and of a dead sync agent's),
	// which it merges from the collectors' parts when their batch host asks (Summary).
	// "": such jobs' digests cover their batch host.
	Self   string
	Engine *properties.Engine
	// Store keeps the merged per-cycle results of the jobs aggregated at the frontend
	// (nil: only their job-end reports are merged).
	Store *store.Store
	// Facts gives a job's facts (its user, nodes, batch host) from the job map: with
	// Self and Store set, the frontend keeps every job's final report (KeepReport),
	// sent by its batch host, for the site's view (persyst web).
	Facts func(ctx context.Context, job string) (*jobmap.Job, error)
	// Period is the nodes' measurement cycle (default a minute): the cycles site-wide I/O
	// episodes are found in.
	Period time.Duration
	Log    zerolog.Logger
	Now    func() time.Time
}

// Frontend runs PerSyst's job balancing every cycle (the PerSyst thesis, §5.3): it pings the
// collectors, builds the agent tree over the ones that answer (a flat tree: the nodes cut
// evenly over them), balances the running jobs, and pushes each node its routes. A
// collector that stops answering is left out of the next cycle's tree, so its nodes are
// rerouted within one cycle.
type Frontend struct {
	pb.UnimplementedCollectorServer
	cfg  FrontendConfig
	d    *dialer
	tree []string // the addresses of the tree's agents, sorted (Heartbeat.tree)
	agg  *Sync    // merges the cycles of the jobs aggregated here
	jobs *jobBook // each running job's holders so far and its measured load

	// stalls gathers the nodes' I/O stalls (their answers to the routes) into site-wide
	// episodes.
	stalls *siteStalls
}

// NewFrontend checks the configuration.
func NewFrontend(cfg FrontendConfig) (*Frontend, error) {
	if cfg.Tree != nil && len(cfg.Nodes) == 0 {
		cfg.Nodes = cfg.Tree.Nodes()
	}
	if len(cfg.Collectors) == 0 || len(cfg.Nodes) == 0 || cfg.Jobs == nil || cfg.NodeAddr == nil {
		return nil, errors.New("frontend: needs collectors, nodes, node addresses and a job source")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tree != nil {
		for _, c := range cfg.Tree.Collectors() {
			if _, ok := cfg.Collectors[c]; !ok {
				return nil, fmt.Errorf("frontend: collector %s of the tree has no address", c)
			}
		}
		inTree := map[string]bool{}
		for _, s := range cfg.Tree.Agents(balance.KindSync) {
			inTree[s] = true
			if _, ok := cfg.Syncs[s]; !ok {
				// A switch of Slurm's topology without a sync agent running: the jobs
				// that meet there are merged at the frontend.
				cfg.Log.Info().Str("sync", s).Msg("no sync agent for this switch of the tree: its jobs are merged at the frontend")
			}
		}
		for s := range cfg.Syncs {
			if !inTree[s] {
				return nil, fmt.Errorf("frontend: sync agent %s is not in the tree", s)
			}
		}
		cfg.Nodes = cfg.Tree.Nodes()
	} else if len(cfg.Syncs) > 0 {
		return nil, errors.New("frontend: sync agents need a tree (--tree or --topology) that places them")
	}
	if cfg.Period <= 0 {
		cfg.Period = time.Minute
	}
	f := &Frontend{cfg: cfg, jobs: newJobBook(), stalls: newSiteStalls(cfg.Period, cfg.Store, cfg.Log)}
	f.tree = f.agents()
	nodes := make([]string, 0, len(cfg.Nodes))
	for _, n := range cfg.Nodes {
		nodes = append(nodes, cfg.NodeAddr(n))
	}
	f.d = newDialer(cfg.Auth, append(slices.Clone(f.tree), nodes...)...)
	if cfg.Engine != nil {
		var err error
		if f.agg, err = NewSync(SyncConfig{Name: "frontend", Store: cfg.Store, Auth: cfg.Auth, Fixed: f.tree, Engine: cfg.Engine, Log: cfg.Log, Now: cfg.Now}); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// agents returns the addresses of the tree's agents: collectors, sync agents and the
// frontend itself.
func (f *Frontend) agents() []string {
	var out []string
	for _, a := range f.cfg.Collectors {
		out = append(out, a)
	}
	for _, a := range f.cfg.Syncs {
		out = append(out, a)
	}
	if f.cfg.Self != "" {
		out = append(out, f.cfg.Self)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Close closes the frontend's connections.
func (f *Frontend) Close() {
	f.d.close()
	if f.agg != nil {
		f.agg.Close()
	}
}

// Alive pings every collector and returns the names of those that answered, sorted.
func (f *Frontend) Alive(ctx context.Context) []string {
	return f.ping(ctx, f.cfg.Collectors, "collector", "left out of this cycle's routes")
}

// AliveSyncs pings every sync agent and returns the names of those that answered.
func (f *Frontend) AliveSyncs(ctx context.Context) []string {
	return f.ping(ctx, f.cfg.Syncs, "sync", "its jobs are merged above it this cycle")
}

func (f *Frontend) ping(ctx context.Context, agents map[string]string, role, consequence string) []string {
	names := make([]string, 0, len(agents))
	for n := range agents {
		names = append(names, n)
	}
	sort.Strings(names)
	alive := make([]bool, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := f.d.collector(agents[n])
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
			defer cancel()
			hb, err := cl.Ping(pctx, &pb.Heartbeat{Name: "frontend", Role: "frontend", Ts: f.cfg.Now().Unix(), Tree: f.tree})
			alive[i] = err == nil
			if err == nil {
				f.jobs.noteLoads(hb.Jobs)
			}
		}()
	}
	wg.Wait()
	var out []string
	for i, n := range names {
		if alive[i] {
			out = append(out, n)
		} else {
			f.cfg.Log.Warn().Str(role, n).Msg(role + " does not answer: " + consequence)
		}
	}
	return out
}

// Share is a job's measured load: the largest share of its maximum that one of its nodes
// sent in one cycle, as the collectors reported it; false before any report.
func (f *Frontend) Share(job uint32) (float64, bool) { return f.jobs.share(job) }

// balanceInput charges each job its load: the assumed maximum (the PerSyst thesis, §5.3), or, when
// a collector has reported the job, its measured share of it, in thousandths of a node's
// worth (balance.ShareUnits).
func (f *Frontend) balanceInput(jobs []balance.Job) ([]balance.Job, balance.Config) {
	cfg := f.cfg.Balance
	if f.cfg.AssumeMaxLoads {
		return jobs, cfg
	}
	la := max(cfg.LoadPerNode, 1)
	cfg.LoadPerNode, cfg.LMax = la*balance.ShareUnits, cfg.LMax*balance.ShareUnits
	out := make([]balance.Job, len(jobs))
	for i, j := range jobs {
		jla := la
		if j.LoadPerNode > 0 {
			jla = j.LoadPerNode
		}
		j.LoadPerNode = jla * balance.ShareUnits
		if id, err := strconv.ParseUint(j.ID, 10, 32); err == nil {
			if share, ok := f.Share(uint32(id)); ok {
				j.LoadPerNode = balance.ShareLoad(share, j.LoadPerNode)
			}
		}
		out[i] = j
	}
	return out, cfg
}

// CycleResult is one balancing cycle's outcome.
type CycleResult struct {
	Alive  []string              // collectors that answered
	Syncs  []string              // sync agents that answered
	Result *balance.Result       // balancing over them (tree collectors c1.. map to Alive in order)
	Routes map[string]*pb.Routes // per node, what was pushed
	Errors map[string]error      // per node whose push failed
	ByJob  map[uint32]*pb.Route  // per job, where each node sends
}

// Cycle runs one balancing cycle and pushes the routes.
func (f *Frontend) Cycle(ctx context.Context) (*CycleResult, error) {
	alive := f.Alive(ctx)
	if len(alive) == 0 {
		return nil, errors.New("frontend: no collector answers: nodes keep their jobs' data")
	}
	liveSyncs := f.AliveSyncs(ctx)
	live, err := f.liveTree(alive, liveSyncs)
	if err != nil {
		return nil, err
	}
	jobs, err := f.cfg.Jobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("frontend: job map: %w", err)
	}
	in, bcfg := f.balanceInput(onNodes(jobs, f.cfg.Nodes))
	res, err := balance.Balance(live.tree, in, bcfg)
	if err != nil {
		return nil, fmt.Errorf("frontend: %w", err)
	}
	out := &CycleResult{Alive: alive, Syncs: liveSyncs, Result: res, Routes: map[string]*pb.Routes{}, Errors: map[string]error{}, ByJob: map[uint32]*pb.Route{}}
	ts := f.cfg.Now().Unix()
	f.jobs.forgetEnded(f.routeJobs(out, live, ts))
	f.pushAll(ctx, out, f.stalls.episodes(ctx, jobs), ts)
	return out, nil
}

// cycleTree is one cycle's agent tree over the agents that answered, with where its
// agents are.
type cycleTree struct {
	tree   *balance.Tree
	addrOf map[string]string // the tree's collectors → their addresses
	syncUp map[string]bool   // the sync agents that answered
	syncs  map[string]string // sync agents → their addresses
	self   string            // the frontend's own address
}

// liveTree builds this cycle's tree over the live collectors: the topology without the
// collectors that did not answer, or a flat tree cutting the nodes evenly over them.
func (f *Frontend) liveTree(alive, liveSyncs []string) (*cycleTree, error) {
	t := &cycleTree{addrOf: map[string]string{}, syncUp: map[string]bool{}, syncs: f.cfg.Syncs, self: f.cfg.Self}
	var err error
	if f.cfg.Tree != nil {
		// The topology without the collectors that did not answer: their nodes go to the
		// nearest live collector in the tree.
		dead := map[string]bool{}
		for _, c := range f.cfg.Tree.Collectors() {
			dead[c] = true
		}
		for _, a := range alive {
			delete(dead, a)
		}
		if t.tree, err = balance.Without(f.cfg.Tree, dead); err != nil {
			return nil, fmt.Errorf("frontend: %w", err)
		}
		for _, name := range t.tree.Collectors() {
			t.addrOf[name] = f.cfg.Collectors[name]
		}
	} else {
		per := (len(f.cfg.Nodes) + len(alive) - 1) / len(alive)
		if t.tree, err = balance.FlatTree(f.cfg.Nodes, per, 0); err != nil {
			return nil, fmt.Errorf("frontend: %w", err)
		}
		// FlatTree names its collectors c1, c2, ...: map them onto the live ones.
		for i, name := range t.tree.Collectors() {
			t.addrOf[name] = f.cfg.Collectors[alive[i]]
		}
	}
	for _, s := range liveSyncs {
		t.syncUp[s] = true
	}
	return t, nil
}

// onNodes returns the running jobs to balance, each on those of its nodes that are among
// the cluster's (known); a job on none of them is left out.
func onNodes(jobs []balance.Job, known []string) []balance.Job {
	isKnown := map[string]bool{}
	for _, n := range known {
		isKnown[n] = true
	}
	var in []balance.Job
	for _, j := range jobs {
		var nodes []string
		for _, n := range j.Nodes {
			if isKnown[n] {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) > 0 {
			in = append(in, balance.Job{ID: j.ID, Nodes: nodes, LoadPerNode: j.LoadPerNode})
		}
	}
	return in
}

// routeJobs turns the balancing's routes into each job's route (where each of its nodes
// sends, its aggregation point, its holders so far) and each node's routes of cycle ts,
// in out; it returns the jobs with a node sending to a collector (those the job book
// keeps).
func (f *Frontend) routeJobs(out *CycleResult, live *cycleTree, ts int64) map[uint32]bool {
	running := map[uint32]bool{}
	for _, r := range out.Result.Routes {
		id, err := strconv.ParseUint(r.JobID, 10, 32)
		if err != nil {
			continue
		}
		route := &pb.Route{JobId: uint32(id), NodeCollector: map[string]string{}}
		for _, s := range r.Sends {
			if a, ok := live.addrOf[s.To]; ok {
				route.NodeCollector[s.Node] = a
			} // else local: the node keeps the job (a one-node job)
		}
		if len(route.NodeCollector) > 0 {
			route.AggregationPoint = live.aggregationPoint(r)
			running[route.JobId] = true
			// Over its life a job's records may reach several collectors (routes follow
			// the loads); its aggregation point merges them all at its end.
			route.Holders = f.jobs.addHolders(route.JobId, route.NodeCollector)
		}
		out.ByJob[route.JobId] = route
		for node := range route.NodeCollector {
			rs := out.Routes[node]
			if rs == nil {
				rs = &pb.Routes{CycleTs: ts}
				out.Routes[node] = rs
			}
			rs.Routes = append(rs.Routes, route)
		}
	}
	return running
}

// pushAll pushes every node its routes of cycle ts, an empty list included (its jobs
// stay local), with the keeper of final reports and the site-wide I/O episodes that
// stalled its jobs, concurrently; the pushes that failed are in out.Errors.
func (f *Frontend) pushAll(ctx context.Context, out *CycleResult, eps map[string][]*pb.Episode, ts int64) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	keeper := ""
	if f.keeps() {
		keeper = f.cfg.Self
	}
	for _, node := range f.cfg.Nodes {
		rs := out.Routes[node]
		if rs == nil {
			rs = &pb.Routes{CycleTs: ts}
		}
		rs.Keeper = keeper
		rs.Episodes = eps[node]
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f.push(ctx, node, rs)
			if err != nil {
				mu.Lock()
				out.Errors[node] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// aggregationPoint is the address of the agent holding a job whole: its one collector
// (exact), else the sync agent where its collectors meet, or the nearest live agent above
// a dead one, up to the frontend itself.
func (t *cycleTree) aggregationPoint(r balance.Route) string {
	name := r.Aggregator
	for {
		k, ok := t.tree.Kind(name)
		if !ok {
			return t.self
		}
		switch k {
		case balance.KindCollector:
			return t.addrOf[name]
		case balance.KindSync:
			if t.syncUp[name] {
				return t.syncs[name]
			}
		case balance.KindFrontend:
			return t.self
		}
		if name, ok = t.tree.Parent(name); !ok {
			return t.self
		}
	}
}

func (f *Frontend) push(ctx context.Context, node string, rs *pb.Routes) error {
	c, err := f.d.conn(f.cfg.NodeAddr(node), treeauth.Node)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	ack, err := pb.NewNodeClient(c).SetRoutes(pctx, rs)
	if err != nil {
		return err
	}
	if !ack.Ok {
		return errors.New(ack.Error)
	}
	f.stalls.note(node, ack.Stalls)
	return nil
}

// keeps says whether the frontend keeps the jobs' final reports.
func (f *Frontend) keeps() bool { return f.cfg.Self != "" && f.cfg.Store != nil && f.cfg.Facts != nil }

// MaxKeptReport bounds a final report sent to the frontend (a report with every property
// of the strategy is some tens of KB).
const MaxKeptReport = 1 << 20

// KeepReport keeps a job's final report, sent by its batch host (its first node for a job
// without a batch script), with the job's user from the job map: the site's view lists
// every job from here. A node may send only the reports of jobs it ran as their first
// node, whatever its message says.
func (f *Frontend) KeepReport(ctx context.Context, in *pb.JobSummary) (*pb.Ack, error) {
	if !f.keeps() {
		return &pb.Ack{Error: "this frontend keeps no reports"}, nil
	}
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
	facts, err := f.cfg.Facts(ctx, strconv.FormatUint(uint64(in.JobId), 10))
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("job %d: %v", in.JobId, err))
	}
	first := facts.BatchHost
	if first == "" && len(facts.Nodes) > 0 {
		first = facts.Nodes[0]
	}
	if node == "" || node != first {
		f.cfg.Log.Warn().Uint32("job", in.JobId).Str("node", node).Str("batch_host", first).Msg("final report refused: not from the job's batch host")
		return &pb.Ack{Error: fmt.Sprintf("job %d: reports come from its batch host %s, not %q", in.JobId, first, node)}, nil
	}
	if err := f.cfg.Store.Keep(ctx, factsOf(facts), r); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.Ack{Ok: true}, nil
}

// factsOf is what the store keeps of a job's facts from the job map: who and what it was
// charged to, what it asked for, and, once it ended, its end and end state. The cluster
// is the store's own (its cycles were written under it).
func factsOf(j *jobmap.Job) store.Job {
	sj := store.Job{ID: j.JobID, User: j.User, Account: j.Account, Partition: j.Partition, QOS: j.QOS,
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

// ParseCollectors reads "name=host:port,name=host:port".
func ParseCollectors(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("collectors: want name=host:port, got %q", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("collectors: %s: want host:port, got %q", name, addr)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("collectors: %s given twice", name)
		}
		out[name] = addr
	}
	return out, nil
}

// Run runs a cycle at every multiple of period until ctx is done, logging each.
func (f *Frontend) Run(ctx context.Context, period time.Duration) error {
	for {
		now := f.cfg.Now()
		next := now.Truncate(period).Add(period)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		res, err := f.Cycle(ctx)
		if err != nil {
			f.cfg.Metrics.Cycle(time.Since(start), 0, 0, 0)
			f.cfg.Log.Error().Err(err).Msg("balancing cycle failed")
			continue
		}
		st := res.Result.Stats
		f.cfg.Metrics.Cycle(time.Since(start), st.Jobs, len(res.Alive), len(res.Syncs))
		ev := f.cfg.Log.Info().Strs("collectors", res.Alive).Int("jobs", st.Jobs).Float64("exact_share", st.ExactShareJobs).
			Float64("max_collector_load", f.nodesWorth(st.MaxCollectorLoad))
		if len(f.cfg.Syncs) > 0 {
			ev = ev.Strs("syncs", res.Syncs)
		}
		for id, r := range res.ByJob {
			if r.AggregationPoint != "" {
				ev = ev.Str(fmt.Sprintf("job_%d", id), r.AggregationPoint)
			}
			if share, ok := f.Share(id); ok && !f.cfg.AssumeMaxLoads {
				ev = ev.Float64(fmt.Sprintf("share_%d", id), share)
			}
		}
		for n, e := range res.Errors {
			ev = ev.Str("unreached_"+n, e.Error())
		}
		ev.Msg("routes pushed")
	}
}

// nodesWorth converts a balancing load into nodes' worth (the unit of --lmax).
func (f *Frontend) nodesWorth(load int) float64 {
	la := max(f.cfg.Balance.LoadPerNode, 1)
	if !f.cfg.AssumeMaxLoads {
		la *= balance.ShareUnits
	}
	return float64(load) / float64(la)
}

// Summary merges the parts of a job from its holders (or, when the request names none,
// every collector) into its job-wide report. Collectors are asked concurrently with a
// short deadline, so a dead one does not hold the job's digest up.
func (f *Frontend) Summary(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	if f.agg == nil {
		return nil, errors.New("frontend: no property engine")
	}
	if len(in.Holders) == 0 {
		all := make([]string, 0, len(f.cfg.Collectors))
		for _, a := range f.cfg.Collectors {
			all = append(all, a)
		}
		sort.Strings(all)
		in = &pb.JobSummaryRequest{JobId: in.JobId, Holders: all}
	}
	return f.agg.Summary(ctx, in)
}

// PushPartial merges a collector's summary of a cycle of a job aggregated at the
// frontend.
func (f *Frontend) PushPartial(ctx context.Context, in *pb.PartialCycle) (*pb.Ack, error) {
	if f.agg == nil {
		return &pb.Ack{Error: "frontend: no property engine"}, nil
	}
	return f.agg.PushPartial(ctx, in)
}

// Ping answers a heartbeat as the frontend.
func (f *Frontend) Ping(ctx context.Context, in *pb.Heartbeat) (*pb.Heartbeat, error) {
	return &pb.Heartbeat{Name: "frontend", Role: "frontend", Ts: f.cfg.Now().Unix()}, nil
}
