package main

import (
	"context"
	"flag"
	"path/filepath"
	"strings"
	"time"

	"github.com/persyst/persyst/accounting"
	"github.com/persyst/persyst/collectors/node"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/measure/redfish"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/gres"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/mailprog"
	"github.com/persyst/persyst/properties"
)

type daemonOptions struct {
	node, socket, stateDir, slurmUser, level, config, grpcListen string
	retention, cycle                                             time.Duration
	noMeasure                                                    bool
}

func (o *daemonOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.node, "node", shortHostname(), "this node's Slurm node name")
	fs.StringVar(&o.socket, "socket", socketDefault(), "unix socket path (%n: node name)")
	fs.StringVar(&o.stateDir, "state-dir", "/run/persyst/%n", "directory for the job registry (%n: node name)")
	fs.StringVar(&o.slurmUser, "slurm-user", "root", "Slurm user allowed to send events besides root")
	fs.DurationVar(&o.retention, "retention", 24*time.Hour, "how long ended jobs stay in the registry")
	fs.StringVar(&o.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&o.cycle, "cycle", 0, "measurement cycle (default: CycleSeconds from persyst.conf, else 60s)")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf")
	fs.BoolVar(&o.noMeasure, "no-measure", false, "record lifecycle events only; measure nothing")
	fs.StringVar(&o.grpcListen, "grpc-listen", "", "address of the gRPC service the frontend pushes routes to (\"\": none)")
}

func runDaemon(ctx context.Context, io stdio, args []string) error {
	var o daemonOptions
	_, err := parseOptions("daemon", io, args, &o)
	if err != nil {
		return err
	}
	conf, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	if o.cycle == 0 {
		o.cycle = conf.Cycle
	}
	if o.cycle < time.Second {
		return usagef("--cycle %v: the cycle must be at least 1s", o.cycle)
	}
	if err := measure.CheckEnable(conf.Sources, o.config, conf.SourceLines); err != nil {
		return err
	}
	log, err := newLogger(io.err, o.level, "node", o.node)
	if err != nil {
		return err
	}
	engine, cal, err := properties.LoadConfigForNode(hostfs.New("/"), o.config, conf)
	if err != nil {
		return err
	}
	log.Info().Str("node_type", cal.NodeType).Interface("calibration", cal.Values).Msg("properties loaded")
	jm, err := jobmap.FromConfig(conf, log)
	if err != nil {
		return err
	}
	auth, err := treeauth.Load(o.config, conf, treeauth.Identity{Role: treeauth.Node, Name: o.node}, log)
	if err != nil {
		return err
	}
	reports := &daemon.ReportGate{}
	peers, err := node.Start(ctx, node.Options{Node: o.node, Engine: engine, Conf: conf, Auth: auth, Listen: o.grpcListen,
		JobMap: jm, Reports: reports, Retry: o.cycle, Log: log})
	if err != nil {
		return err
	}
	expand := func(s string) string { return strings.ReplaceAll(s, "%n", o.node) }
	return daemon.Run(ctx, daemon.Config{
		Node: o.node, Socket: expand(o.socket), StateDir: expand(o.stateDir), SlurmUser: o.slurmUser, AdminGroup: conf.AdminGroup,
		Retention: o.retention, Reports: reports,
		Metrics: daemon.MetricsConfig{Addr: conf.DaemonMetricsAddr, Allow: conf.MetricsAllow, Version: version,
			WebConfig: conf.MetricsWebConfig, JobLabels: conf.MetricsJobLabels, TreeRefused: auth.RefusedBy},
		Measure: daemon.MeasureConfig{Cycle: o.cycle, Disabled: o.noMeasure, Uplink: peers, Enable: conf.Sources, SyscallBudget: conf.SyscallBudget, GPUIndex: conf.GPUIndex,
			GPUOrder:    gpuOrder(ctx, conf, o.node),
			PowercapDir: conf.PowercapDir, AMDGPUSysfs: conf.AMDGPUSysfs, NodeMeter: nodeMeter(conf, o.node, o.cycle),
			Digest: daemon.DigestConfig{Engine: engine, Facts: jm, Off: !conf.Digest, Append: appendDigest, Accounting: accountingWriter(conf),
				CO2PerKWh: conf.EnergyCO2PerKWh},
			Notice: noticeConfig(conf, expand(o.stateDir))},
	}, log, time.Now)
}

// gpuOrder asks slurmd for the node's GPUs in Slurm's order, unless persyst.conf's
// GPUIndex says otherwise (nil).
func gpuOrder(ctx context.Context, conf config.Config, node string) *gres.Order {
	if conf.GPUIndex != "" && conf.GPUIndex != "slurmd" {
		return nil
	}
	return gres.Start(ctx, gres.Options{Node: node, Host: hostfs.New("/")})
}

// nodeMeter is how the node's BMC is read (nil: persyst.conf names none).
func nodeMeter(conf config.Config, node string, cycle time.Duration) *redfish.Options {
	if conf.BMCRedfish == "" {
		return nil
	}
	return &redfish.Options{URL: strings.ReplaceAll(conf.BMCRedfish, "%n", node), User: conf.BMCUser, PasswordFile: conf.BMCPasswordFile,
		CAFile: conf.BMCCA, Timeout: min(conf.BMCTimeout, cycle/2), Interval: cycle}
}

// accountingWriter keeps jobs' summaries in Slurm's accounting with scontrol, unless
// persyst.conf turns it off.
func accountingWriter(conf config.Config) func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error) {
	if !conf.AccountingSummary {
		return nil
	}
	return func(ctx context.Context, job string, id uint32, existing string, r digest.Report) (string, error) {
		return accounting.Write(ctx, jobmap.ExecRunner, job, id, existing, r)
	}
}

// appendDigest writes a digest at the end of a job's output file, as the job's user.
func appendDigest(ctx context.Context, t digest.Target, text []byte) error {
	return digest.Append(ctx, t, text, digest.AppendOptions{})
}

// noticeConfig is when running jobs are told they hold what they do not use
// (persyst.conf's Notice keys), the notices sent kept under the daemon's state.
func noticeConfig(conf config.Config, stateDir string) daemon.NoticeConfig {
	n := daemon.NoticeConfig{IdleGPUAfter: conf.NoticeIdleGPUAfter, IdleCPUAfter: conf.NoticeIdleCPUAfter, Command: conf.NoticeCommand}
	if stateDir != "" {
		n.Dir = filepath.Join(stateDir, "notices")
	}
	if conf.NoticeMail {
		n.Mail = func(ctx context.Context, to, subject, body string) error {
			return mailprog.Mail(ctx, conf.MailProg, to, subject, body)
		}
	}
	return n
}
