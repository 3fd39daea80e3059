// Package daemon is the persyst node daemon: it receives job lifecycle events from the
// SPANK plugin over a unix socket (root and the Slurm user only, checked with
// SO_PEERCRED), keeps a registry of the node's jobs that survives restarts, measures each
// job in its cgroups, and writes its digest at its end.
package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/sdnotify"
	"github.com/rs/zerolog"
)

// Config is the daemon's configuration.
type Config struct {
	Node      string // this node's Slurm name
	Socket    string // unix socket path
	StateDir  string // registry state (e.g. /run/persyst/<node>)
	SlurmUser string // besides root, this user may send events ("" or "root": root only)
	// AdminGroup's members read every job's data (name or gid; "": none). Other users
	// read their own jobs only.
	AdminGroup string
	Retention  time.Duration
	// Measure configures job measurement (its Root defaults to "/").
	Measure MeasureConfig
	// Reports, if set, is made to give users their reports over the network once the
	// daemon serves.
	Reports *ReportGate
	// Metrics is where Prometheus metrics are served (Addr "": nowhere; they are counted
	// anyway).
	Metrics MetricsConfig
}

// MetricsConfig says where an agent serves its Prometheus metrics, to whom, and the
// version it reports.
type MetricsConfig struct {
	Addr    string
	Allow   []netip.Prefix
	Version string
	// WebConfig is the web configuration file of /metrics (exporter.ServeOptions).
	WebConfig string
	// JobLabels is what the per-job gauges name: "user,jobid", "jobid" ("": the same) or
	// "none" (no per-job gauges).
	JobLabels string
	// TreeRefused counts what the agent tree's authentication refused, by stage
	// (treeauth.Tree.RefusedBy; nil: no tree service).
	TreeRefused func() map[string]uint64
}

// Run serves until ctx is cancelled. READY is notified to systemd only after the socket is
// bound and the registry restored; the watchdog is fed if systemd asked for it.
func Run(ctx context.Context, cfg Config, log zerolog.Logger, clock Clock) error {
	if cfg.Node == "" {
		return fmt.Errorf("no node name (give --node)")
	}
	// Job data is private: the registry (jobs/) and the reports (reports/) are 0700
	// directories of 0600 files, root's alone (the socket serves them to each user, their
	// own jobs only). The state directory itself may also hold the socket.
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("state dir %s: %w", cfg.StateDir, err)
	}
	allowed, adminGID, err := identities(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return fmt.Errorf("socket dir %s: %w", filepath.Dir(cfg.Socket), err)
	}
	reg, err := OpenRegistry(RegistryConfig{
		Node:      cfg.Node,
		Dir:       filepath.Join(cfg.StateDir, "jobs"),
		Retention: cfg.Retention,
		UserName:  newUserCache(),
	}, log)
	if err != nil {
		return err
	}
	if cfg.Measure.StateDir == "" {
		cfg.Measure.StateDir = cfg.StateDir
	}
	promReg := exporter.NewRegistry(exporter.RoleDaemon, cfg.Metrics.Version)
	cfg.Measure.Metrics = exporter.NewDaemon(promReg)
	if cfg.Metrics.TreeRefused != nil {
		exporter.TreeRefusals(promReg, cfg.Metrics.TreeRefused)
	}
	meas, err := NewMeasurer(cfg.Measure, reg, cfg.Node, log, clock)
	if err != nil {
		return err
	}
	if e, ok := cfg.Measure.Uplink.(interface {
		Explain(func(job uint32) (string, bool))
	}); ok {
		e.Explain(partWhy(reg, meas.meters, cfg.Measure.Digest.Engine))
	}
	if e, ok := cfg.Measure.Uplink.(interface{ NodePhases(func(job uint32) []byte) }); ok {
		e.NodePhases(partPhases(cfg.Node, meas.meters))
	}
	names, omit := snapshotMetrics(cfg.Metrics.JobLabels)
	exporter.NewSnapshot(promReg, names, meas.snapshot(reg, cfg.Measure.Uplink, len(names) > nodeMetrics), omit...)
	ln, err := Listen(cfg.Socket)
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if cfg.Metrics.Addr != "" {
		// Metrics never keep the daemon from following jobs: an address in use is retried.
		_ = exporter.Keep(wctx, exporter.ServeOptions{Addr: cfg.Metrics.Addr, Allow: cfg.Metrics.Allow, WebConfig: cfg.Metrics.WebConfig,
			Registry: promReg, Log: log}, 0)
	}
	srv := NewServer(ServerConfig{AllowedUIDs: allowed, AdminGID: adminGID, Metrics: cfg.Measure.Metrics, Host: &meas.host}, reg, meas, log, clock)
	rec := newReconciler(reg, meas, cfg.Measure.Digest.Facts, cfg.Node, log, clock)
	if cfg.Reports != nil {
		cfg.Reports.set(srv)
	}
	log.Info().Str("socket", cfg.Socket).Str("state_dir", cfg.StateDir).Msg("persyst daemon ready")
	sdnotify.Ready(log)
	measured := follow(wctx, reg, meas, rec, log)
	err = srv.Serve(ctx, ln)
	wcancel()
	<-measured
	sdnotify.Stopping()
	// The eBPF programs are detached all at once (each detach waits for the kernel's
	// grace period; at exit the kernel would close them one after another).
	if err := meas.env.Close(); err != nil {
		log.Warn().Err(err).Msg("measurement environment not closed cleanly")
	}
	log.Info().Msg("persyst daemon stopped")
	return err
}

// identities are who may send events besides root (the Slurm user) and the group whose
// members read every job (-1: none), from cfg's names.
func identities(cfg Config) (allowed []uint32, adminGID int, err error) {
	adminGID = -1
	if cfg.AdminGroup != "" {
		gid, err := config.LookupGID(cfg.AdminGroup)
		if err != nil {
			return nil, 0, fmt.Errorf("AdminGroup %q: %w", cfg.AdminGroup, err)
		}
		adminGID = int(gid)
	}
	if cfg.SlurmUser != "" && cfg.SlurmUser != "root" {
		uid, err := config.LookupUID(cfg.SlurmUser)
		if err != nil {
			return nil, 0, fmt.Errorf("SlurmUser %q: %w", cfg.SlurmUser, err)
		}
		allowed = append(allowed, uid)
	}
	return allowed, adminGID, nil
}

// follow starts what follows the node's jobs until ctx is done: systemd's watchdog, the
// kernel's log of OOM kills, the reconciler (jobs a previous daemon left running are
// checked with Slurm first, those that ended meanwhile get their digest late, and those
// still running are measured again) and the measurement cycle, whose end the returned
// channel tells. Jobs whose cgroups are still there are measured again at once, before
// the reconciler's first round (one lookup per job, serial): a restart's gap is the
// restart's.
func follow(ctx context.Context, reg *Registry, meas *Measurer, rec *reconciler, log zerolog.Logger) <-chan struct{} {
	go sdnotify.Watchdog(ctx, log)
	go meas.WatchOOM(ctx)
	mounts := meas.slurm.lookOnce()
	for _, j := range reg.Jobs() {
		if j.State == Running && j.Ended == nil {
			meas.Restore(j, mounts)
		}
	}
	go rec.run(ctx, func() {
		for _, j := range reg.Jobs() {
			if j.State == Running {
				meas.Prepare(j)
			}
		}
	})
	measured := make(chan struct{})
	go func() {
		defer close(measured)
		if err := meas.Run(ctx, pipeline.RealWait); err != nil {
			log.Error().Err(err).Msg("measurement stopped")
		}
	}()
	return measured
}

// newUserCache resolves uids to names once each.
func newUserCache() func(uint32) string {
	var mu sync.Mutex
	cache := map[uint32]string{}
	return func(uid uint32) string {
		mu.Lock()
		defer mu.Unlock()
		if n, ok := cache[uid]; ok {
			return n
		}
		n := ""
		if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
			n = u.Username
		}
		cache[uid] = n
		return n
	}
}
