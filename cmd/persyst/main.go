// Command persyst is the one binary of persyst, with a subcommand per role.
// This file only wires flags to the packages that do the work.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/calibrate"
	"github.com/persyst/persyst/collectors"
	"github.com/persyst/persyst/collectors/mtls"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/daemon/standalone"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/spank/options"
)

const usage = `usage: persyst COMMAND [flags]

commands:
  daemon     run the node daemon (as root, one per node)
  run        run a command measured like a job: persyst run [--interval D] [--json] -- CMD
  report     a job's digest: persyst report [--json] [--node BATCHHOST] JOBID
  collector  a collector of the agent tree (gRPC): persyst collector --listen ADDR --db PATH
  sync       a sync agent, merging jobs split over collectors: persyst sync --listen ADDR --db PATH
  frontend   balances jobs over collectors and pushes routes: persyst frontend --collectors c1=ADDR,... --nodes HOSTLIST
  jobs       show a node daemon's jobs
  jobmap     show the cluster's jobs as persyst sees them (slurmrestd or Slurm's commands)
  balance simulate
             run PerSyst's job balancing on a synthetic cluster and job mix
  calibrate  measure this node type's memory bandwidth and peak flops for the thresholds:
             persyst calibrate [--dir DIR] [--seconds N] [--json] [--node-type NAME]
  version    print the version

Run 'persyst COMMAND -h' for a command's flags.
`

var version = "dev"

func init() {
	// persyst run's child execs CMD from the main thread: perf counters opened on its pid
	// (unprivileged, inherit mode) are attached to that thread, and an exec from another
	// thread would end them with it.
	if len(os.Args) > 1 && os.Args[1] == standalone.ChildCommand {
		runtime.LockOSThread()
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "daemon":
		err = runDaemon(ctx, args)
	case "run":
		var code int
		code, err = runRun(ctx, args)
		if err == nil {
			os.Exit(code)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "persyst:", err)
		os.Exit(max(code, 1))
	case standalone.ChildCommand:
		os.Exit(standalone.Child(args))
	case digest.AppendCommand:
		os.Exit(digest.AppendChild(args))
	case "jobs":
		err = runJobs(ctx, args)
	case "report":
		err = runReport(ctx, args)
	case "collector":
		err = runCollector(ctx, args)
	case "sync":
		err = runSync(ctx, args)
	case "frontend":
		err = runFrontend(ctx, args)
	case "jobmap":
		err = runJobmap(ctx, args)
	case "balance":
		err = runBalance(args)
	case "calibrate":
		err = runCalibrate(ctx, args)
	case "version", "--version":
		fmt.Println("persyst", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "persyst: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "persyst:", err)
		os.Exit(1)
	}
}

// socketFlag is the socket path template shared by daemon and clients; %n is the node.
func socketDefault() string {
	if s := os.Getenv("PERSYST_SOCKET"); s != "" {
		return s
	}
	return options.DefaultSocket
}

func shortHostname() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return h
}

func runDaemon(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst daemon", flag.ContinueOnError)
	node := fs.String("node", shortHostname(), "this node's Slurm node name")
	socket := fs.String("socket", socketDefault(), "unix socket path (%n: node name)")
	stateDir := fs.String("state-dir", "/run/persyst/%n", "directory for the job registry (%n: node name)")
	slurmUser := fs.String("slurm-user", "root", "Slurm user allowed to send events besides root")
	retention := fs.Duration("retention", 24*time.Hour, "how long ended jobs stay in the registry")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	cycle := fs.Duration("cycle", 0, "measurement cycle (default: CycleSeconds from persyst.conf, else 60s)")
	confPath := fs.String("config", config.DefaultPath, "persyst.conf")
	noMeasure := fs.Bool("no-measure", false, "record lifecycle events only; measure nothing")
	grpcListen := fs.String("grpc-listen", "", "address of the gRPC service the frontend pushes routes to (\"\": none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conf, err := config.Load(*confPath, *confPath == config.DefaultPath)
	if err != nil {
		return err
	}
	if *cycle == 0 {
		*cycle = conf.Cycle
	}
	if *cycle < time.Second {
		return fmt.Errorf("--cycle %v: the cycle must be at least 1s", *cycle)
	}
	lvl, err := zerolog.ParseLevel(*level)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("node", *node).Logger()
	expand := func(s string) string { return strings.ReplaceAll(s, "%n", *node) }
	engine, cal, err := nodeEngine(*confPath, conf)
	if err != nil {
		return err
	}
	log.Info().Str("node_type", cal.NodeType).Interface("calibration", cal.Values).Msg("properties loaded")
	jm, err := jobmap.FromConfig(conf, log)
	if err != nil {
		return err
	}
	tlsFiles := tlsOf(conf)
	dial, err := tlsFiles.DialOption()
	if err != nil {
		return err
	}
	serverOpt, err := tlsFiles.ServerOption()
	if err != nil {
		return err
	}
	var ship *uplink.Uplink
	if conf.Collector != "" || *grpcListen != "" {
		if ship, err = uplink.New(uplink.Config{Addr: conf.Collector, Node: *node, Dial: dial}, log); err != nil {
			return err
		}
		go ship.Run(ctx, *cycle)
	}
	if *grpcListen != "" {
		ln, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			return fmt.Errorf("--grpc-listen %s: %w", *grpcListen, err)
		}
		go func() {
			if err := uplink.Serve(ctx, ln, &uplink.NodeServer{Node: *node, Ship: ship}, serverOpt); err != nil {
				log.Error().Err(err).Msg("node gRPC service stopped")
			}
		}()
	}
	return daemon.Run(ctx, daemon.Config{
		Node:      *node,
		Socket:    expand(*socket),
		StateDir:  expand(*stateDir),
		SlurmUser: *slurmUser,
		Retention: *retention,
		Measure: daemon.MeasureConfig{Cycle: *cycle, Disabled: *noMeasure, Uplink: uplinkOf(ship), Digest: daemon.DigestConfig{
			Engine: engine, Facts: jm, Off: !conf.Digest,
			Append: func(ctx context.Context, t digest.Target, text []byte) error {
				return digest.Append(ctx, t, text, digest.AppendOptions{})
			},
		}},
	}, log, time.Now)
}

func runRun(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("persyst run [flags] -- CMD ARGS...", flag.ContinueOnError)
	interval := fs.Duration("interval", time.Minute, "measurement cycle (reads at multiples of it, and at the end)")
	asJSON := fs.Bool("json", false, "print the result as JSON (to stderr)")
	level := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	confPath := fs.String("config", config.DefaultPath, "persyst.conf (thresholds, strategy, calibration)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *interval < time.Second {
		return 2, fmt.Errorf("--interval %v: must be at least 1s", *interval)
	}
	lvl, err := zerolog.ParseLevel(*level)
	if err != nil {
		return 2, fmt.Errorf("--log-level: %w", err)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(lvl).With().Timestamp().Logger()
	conf, err := config.Load(*confPath, *confPath == config.DefaultPath)
	if err != nil {
		return 2, err
	}
	engine, _, err := nodeEngine(*confPath, conf)
	if err != nil {
		return 2, err
	}
	return standalone.Run(ctx, standalone.Options{
		Engine:   engine,
		Node:     shortHostname(),
		Interval: *interval,
		JSON:     *asJSON,
		Stdin:    os.Stdin,
		Stdout:   os.Stdout,
		Stderr:   os.Stderr,
		Log:      log,
	}, fs.Args())
}

// propertySettings takes the property settings from persyst.conf.
// agentEngine checks persyst.conf's thresholds against the catalog and loads the property
// engine of a collector, sync agent or frontend (no node calibration).
func agentEngine(confPath string, conf config.Config) (*properties.Engine, error) {
	if err := properties.CheckThresholds(confPath, conf.ThresholdLines); err != nil {
		return nil, err
	}
	return properties.Load(propertySettings(conf))
}

// nodeEngine is agentEngine for a node: with this node type's calibration.
func nodeEngine(confPath string, conf config.Config) (*properties.Engine, properties.Calibration, error) {
	if err := properties.CheckThresholds(confPath, conf.ThresholdLines); err != nil {
		return nil, properties.Calibration{}, err
	}
	return properties.LoadForNode(hostfs.New("/"), conf.CalibrationDir, propertySettings(conf))
}

// tlsOf is persyst.conf's mutual TLS between the agents.
func tlsOf(conf config.Config) mtls.Files {
	return mtls.Files{Cert: conf.TLSCert, Key: conf.TLSKey, CA: conf.TLSCA}
}

func propertySettings(c config.Config) properties.Settings {

	return properties.Settings{StrategyFile: c.StrategyFile, Thresholds: c.Thresholds, MinSeconds: c.DigestMinSeconds}
}

func runCollector(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst collector", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:16830", "gRPC address to listen on")
	self := fs.String("self", "", "this collector's address as the frontend names it (\"\": --listen)")
	db := fs.String("db", "/var/lib/persyst/collector.db", "SQLite database of results")
	name := fs.String("name", shortHostname(), "this collector's name")
	q := fs.Int("quantiles", 10, "quantile steps per property and cycle (10: deciles)")
	confPath := fs.String("config", config.DefaultPath, "persyst.conf (thresholds, strategy)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *self == "" {
		*self = *listen
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("collector", *name).Logger()
	a, err := startAgent(ctx, *confPath, *db, *listen)
	if err != nil {
		return err
	}
	defer a.close()
	c, err := collectors.New(collectors.Config{Name: *name, Store: a.store, Q: *q, Log: log, Engine: a.engine, Self: *self, Dial: a.dial})
	if err != nil {
		return err
	}
	go c.Run(ctx)
	log.Info().Str("listen", a.ln.Addr().String()).Str("db", *db).Msg("persyst collector ready")
	return collectors.Serve(ctx, a.ln, c, a.serverOpt)
}

func runSync(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst sync", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:16833", "gRPC address to listen on")
	db := fs.String("db", "/var/lib/persyst/sync.db", "SQLite database of the merged results")
	name := fs.String("name", shortHostname(), "this sync agent's name")
	cols := fs.String("collectors", "", "collectors asked for a job's parts when its batch host names none: name=host:port,...")
	q := fs.Int("quantiles", 10, "quantile steps per property and cycle (10: deciles)")
	confPath := fs.String("config", config.DefaultPath, "persyst.conf (thresholds, strategy)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var addrs []string
	if *cols != "" {
		m, err := collectors.ParseCollectors(*cols)
		if err != nil {
			return err
		}
		for _, a := range m {
			addrs = append(addrs, a)
		}
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("sync", *name).Logger()
	a, err := startAgent(ctx, *confPath, *db, *listen)
	if err != nil {
		return err
	}
	defer a.close()
	s, err := collectors.NewSync(collectors.SyncConfig{Name: *name, Store: a.store, Q: *q, Collectors: addrs, Dial: a.dial, Engine: a.engine, Log: log})
	if err != nil {
		return err
	}
	defer s.Close()
	log.Info().Str("listen", a.ln.Addr().String()).Str("db", *db).Msg("persyst sync agent ready")
	return collectors.Serve(ctx, a.ln, s, a.serverOpt)
}

// agent is what a collector and a sync agent start with.
type agent struct {
	store     *store.Store
	engine    *properties.Engine
	dial      grpc.DialOption
	serverOpt grpc.ServerOption
	ln        net.Listener
}

func (a *agent) close() {
	a.store.Close()
	a.ln.Close()
}

// startAgent reads persyst.conf, loads the property engine, opens the store and binds
// the listener.
func startAgent(ctx context.Context, confPath, db, listen string) (*agent, error) {
	conf, err := config.Load(confPath, confPath == config.DefaultPath)
	if err != nil {
		return nil, err
	}
	engine, err := agentEngine(confPath, conf)
	if err != nil {
		return nil, err
	}
	files := tlsOf(conf)
	serverOpt, err := files.ServerOption()
	if err != nil {
		return nil, err
	}
	dial, err := files.DialOption()
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, db, store.Options{})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listen %s: %w", listen, err)
	}
	return &agent{store: st, engine: engine, dial: dial, serverOpt: serverOpt, ln: ln}, nil
}

func runFrontend(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst frontend", flag.ContinueOnError)
	cols := fs.String("collectors", "", "collectors: name=host:port,name=host:port (added to the tree's Addr=)")
	syncs := fs.String("syncs", "", "sync agents of the tree: name=host:port,... (added to the tree's Addr=)")
	nodeList := fs.String("nodes", "", "the compute nodes (Slurm hostlist), in topology order (without a tree)")
	topology := fs.String("topology", "", "Slurm topology.conf: leaf switches are the collectors, upper switches the sync agents")
	treeFile := fs.String("tree", "", "persyst's agent tree description (Frontend=, Sync=, Collector= lines); default: the tree lines of persyst.conf")
	nodeAddr := fs.String("node-addr", "%n:16831", "a node daemon's gRPC address (%n: node name)")
	nodeAddrs := fs.String("node-addrs", "", "explicit node daemon addresses: node=host:port,... (override --node-addr)")
	lmax := fs.Int("lmax", 0, "l_max, the load one collector takes, in nodes (0: a collector's own nodes)")
	loads := fs.String("loads", "measured", "what a job is charged: measured (the share of its maximum its nodes sent, once reported) or max (every property on every device, as PerSyst assumed)")
	listen := fs.String("listen", "", "address where the frontend merges jobs split over collectors without a live sync agent in common (\"\": such jobs' digests cover their batch host)")
	db := fs.String("db", "", "SQLite database of the per-cycle results merged at the frontend (\"\": not kept)")
	cycle := fs.Duration("cycle", time.Minute, "balancing cycle")
	confPath := fs.String("config", config.DefaultPath, "persyst.conf (the job map's source, the tree)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *loads != "measured" && *loads != "max" {
		return fmt.Errorf("--loads %q: want measured or max", *loads)
	}
	conf, err := config.Load(*confPath, *confPath == config.DefaultPath)
	if err != nil {
		return err
	}
	collectorsMap, syncMap := map[string]string{}, map[string]string{}
	if *cols != "" {
		if collectorsMap, err = collectors.ParseCollectors(*cols); err != nil {
			return err
		}
	}
	if *syncs != "" {
		if syncMap, err = collectors.ParseCollectors(*syncs); err != nil {
			return fmt.Errorf("--syncs: %w", err)
		}
	}
	var tree *balance.Tree
	var nodes []string
	switch {
	case *topology != "" && *treeFile != "":
		return errors.New("--topology and --tree: give one")
	case *topology != "" || *treeFile != "":
		path, parse := *topology, balance.ParseTopologyConf
		if *treeFile != "" {
			path, parse = *treeFile, balance.ParseTreeSpec
		}
		tf, err := os.Open(path)
		if err != nil {
			return err
		}
		tree, err = parse(tf)
		tf.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	case conf.Tree != "":
		if tree, err = balance.ParseTreeSpec(strings.NewReader(conf.Tree)); err != nil {
			return fmt.Errorf("%s: %w", *confPath, err)
		}
	default:
		if nodes, err = jobmap.ExpandHostlist(*nodeList); err != nil || len(nodes) == 0 {
			return fmt.Errorf("--nodes %q: %v", *nodeList, err)
		}
	}
	if tree != nil {
		// Addresses from the tree description, unless given on the command line.
		for _, c := range tree.Collectors() {
			if a, ok := tree.Addr(c); ok && collectorsMap[c] == "" {
				collectorsMap[c] = a
			}
		}
		for _, sy := range tree.Agents(balance.KindSync) {
			if a, ok := tree.Addr(sy); ok && syncMap[sy] == "" {
				syncMap[sy] = a
			}
		}
	}
	var st *store.Store
	if *db != "" {
		if st, err = store.Open(ctx, *db, store.Options{}); err != nil {
			return err
		}
		defer st.Close()
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("role", "frontend").Logger()
	jm, err := jobmap.FromConfig(conf, log)
	if err != nil {
		return err
	}
	explicit := map[string]string{}
	if *nodeAddrs != "" {
		if explicit, err = collectors.ParseCollectors(*nodeAddrs); err != nil {
			return fmt.Errorf("--node-addrs: %w", err)
		}
	}
	dial, err := tlsOf(conf).DialOption()
	if err != nil {
		return err
	}
	engine, err := agentEngine(*confPath, conf)
	if err != nil {
		return err
	}
	var ln net.Listener
	if *listen != "" {
		if ln, err = net.Listen("tcp", *listen); err != nil {
			return fmt.Errorf("--listen %s: %w", *listen, err)
		}
	}
	f, err := collectors.NewFrontend(collectors.FrontendConfig{
		Collectors: collectorsMap, Syncs: syncMap, Nodes: nodes, Log: log, Balance: balance.Config{LMax: *lmax}, AssumeMaxLoads: *loads == "max", Dial: dial,
		Self: *listen, Engine: engine, Tree: tree, Store: st,
		NodeAddr: func(n string) string {
			if a, ok := explicit[n]; ok {
				return a
			}
			return strings.ReplaceAll(*nodeAddr, "%n", n)
		},
		Jobs: func(ctx context.Context) ([]balance.Job, error) {
			running, err := jm.Running(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]balance.Job, 0, len(running))
			for _, j := range running {
				out = append(out, balance.Job{ID: strconv.FormatUint(uint64(j.JobID), 10), Nodes: j.Nodes})
			}
			return out, nil
		},
	})
	if err != nil {
		return err
	}
	defer f.Close()
	if ln != nil {
		serverOpt, err := tlsOf(conf).ServerOption()
		if err != nil {
			return err
		}
		go func() {
			if err := collectors.Serve(ctx, ln, f, serverOpt); err != nil {
				log.Error().Err(err).Msg("frontend service stopped")
			}
		}()
	}
	log.Info().Int("nodes", len(nodes)).Int("collectors", len(collectorsMap)).Msg("persyst frontend running")
	return f.Run(ctx, *cycle)
}

func runReport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst report [flags] JOBID", flag.ContinueOnError)
	node := fs.String("node", shortHostname(), "the job's batch host, whose daemon has the report")
	socket := fs.String("socket", socketDefault(), "daemon socket path (%n: node name)")
	asJSON := fs.Bool("json", false, "print the report as JSON (docs/digest.md)")
	width := fs.Int("width", 80, "columns of the text digest")
	db := fs.String("db", "", "read the job-wide report from a collector's database instead of the batch host's daemon")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("report: want one JOBID")
	}
	id, err := strconv.ParseUint(fs.Arg(0), 10, 32)
	if err != nil || id == 0 {
		return fmt.Errorf("report: bad JOBID %q", fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var r *digest.Report
	if *db != "" {
		st, err := store.Open(ctx, *db, store.Options{})
		if err != nil {
			return err
		}
		defer st.Close()
		if r, err = st.Report(ctx, uint32(id)); err != nil {
			return fmt.Errorf("report of job %d in %s: %w", id, *db, err)
		}
	} else if r, err = daemon.JobReport(ctx, strings.ReplaceAll(*socket, "%n", *node), uint32(id)); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Print(digest.Text(*r, digest.TextOptions{Width: *width, MaxFindings: 100}))
	return nil
}

func runJobs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst jobs", flag.ContinueOnError)
	node := fs.String("node", shortHostname(), "node whose daemon to ask (expands %n in --socket)")
	socket := fs.String("socket", socketDefault(), "daemon socket path (%n: node name)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the daemon")
	samples := fs.Uint("samples", 0, "print this job's samples on the node as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *samples != 0 {
		s, err := daemon.JobSamples(ctx, strings.ReplaceAll(*socket, "%n", *node), uint32(*samples))
		if err != nil {
			return err
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	n, jobs, err := daemon.ListJobs(ctx, strings.ReplaceAll(*socket, "%n", *node))
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Node string             `json:"node"`
			Jobs []daemon.JobStatus `json:"jobs"`
		}{n, jobs})
	}
	return daemon.WriteJobsTable(os.Stdout, n, jobs)
}

func runJobmap(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst jobmap [flags] [JOBID]", flag.ContinueOnError)
	confPath := fs.String("config", config.DefaultPath, "persyst.conf")
	restd := fs.String("slurmrestd", os.Getenv("PERSYST_SLURMRESTD"), "slurmrestd address (overrides SlurmRestd in persyst.conf): unix:/path or http(s)://host:port")
	asJSON := fs.Bool("json", false, "print JSON")
	running := fs.Bool("running", false, "only running jobs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("jobmap: at most one JOBID, got %v", fs.Args())
	}
	cfg, err := config.Load(*confPath, *confPath == config.DefaultPath)
	if err != nil {
		return err
	}
	if *restd != "" {
		cfg.SlurmRestd = *restd
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).With().Timestamp().Logger()
	m, err := jobmap.FromConfig(cfg, log)
	if err != nil {
		return err
	}
	var jobs []*jobmap.Job
	switch {
	case fs.NArg() == 1:
		j, err := m.Job(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		jobs = []*jobmap.Job{j}
	case *running:
		jobs, err = m.Running(ctx)
	default:
		jobs, err = m.Jobs(ctx)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(jobs)
	}
	return jobmap.WriteTable(os.Stdout, jobs)
}

func runBalance(args []string) error {
	if len(args) == 0 || args[0] != "simulate" {
		return fmt.Errorf("usage: persyst balance simulate [flags]")
	}
	fs := flag.NewFlagSet("persyst balance simulate", flag.ContinueOnError)
	preset := fs.String("preset", "supermuc", "starting point: supermuc (9,216 nodes, 216 collectors, 12 sync agents) or large (100,000 nodes)")
	nodes := fs.Int("nodes", 0, "compute nodes (0: the preset's)")
	collectors := fs.Int("collectors", 0, "collectors (0: the preset's)")
	syncs := fs.Int("syncs", -1, "mid-level sync agents (-1: the preset's)")
	lmax := fs.Int("lmax-nodes", 0, "l_max in nodes' worth (0: the nodes under one collector)")
	minJobs := fs.Int("min-jobs", 0, "fewest concurrent jobs per cycle (0: the preset's)")
	maxJobs := fs.Int("max-jobs", 0, "most concurrent jobs per cycle (0: the preset's)")
	cycles := fs.Int("cycles", 0, "measured cycles (0: the preset's)")
	overflow := fs.String("overflow", "", "rest of a job's load above l_max: allow (Algorithm 2 as printed) or spill")
	placement := fs.String("placement", "", "how the simulated scheduler places jobs: tree, island or random")
	seed := fs.Int64("seed", 1, "random seed")
	loadShare := fs.String("load-share", "max", "what jobs are charged: max (PerSyst's assumed maximum), thesis (SuperMUC's measured 58.3% of it), a share 0.6 or a range 0.2-1 (each job uniform in it)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	var cfg balance.SimConfig
	switch *preset {
	case "supermuc":
		cfg = balance.SuperMUC()
	case "large":
		cfg = balance.LargeCluster()
	default:
		return fmt.Errorf("--preset %q: want supermuc or large", *preset)
	}
	setInt := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	setInt(&cfg.Nodes, *nodes)
	setInt(&cfg.Collectors, *collectors)
	setInt(&cfg.LMaxNodes, *lmax)
	setInt(&cfg.MinJobs, *minJobs)
	setInt(&cfg.MaxJobs, *maxJobs)
	setInt(&cfg.Cycles, *cycles)
	if *syncs >= 0 {
		cfg.Syncs = *syncs
	}
	if *overflow != "" {
		o, err := balance.ParseOverflow(*overflow)
		if err != nil {
			return err
		}
		cfg.Overflow = o
	}
	if *placement != "" {
		p, err := balance.ParsePlacement(*placement)
		if err != nil {
			return err
		}
		cfg.Placement = p
	}
	cfg.Seed = *seed
	var err error
	if cfg.MinLoadShare, cfg.MaxLoadShare, err = balance.ParseLoadShare(*loadShare); err != nil {
		return fmt.Errorf("--load-share: %w", err)
	}
	res, err := balance.Simulate(cfg)
	if err != nil {
		return err
	}
	return res.WriteText(os.Stdout)
}

func runCalibrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst calibrate", flag.ContinueOnError)
	dir := fs.String("dir", "", "where to write the calibration (default: CalibrationDir of persyst.conf)")
	seconds := fs.Float64("seconds", 10, "time budget of the benchmarks (the run ends within about twice that)")
	asJSON := fs.Bool("json", false, "print the calibration written, as JSON")
	nodeType := fs.String("node-type", "", "node type to calibrate (default: processor model and online CPUs, e.g. AMD_EPYC-2cpus)")
	confPath := fs.String("config", config.DefaultPath, "persyst.conf (CalibrationDir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("calibrate: unexpected arguments %q", fs.Args())
	}
	if !(*seconds > 0 && *seconds <= 3600) {
		return fmt.Errorf("calibrate: --seconds %v: want more than 0 and at most 3600", *seconds)
	}
	if *dir == "" {
		conf, err := config.Load(*confPath, *confPath == config.DefaultPath)
		if err != nil {
			return err
		}
		*dir = conf.CalibrationDir
	}
	res, err := calibrate.Run(ctx, calibrate.Options{Budget: time.Duration(*seconds * float64(time.Second)),
		NodeType: *nodeType, Dir: *dir, Progress: os.Stderr})
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res.Calibration)
	}
	fmt.Print(calibrate.Text(res))
	return nil
}

// uplinkOf is the daemon's view of an uplink: none when there is none (a nil pointer in
// an interface is not a nil interface).
func uplinkOf(u *uplink.Uplink) daemon.Uplink {
	if u == nil {
		return nil
	}
	return u
}
