package main

import (
	"context"
	"flag"

	"github.com/persyst/persyst/balance"
)

func simulateFlags(fs *flag.FlagSet, o *balance.SimOptions) {
	fs.StringVar(&o.Preset, "preset", "supermuc", "starting point: supermuc (9,216 nodes, 216 collectors, 12 sync agents) or large (100,000 nodes)")
	fs.IntVar(&o.Nodes, "nodes", 0, "compute nodes (0: the preset's)")
	fs.IntVar(&o.Collectors, "collectors", 0, "collectors (0: the preset's)")
	fs.IntVar(&o.Syncs, "syncs", -1, "mid-level sync agents (-1: the preset's)")
	fs.IntVar(&o.LMaxNodes, "lmax-nodes", 0, "l_max in nodes' worth (0: the nodes under one collector)")
	fs.IntVar(&o.MinJobs, "min-jobs", 0, "fewest concurrent jobs per cycle (0: the preset's)")
	fs.IntVar(&o.MaxJobs, "max-jobs", 0, "most concurrent jobs per cycle (0: the preset's)")
	fs.IntVar(&o.Cycles, "cycles", 0, "measured cycles (0: the preset's)")
	fs.StringVar(&o.Overflow, "overflow", "", "rest of a job's load above l_max: allow (Algorithm 2 as printed) or spill")
	fs.StringVar(&o.Placement, "placement", "", "how the simulated scheduler places jobs: tree, island or random")
	fs.Int64Var(&o.Seed, "seed", 1, "random seed")
	fs.StringVar(&o.LoadShare, "load-share", "max", "what jobs are charged: max (PerSyst's assumed maximum), thesis (SuperMUC's measured 58.3% of it), a share 0.6 or a range 0.2-1 (each job uniform in it)")
}

func runBalance(_ context.Context, io stdio, args []string) error {
	if len(args) == 0 || args[0] != "simulate" {
		return usagef("usage: persyst balance simulate [flags]")
	}
	var o balance.SimOptions
	fs := flagSet("balance simulate", io)
	simulateFlags(fs, &o)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, err := o.Config()
	if err != nil {
		return usageError{err}
	}
	res, err := balance.Simulate(cfg)
	if err != nil {
		return err
	}
	return res.WriteText(io.out)
}
