package collectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/properties"
)

// FrontendConfig configures the frontend.
type FrontendConfig struct {
	// Collectors maps collector names to their gRPC addresses.
	Collectors map[string]string
	// NodeAddr gives a node daemon's gRPC address (where routes are pushed).
	NodeAddr func(node string) string
	// Nodes are the cluster's compute nodes, in topology order.
	Nodes []string
	// Tree, if set, is the agent tree from topology.conf (leaf switches are collectors,
	// named as in Collectors); else a flat tree cuts Nodes evenly over the collectors.
	Tree *balance.Tree
	// Jobs returns the running jobs (from the job map).
	Jobs    func(ctx context.Context) ([]balance.Job, error)
	Balance balance.Config
	Timeout time.Duration   // deadline of one ping or route push (default 2 s)
	Dial    grpc.DialOption // connection option (mtls.Files.DialOption); nil: plain
	// Self is the frontend's own address: the aggregation point of multi-node jobs,
	// which it merges from the collectors' parts when their batch host asks (Summary).
	Self   string
	Engine *properties.Engine
	Log    zerolog.Logger
	Now    func() time.Time
}

// Frontend runs PerSyst's job balancing every cycle (seed 000 §5.3): it pings the
// collectors, builds the agent tree over the ones that answer (a flat tree: the nodes cut
// evenly over them), balances the running jobs, and pushes each node its routes. A
// collector that stops answering is left out of the next cycle's tree, so its nodes are
// rerouted within one cycle.
type Frontend struct {
	pb.UnimplementedCollectorServer
	cfg FrontendConfig

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // address → connection
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
				return nil, fmt.Errorf("frontend: collector %s of the topology has no address", c)
			}
		}
		cfg.Nodes = cfg.Tree.Nodes()
	}
	return &Frontend{cfg: cfg, conns: map[string]*grpc.ClientConn{}}, nil
}

func (f *Frontend) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	dial := f.cfg.Dial
	if dial == nil {
		dial = grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	c, err := grpc.NewClient(addr, dial)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

// Close closes the frontend's connections.
func (f *Frontend) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = map[string]*grpc.ClientConn{}
}

// Alive pings every collector and returns the names of those that answered, sorted.
func (f *Frontend) Alive(ctx context.Context) []string {
	names := make([]string, 0, len(f.cfg.Collectors))
	for n := range f.cfg.Collectors {
		names = append(names, n)
	}
	sort.Strings(names)
	alive := make([]bool, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := f.conn(f.cfg.Collectors[n])
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
			defer cancel()
			_, err = pb.NewCollectorClient(c).Ping(pctx, &pb.Heartbeat{Name: "frontend", Role: "frontend", Ts: f.cfg.Now().Unix()})
			alive[i] = err == nil
		}()
	}
	wg.Wait()
	var out []string
	for i, n := range names {
		if alive[i] {
			out = append(out, n)
		} else {
			f.cfg.Log.Warn().Str("collector", n).Msg("collector does not answer: left out of this cycle's routes")
		}
	}
	return out
}

// CycleResult is one balancing cycle's outcome.
type CycleResult struct {
	Alive  []string              // collectors that answered
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
	addrOf := map[string]string{}
	var tree *balance.Tree
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
		if tree, err = balance.Without(f.cfg.Tree, dead); err != nil {
			return nil, fmt.Errorf("frontend: %w", err)
		}
		for _, name := range tree.Collectors() {
			addrOf[name] = f.cfg.Collectors[name]
		}
	} else {
		per := (len(f.cfg.Nodes) + len(alive) - 1) / len(alive)
		if tree, err = balance.FlatTree(f.cfg.Nodes, per, 0); err != nil {
			return nil, fmt.Errorf("frontend: %w", err)
		}
		// FlatTree names its collectors c1, c2, ...: map them onto the live ones.
		for i, name := range tree.Collectors() {
			addrOf[name] = f.cfg.Collectors[alive[i]]
		}
	}
	jobs, err := f.cfg.Jobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("frontend: job map: %w", err)
	}
	known := map[string]bool{}
	for _, n := range f.cfg.Nodes {
		known[n] = true
	}
	var in []balance.Job
	for _, j := range jobs {
		var nodes []string
		for _, n := range j.Nodes {
			if known[n] {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) > 0 {
			in = append(in, balance.Job{ID: j.ID, Nodes: nodes, LoadPerNode: j.LoadPerNode})
		}
	}
	res, err := balance.Balance(tree, in, f.cfg.Balance)
	if err != nil {
		return nil, fmt.Errorf("frontend: %w", err)
	}
	out := &CycleResult{Alive: alive, Result: res, Routes: map[string]*pb.Routes{}, Errors: map[string]error{}, ByJob: map[uint32]*pb.Route{}}
	ts := f.cfg.Now().Unix()
	for _, r := range res.Routes {
		id, err := strconv.ParseUint(r.JobID, 10, 32)
		if err != nil {
			continue
		}
		route := &pb.Route{JobId: uint32(id), NodeCollector: map[string]string{}, AggregationPoint: addrOf[r.Aggregator]}
		for _, s := range r.Sends {
			if a, ok := addrOf[s.To]; ok {
				route.NodeCollector[s.Node] = a
			} // else local: the node keeps the job (a one-node job)
		}
		if len(route.NodeCollector) > 1 && f.cfg.Self != "" {
			// A multi-node job is merged here at its end, from every collector that holds
			// part of it: routes change from cycle to cycle as loads change, so over its
			// life a job's records may reach several collectors, and a split job always
			// does.
			route.AggregationPoint = f.cfg.Self
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
	// Every node gets its routes, an empty list included (its jobs stay local).
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, node := range f.cfg.Nodes {
		rs := out.Routes[node]
		if rs == nil {
			rs = &pb.Routes{CycleTs: ts}
		}
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
	return out, nil
}

func (f *Frontend) push(ctx context.Context, node string, rs *pb.Routes) error {
	c, err := f.conn(f.cfg.NodeAddr(node))
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
	return nil
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
		res, err := f.Cycle(ctx)
		if err != nil {
			f.cfg.Log.Error().Err(err).Msg("balancing cycle failed")
			continue
		}
		st := res.Result.Stats
		ev := f.cfg.Log.Info().Strs("collectors", res.Alive).Int("jobs", st.Jobs).Float64("exact_share", st.ExactShareJobs).
			Int("max_collector_load", st.MaxCollectorLoad)
		for n, e := range res.Errors {
			ev = ev.Str("unreached_"+n, e.Error())
		}
		ev.Msg("routes pushed")
	}
}

// Summary merges the parts of a job from every collector holding some of it into its
// job-wide report. Collectors are asked concurrently with a short deadline, so a dead
// one does not hold the job's digest up.
func (f *Frontend) Summary(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	if f.cfg.Engine == nil {
		return nil, errors.New("frontend: no property engine")
	}
	names := make([]string, 0, len(f.cfg.Collectors))
	for n := range f.cfg.Collectors {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]*pb.JobPartial, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := f.conn(f.cfg.Collectors[n])
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, min(f.cfg.Timeout, 500*time.Millisecond))
			defer cancel()
			p, err := pb.NewCollectorClient(c).Partial(pctx, in)
			if err != nil {
				f.cfg.Log.Info().Err(err).Str("collector", n).Uint32("job", in.JobId).Msg("no part of the job from this collector")
				return
			}
			if len(p.Nodes) > 0 {
				parts[i] = p
			}
		}()
	}
	wg.Wait()
	var have []*pb.JobPartial
	for _, p := range parts {
		if p != nil {
			have = append(have, p)
		}
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("frontend: no collector holds job %d", in.JobId)
	}
	rep, err := MergePartials(f.cfg.Engine, in.JobId, have)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return nil, err
	}
	return &pb.JobSummary{JobId: in.JobId, Nodes: rep.Nodes, ReportJson: b}, nil
}

// Ping answers a heartbeat as the frontend.
func (f *Frontend) Ping(ctx context.Context, in *pb.Heartbeat) (*pb.Heartbeat, error) {
	return &pb.Heartbeat{Name: "frontend", Role: "frontend", Ts: f.cfg.Now().Unix()}, nil
}
