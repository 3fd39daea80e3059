package collectors

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/treeauth"
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
// rerouted within one cycle. It serves the tree too: it keeps every job's final report
// from its batch host, and merges the jobs aggregated at it. Each part owns its resource:
// the router the connections and the job book, the keeper the store's reports, the merge
// the cycles of the jobs aggregated here.
type Frontend struct {
	pb.UnimplementedCollectorServer
	cfg    FrontendConfig
	routes *router
	keeper *reportKeeper // nil: no reports kept
	agg    *Sync         // merges the cycles of the jobs aggregated here
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
	f := &Frontend{cfg: cfg}
	tree := agents(cfg)
	keeper := ""
	if cfg.Self != "" && cfg.Store != nil && cfg.Facts != nil {
		f.keeper = newReportKeeper(cfg.Store, cfg.Facts, cfg.Log, cfg.Now)
		f.keeper.failed = cfg.Metrics.StoreFailed
		keeper = cfg.Self
	}
	f.routes = newRouter(cfg, tree, keeper)
	if cfg.Engine != nil {
		var err error
		if f.agg, err = NewSync(SyncConfig{Name: "frontend", Store: cfg.Store, Auth: cfg.Auth, Fixed: tree, Engine: cfg.Engine, Log: cfg.Log, Now: cfg.Now}); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// agents returns the addresses of the tree's agents: collectors, sync agents and the
// frontend itself.
func agents(cfg FrontendConfig) []string {
	var out []string
	for _, a := range cfg.Collectors {
		out = append(out, a)
	}
	for _, a := range cfg.Syncs {
		out = append(out, a)
	}
	if cfg.Self != "" {
		out = append(out, cfg.Self)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Close closes the frontend's connections.
func (f *Frontend) Close() {
	f.routes.close()
	if f.agg != nil {
		f.agg.Close()
	}
}

// Alive pings every collector and returns the names of those that answered, sorted.
func (f *Frontend) Alive(ctx context.Context) []string { return f.routes.alive(ctx) }

// AliveSyncs pings every sync agent and returns the names of those that answered.
func (f *Frontend) AliveSyncs(ctx context.Context) []string { return f.routes.aliveSyncs(ctx) }

// Share is a job's measured load: the largest share of its maximum that one of its nodes
// sent in one cycle, as the collectors reported it; false before any report.
func (f *Frontend) Share(job uint32) (float64, bool) { return f.routes.share(job) }

// Cycle runs one balancing cycle and pushes the routes.
func (f *Frontend) Cycle(ctx context.Context) (*CycleResult, error) { return f.routes.cycle(ctx) }

// Run runs a cycle at every multiple of period until ctx is done, logging each.
func (f *Frontend) Run(ctx context.Context, period time.Duration) error {
	return f.routes.run(ctx, period)
}

// KeepReport keeps a job's final report, sent by its batch host (its first node for a job
// without a batch script), with the job's user from the job map: the site's view lists
// every job from here. A node may send only the reports of jobs it ran as their first
// node, whatever its message says.
func (f *Frontend) KeepReport(ctx context.Context, in *pb.JobSummary) (*pb.Ack, error) {
	if f.keeper == nil {
		return &pb.Ack{Error: "this frontend keeps no reports"}, nil
	}
	return f.keeper.keep(ctx, in)
}

// KeepNotice keeps what a running job's batch host told its user, for the site's view
// of the running jobs that hold what they do not use.
func (f *Frontend) KeepNotice(ctx context.Context, in *pb.JobNotice) (*pb.Ack, error) {
	if f.keeper == nil {
		return &pb.Ack{Error: "this frontend keeps no notices (no store)"}, nil
	}
	return f.keeper.notice(ctx, in)
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
