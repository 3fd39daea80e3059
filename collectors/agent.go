package collectors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sdnotify"
)

// AgentOptions are what every agent of the tree starts from: who it is, where it listens
// and keeps its results, and persyst.conf (thresholds and strategy, mutual TLS, the job
// map, the tree).
type AgentOptions struct {
	Name   string
	Listen string // gRPC address; "" : none (a frontend that merges nothing)
	DB     string // SQLite database of results; "" : none
	Q      int    // quantile steps per property and cycle (10: deciles)
	// ConfigPath names persyst.conf in errors; Config is its content.
	ConfigPath string
	Config     config.Config
	Log        zerolog.Logger
	// Version is what persyst_build_info reports.
	Version string
}

// agent is what AgentOptions open.
type agent struct {
	store     *store.Store
	engine    *properties.Engine
	auth      *treeauth.Tree
	serverOpt []grpc.ServerOption
	ln        net.Listener
	metrics   *prometheus.Registry
}

// open loads the property engine and the tree's authentication, opens the database and
// binds the listener, in that order: a bad configuration fails before anything is opened.
func (o AgentOptions) open(ctx context.Context, role treeauth.Role) (*agent, error) {
	engine, err := properties.LoadConfig(o.ConfigPath, o.Config)
	if err != nil {
		return nil, err
	}
	a := &agent{engine: engine, metrics: exporter.NewRegistry(string(role), o.Version)}
	if a.auth, err = treeauth.Load(o.ConfigPath, o.Config, treeauth.Identity{Role: role, Name: o.Name}, o.Log); err != nil {
		return nil, err
	}
	if a.serverOpt, err = a.auth.ServerOptions(); err != nil {
		return nil, fmt.Errorf("%s: %w", o.ConfigPath, err)
	}
	exporter.TreeRefusals(a.metrics, a.auth.RefusedBy)
	if o.DB != "" {
		// The frontend starts without its database (a MariaDB down or refusing it): the
		// nodes hold the reports it cannot keep meanwhile (watchStore).
		later := role == treeauth.Frontend
		if a.store, err = store.Open(ctx, o.DB, store.Options{Cluster: o.Config.ClusterOf(o.ConfigPath), Later: later}); err != nil {
			return nil, err
		}
		go a.prune(ctx, store.Retention{Cycles: o.Config.CollectorRetention, Jobs: o.Config.JobRetention, Rollups: o.Config.RollupRetention}, o.Log)
	}
	if o.Listen != "" {
		if a.ln, err = net.Listen("tcp", o.Listen); err != nil {
			a.close()
			return nil, fmt.Errorf("listen %s: %w", o.Listen, err)
		}
	}
	return a, nil
}

// prune removes what is older than the retention's tiers from the agent's database,
// every hour until ctx is done.
func (a *agent) prune(ctx context.Context, r store.Retention, log zerolog.Logger) {
	if a.store == nil || r == (store.Retention{}) {
		return
	}
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		p, err := a.store.Admin().Prune(ctx, time.Now(), r)
		if err != nil {
			log.Warn().Err(err).Msg("old results not pruned")
		} else if p != (store.Pruned{}) {
			log.Info().Int("cycles_of_jobs", p.CycleJobs).Int("jobs", p.Jobs).Int64("rollup_rows", p.RollupRows).
				Dur("cycle_retention", r.Cycles).Dur("job_retention", r.Jobs).Dur("rollup_retention", r.Rollups).Msg("old results pruned")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveMetrics serves the agent's Prometheus metrics at persyst.conf's address for its
// role (none: not served) until ctx is done.
func (a *agent) serveMetrics(ctx context.Context, o AgentOptions, addr string) error {
	if addr == "" {
		return nil
	}
	// Metrics never keep an agent from its work: an address in use is retried.
	_ = exporter.Keep(ctx, exporter.ServeOptions{Addr: addr, Allow: o.Config.MetricsAllow, WebConfig: o.Config.MetricsWebConfig, Registry: a.metrics, Log: o.Log}, 0)
	return nil
}

func (a *agent) close() {
	if a.store != nil {
		a.store.Close()
	}
	if a.ln != nil {
		a.ln.Close()
	}
}

// RunCollector runs a collector until ctx is done. self is its address as the frontend
// names it ("" : Listen).
func RunCollector(ctx context.Context, o AgentOptions, self string) error {
	if self == "" {
		self = o.Listen
	}
	a, err := o.open(ctx, treeauth.Collector)
	if err != nil {
		return err
	}
	defer a.close()
	jm, err := jobmap.FromConfig(o.Config, o.Log)
	if err != nil {
		return err
	}
	m := &collectorMetrics{}
	cm := exporter.NewCollector(a.metrics, m.jobs)
	c, err := New(Config{Name: o.Name, Store: a.store, Q: o.Q, Log: o.Log, Engine: a.engine, Self: self, Auth: a.auth,
		Placement: JobmapPlacement(jm), Metrics: cm})
	if err != nil {
		return err
	}
	m.c.Store(c)
	if err := a.serveMetrics(ctx, o, o.Config.CollectorMetricsAddr); err != nil {
		return err
	}
	go c.Run(ctx)
	o.Log.Info().Str("listen", a.ln.Addr().String()).Str("db", o.DB).Msg("persyst collector ready")
	defer sdnotify.Serving(ctx, o.Log)()
	return Serve(ctx, a.ln, c, append(a.serverOpt, countOversized(cm))...)
}

// RunSync runs a sync agent until ctx is done; collectors (name=host:port,...) are asked
// for a job's parts when its batch host names none.
func RunSync(ctx context.Context, o AgentOptions, collectors string) error {
	var addrs []string
	if collectors != "" {
		m, err := ParseCollectors(collectors)
		if err != nil {
			return fmt.Errorf("--collectors: %w", err)
		}
		for _, a := range m {
			addrs = append(addrs, a)
		}
	}
	a, err := o.open(ctx, treeauth.Sync)
	if err != nil {
		return err
	}
	defer a.close()
	s, err := NewSync(SyncConfig{Name: o.Name, Store: a.store, Q: o.Q, Collectors: addrs, Auth: a.auth, Engine: a.engine, Log: o.Log,
		Metrics: exporter.NewSync(a.metrics)})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := a.serveMetrics(ctx, o, o.Config.SyncMetricsAddr); err != nil {
		return err
	}
	o.Log.Info().Str("listen", a.ln.Addr().String()).Str("db", o.DB).Msg("persyst sync agent ready")
	defer sdnotify.Serving(ctx, o.Log)()
	return Serve(ctx, a.ln, s, a.serverOpt...)
}

// FrontendOptions configure RunFrontend.
type FrontendOptions struct {
	AgentOptions
	// The agents: collectors and sync agents as name=host:port,... (added to the
	// addresses of the tree's description).
	Collectors, Syncs string
	// Where the tree comes from: Slurm's topology.conf (TopologyFile), persyst's tree
	// description (TreeFile), else persyst.conf's tree lines, else the compute nodes
	// (Nodes, a Slurm hostlist in topology order) cut evenly over the collectors.
	TopologyFile, TreeFile, Nodes string
	// NodeAddr is a node daemon's route service ("%n": the node name); NodeAddrs names
	// some explicitly (node=host:port,...).
	NodeAddr, NodeAddrs string
	LMax                int    // l_max in nodes (0: a collector's own nodes)
	Loads               string // "measured" (default) or "max"
	Cycle               time.Duration
}

// RunFrontend runs the frontend until ctx is done: every cycle it balances the running
// jobs over the collectors that answer and pushes the nodes their routes; with Listen
// set it also merges jobs split over collectors that meet only at the frontend.
func RunFrontend(ctx context.Context, o FrontendOptions) error {
	if o.Loads != "" && o.Loads != "measured" && o.Loads != "max" {
		return fmt.Errorf("--loads %q: want measured or max", o.Loads)
	}
	where, err := o.agents()
	if err != nil {
		return err
	}
	jm, err := jobmap.FromConfig(o.Config, o.Log)
	if err != nil {
		return err
	}
	nodeAddr, err := o.nodeAddr()
	if err != nil {
		return err
	}
	a, err := o.open(ctx, treeauth.Frontend)
	if err != nil {
		return err
	}
	defer a.close()
	m := exporter.NewFrontend(a.metrics)
	if a.store != nil {
		go watchStore(ctx, a.store.Admin(), a.store.Admin().Path(), storeCheckEvery, m.StoreUp, o.Log)
	}
	f, err := NewFrontend(FrontendConfig{
		Collectors: where.collectors, Syncs: where.syncs, Nodes: where.nodes, Tree: where.tree,
		Log: o.Log, Balance: balance.Config{LMax: o.LMax}, AssumeMaxLoads: o.Loads == "max", Auth: a.auth,
		Self: advertised(o.Listen, os.Hostname), Engine: a.engine, Store: a.store, NodeAddr: nodeAddr, Jobs: RunningJobs(jm), Facts: jm.Job,
		Metrics: m, Period: o.Cycle,
	})
	if err != nil {
		return err
	}
	defer f.Close()
	if err := a.serveMetrics(ctx, o.AgentOptions, o.Config.FrontendMetricsAddr); err != nil {
		return err
	}
	if a.ln != nil {
		go func() {
			if err := Serve(ctx, a.ln, f, a.serverOpt...); err != nil {
				o.Log.Error().Err(err).Msg("frontend service stopped")
			}
		}()
	}
	o.Log.Info().Int("nodes", len(where.nodes)).Int("collectors", len(where.collectors)).Msg("persyst frontend running")
	defer sdnotify.Serving(ctx, o.Log)()
	return f.Run(ctx, o.Cycle)
}

// advertised is the address other agents and the nodes reach a listener at: listen, with
// this machine's name for a host left out or unspecified (":16832", "0.0.0.0:16832",
// "[::]:16832"), which would name the caller's own machine.
func advertised(listen string, hostname func() (string, error)) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		return listen
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	name, err := hostname()
	if err != nil || name == "" {
		return listen
	}
	return net.JoinHostPort(name, port)
}

// collectorMetrics gives the collector's job count to its metrics, which are made
// before the collector.
type collectorMetrics struct{ c atomic.Pointer[Collector] }

func (m *collectorMetrics) jobs() int {
	if c := m.c.Load(); c != nil {
		return c.Jobs()
	}
	return 0
}

// RunningJobs returns the running jobs of a job map, as the balancing takes them.
func RunningJobs(jm *jobmap.Map) func(ctx context.Context) ([]balance.Job, error) {
	return func(ctx context.Context) ([]balance.Job, error) {
		running, err := jm.Running(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]balance.Job, 0, len(running))
		for _, j := range running {
			out = append(out, balance.Job{ID: strconv.FormatUint(uint64(j.JobID), 10), Nodes: j.Nodes})
		}
		return out, nil
	}
}

// frontendAgents are the tree and the agents' addresses a frontend balances over.
type frontendAgents struct {
	tree              *balance.Tree
	nodes             []string
	collectors, syncs map[string]string
}

// agents reads the tree (or the node list) and the agents' addresses.
func (o FrontendOptions) agents() (frontendAgents, error) {
	w := frontendAgents{collectors: map[string]string{}, syncs: map[string]string{}}
	var err error
	if o.Collectors != "" {
		if w.collectors, err = ParseCollectors(o.Collectors); err != nil {
			return w, fmt.Errorf("--collectors: %w", err)
		}
	}
	if o.Syncs != "" {
		if w.syncs, err = ParseCollectors(o.Syncs); err != nil {
			return w, fmt.Errorf("--syncs: %w", err)
		}
	}
	switch {
	case o.TopologyFile != "" && o.TreeFile != "":
		return w, errors.New("--topology and --tree: give one")
	case o.TopologyFile != "":
		w.tree, err = parseFile(o.TopologyFile, balance.ParseTopologyConf)
	case o.TreeFile != "":
		w.tree, err = parseFile(o.TreeFile, balance.ParseTreeSpec)
	case o.Config.Tree != "":
		if w.tree, err = balance.ParseTreeSpec(strings.NewReader(o.Config.Tree)); err != nil {
			err = fmt.Errorf("%s: %w", o.ConfigPath, err)
		}
	default:
		if w.nodes, err = jobmap.ExpandHostlist(o.Nodes); err != nil || len(w.nodes) == 0 {
			err = fmt.Errorf("--nodes %q: want the compute nodes as a Slurm hostlist (or a tree): %v", o.Nodes, err)
		}
	}
	if err != nil || w.tree == nil {
		return w, err
	}
	// Addresses from the tree description, unless given on the command line.
	for _, c := range w.tree.Collectors() {
		if a, ok := w.tree.Addr(c); ok && w.collectors[c] == "" {
			w.collectors[c] = a
		}
	}
	for _, s := range w.tree.Agents(balance.KindSync) {
		if a, ok := w.tree.Addr(s); ok && w.syncs[s] == "" {
			w.syncs[s] = a
		}
	}
	return w, nil
}

// parseFile parses a tree file, naming it in errors.
func parseFile(path string, parse func(io.Reader) (*balance.Tree, error)) (*balance.Tree, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// nodeAddr returns where each node daemon's route service is.
func (o FrontendOptions) nodeAddr() (func(string) string, error) {
	explicit := map[string]string{}
	if o.NodeAddrs != "" {
		list := o.NodeAddrs
		if file, ok := strings.CutPrefix(list, "@"); ok {
			// A site's thousands of node=host:port pairs, one or more per line.
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("--node-addrs: %w", err)
			}
			list = strings.Join(strings.Fields(string(b)), ",")
		}
		var err error
		if explicit, err = ParseCollectors(list); err != nil {
			return nil, fmt.Errorf("--node-addrs %s: %w", o.NodeAddrs, err)
		}
	}
	tmpl := o.NodeAddr
	if tmpl == "" {
		tmpl = "%n:16831"
	}
	return func(n string) string {
		if a, ok := explicit[n]; ok {
			return a
		}
		return strings.ReplaceAll(tmpl, "%n", n)
	}, nil
}
