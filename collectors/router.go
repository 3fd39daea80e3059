package collectors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/treeauth"
)

// router is the frontend's balancing cycle: it owns the connections to the agents and
// the nodes, each running job's holders and measured load (the job book), and the nodes'
// I/O stalls; every cycle it pings the agents, balances the running jobs over the live
// tree and pushes each node its routes.
type router struct {
	cfg    FrontendConfig
	d      *dialer
	tree   []string // the addresses of the tree's agents, sorted (Heartbeat.tree)
	jobs   *jobBook // each running job's holders so far and its measured load
	stalls *siteStalls
	// keeper is the address the nodes send final reports to ("": none is kept).
	keeper string
}

// newRouter returns the balancing of cfg over the tree's agents (tree: their addresses).
func newRouter(cfg FrontendConfig, tree []string, keeper string) *router {
	rt := &router{cfg: cfg, tree: tree, jobs: newJobBook(), stalls: newSiteStalls(cfg.Period, cfg.Store, cfg.Log), keeper: keeper}
	nodes := make([]string, 0, len(cfg.Nodes))
	for _, n := range cfg.Nodes {
		nodes = append(nodes, cfg.NodeAddr(n))
	}
	rt.d = newDialer(cfg.Auth, append(slices.Clone(tree), nodes...)...)
	return rt
}

// alive pings every collector and returns the names of those that answered, sorted.
func (rt *router) alive(ctx context.Context) []string {
	return rt.ping(ctx, rt.cfg.Collectors, "collector", "left out of this cycle's routes")
}

// aliveSyncs pings every sync agent and returns the names of those that answered.
func (rt *router) aliveSyncs(ctx context.Context) []string {
	return rt.ping(ctx, rt.cfg.Syncs, "sync", "its jobs are merged above it this cycle")
}

func (rt *router) ping(ctx context.Context, agents map[string]string, role, consequence string) []string {
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
			cl, err := rt.d.collector(agents[n])
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, rt.cfg.Timeout)
			defer cancel()
			hb, err := cl.Ping(pctx, &pb.Heartbeat{Name: "frontend", Role: "frontend", Ts: rt.cfg.Now().Unix(), Tree: rt.tree})
			alive[i] = err == nil
			if err == nil {
				rt.jobs.noteLoads(hb.Jobs)
			}
		}()
	}
	wg.Wait()
	var out []string
	for i, n := range names {
		if alive[i] {
			out = append(out, n)
		} else {
			rt.cfg.Log.Warn().Str(role, n).Msg(role + " does not answer: " + consequence)
		}
	}
	return out
}

// share is a job's measured load: the largest share of its maximum that one of its nodes
// sent in one cycle, as the collectors reported it; false before any report.
func (rt *router) share(job uint32) (float64, bool) { return rt.jobs.share(job) }

// balanceInput charges each job its load: the assumed maximum (the PerSyst thesis, §5.3), or, when
// a collector has reported the job, its measured share of it, in thousandths of a node's
// worth (balance.ShareUnits).
func (rt *router) balanceInput(jobs []balance.Job) ([]balance.Job, balance.Config) {
	cfg := rt.cfg.Balance
	if rt.cfg.AssumeMaxLoads {
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
			if share, ok := rt.share(uint32(id)); ok {
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

// cycle runs one balancing cycle and pushes the routes.
func (rt *router) cycle(ctx context.Context) (*CycleResult, error) {
	alive := rt.alive(ctx)
	if len(alive) == 0 {
		return nil, errors.New("frontend: no collector answers: nodes keep their jobs' data")
	}
	liveSyncs := rt.aliveSyncs(ctx)
	live, err := rt.liveTree(alive, liveSyncs)
	if err != nil {
		return nil, err
	}
	jobs, err := rt.cfg.Jobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("frontend: job map: %w", err)
	}
	in, bcfg := rt.balanceInput(onNodes(jobs, rt.cfg.Nodes))
	res, err := balance.Balance(live.tree, in, bcfg)
	if err != nil {
		return nil, fmt.Errorf("frontend: %w", err)
	}
	out := &CycleResult{Alive: alive, Syncs: liveSyncs, Result: res, Routes: map[string]*pb.Routes{}, Errors: map[string]error{}, ByJob: map[uint32]*pb.Route{}}
	ts := rt.cfg.Now().Unix()
	rt.jobs.forgetEnded(rt.routeJobs(out, live, ts))
	rt.pushAll(ctx, out, rt.stalls.episodes(ctx, jobs), ts)
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
func (rt *router) liveTree(alive, liveSyncs []string) (*cycleTree, error) {
	t := &cycleTree{addrOf: map[string]string{}, syncUp: map[string]bool{}, syncs: rt.cfg.Syncs, self: rt.cfg.Self}
	var err error
	if rt.cfg.Tree != nil {
		// The topology without the collectors that did not answer: their nodes go to the
		// nearest live collector in the tree.
		dead := map[string]bool{}
		for _, c := range rt.cfg.Tree.Collectors() {
			dead[c] = true
		}
		for _, a := range alive {
			delete(dead, a)
		}
		if t.tree, err = balance.Without(rt.cfg.Tree, dead); err != nil {
			return nil, fmt.Errorf("frontend: %w", err)
		}
		for _, name := range t.tree.Collectors() {
			t.addrOf[name] = rt.cfg.Collectors[name]
		}
	} else {
		per := (len(rt.cfg.Nodes) + len(alive) - 1) / len(alive)
		if t.tree, err = balance.FlatTree(rt.cfg.Nodes, per, 0); err != nil {
			return nil, fmt.Errorf("frontend: %w", err)
		}
		// FlatTree names its collectors c1, c2, ...: map them onto the live ones.
		for i, name := range t.tree.Collectors() {
			t.addrOf[name] = rt.cfg.Collectors[alive[i]]
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
func (rt *router) routeJobs(out *CycleResult, live *cycleTree, ts int64) map[uint32]bool {
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
			route.Holders = rt.jobs.addHolders(route.JobId, route.NodeCollector)
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
func (rt *router) pushAll(ctx context.Context, out *CycleResult, eps map[string][]*pb.Episode, ts int64) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	keeper := rt.keeper
	for _, node := range rt.cfg.Nodes {
		rs := out.Routes[node]
		if rs == nil {
			rs = &pb.Routes{CycleTs: ts}
		}
		rs.Keeper = keeper
		rs.Episodes = eps[node]
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rt.push(ctx, node, rs)
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

func (rt *router) push(ctx context.Context, node string, rs *pb.Routes) error {
	c, err := rt.d.conn(rt.cfg.NodeAddr(node), treeauth.Node)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, rt.cfg.Timeout)
	defer cancel()
	ack, err := pb.NewNodeClient(c).SetRoutes(pctx, rs)
	if err != nil {
		return err
	}
	if !ack.Ok {
		return errors.New(ack.Error)
	}
	rt.stalls.note(node, ack.Stalls)
	return nil
}

// run runs a cycle at every multiple of period until ctx is done, logging each.
func (rt *router) run(ctx context.Context, period time.Duration) error {
	for {
		now := rt.cfg.Now()
		next := now.Truncate(period).Add(period)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		res, err := rt.cycle(ctx)
		if err != nil {
			rt.cfg.Metrics.Cycle(time.Since(start), 0, 0, 0)
			rt.cfg.Log.Error().Err(err).Msg("balancing cycle failed")
			continue
		}
		st := res.Result.Stats
		rt.cfg.Metrics.Cycle(time.Since(start), st.Jobs, len(res.Alive), len(res.Syncs))
		ev := rt.cfg.Log.Info().Strs("collectors", res.Alive).Int("jobs", st.Jobs).Float64("exact_share", st.ExactShareJobs).
			Float64("max_collector_load", rt.nodesWorth(st.MaxCollectorLoad))
		if len(rt.cfg.Syncs) > 0 {
			ev = ev.Strs("syncs", res.Syncs)
		}
		for id, r := range res.ByJob {
			if r.AggregationPoint != "" {
				ev = ev.Str(fmt.Sprintf("job_%d", id), r.AggregationPoint)
			}
			if share, ok := rt.share(id); ok && !rt.cfg.AssumeMaxLoads {
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
func (rt *router) nodesWorth(load int) float64 {
	la := max(rt.cfg.Balance.LoadPerNode, 1)
	if !rt.cfg.AssumeMaxLoads {
		la *= balance.ShareUnits
	}
	return float64(load) / float64(la)
}

// close closes the router's connections.
func (rt *router) close() { rt.d.close() }
