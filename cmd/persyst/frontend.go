package main

import (
	"context"
	"flag"
	"time"

	"github.com/persyst/persyst/collectors"
	"github.com/persyst/persyst/config"
)

func frontendFlags(fs *flag.FlagSet, o *collectors.FrontendOptions) (confPath *string) {
	fs.StringVar(&o.Collectors, "collectors", "", "collectors: name=host:port,name=host:port (added to the tree's Addr=)")
	fs.StringVar(&o.Syncs, "syncs", "", "sync agents of the tree: name=host:port,... (added to the tree's Addr=)")
	fs.StringVar(&o.Nodes, "nodes", "", "the compute nodes (Slurm hostlist), in topology order (without a tree)")
	fs.StringVar(&o.TopologyFile, "topology", "", "Slurm topology.conf: leaf switches are the collectors, upper switches the sync agents")
	fs.StringVar(&o.TreeFile, "tree", "", "persyst's agent tree description (Frontend=, Sync=, Collector= lines); default: the tree lines of persyst.conf")
	fs.StringVar(&o.NodeAddr, "node-addr", "%n:16831", "a node daemon's gRPC address (%n: node name)")
	fs.StringVar(&o.NodeAddrs, "node-addrs", "", "explicit node daemon addresses: node=host:port,... or @FILE of such pairs (override --node-addr)")
	fs.IntVar(&o.LMax, "lmax", 0, "l_max, the load one collector takes, in nodes (0: a collector's own nodes)")
	fs.StringVar(&o.Loads, "loads", "measured", "what a job is charged: measured (the share of its maximum its nodes sent, once reported) or max (every property on every device, as PerSyst assumed)")
	fs.StringVar(&o.Listen, "listen", "", "address where the frontend merges jobs split over collectors without a live sync agent in common (\"\": such jobs' digests cover their batch host)")
	fs.StringVar(&o.DB, "db", "", "the site's store, where the frontend keeps every job's report and the per-cycle results it merged: a SQLite file or mysql://USER@HOST/DATABASE?password-file=PATH (default: persyst.conf's SiteStore; \"\": none kept)")
	fs.DurationVar(&o.Cycle, "cycle", time.Minute, "balancing cycle")
	return fs.String("config", config.DefaultFile(), "persyst.conf (the job map's source, the tree)")
}

func runFrontend(ctx context.Context, io stdio, args []string) error {
	var o collectors.FrontendOptions
	fs := flagSet("frontend", io)
	confPath := frontendFlags(fs, &o)
	if err := parse(fs, args); err != nil {
		return err
	}
	db := setByUser(fs, "db")
	if o.Loads != "measured" && o.Loads != "max" {
		return usagef("--loads %q: want measured or max", o.Loads)
	}
	o.Name = "frontend"
	if err := agentOptions(io, &o.AgentOptions, *confPath, "role"); err != nil {
		return err
	}
	if !db {
		o.DB = o.Config.SiteStore
	}
	return collectors.RunFrontend(ctx, o)
}
