package main

import (
	"context"
	"flag"
	"os"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/jobmap"
)

type jobmapOptions struct {
	config, restd string
	json, running bool
}

func (o *jobmapOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf")
	fs.StringVar(&o.restd, "slurmrestd", os.Getenv("PERSYST_SLURMRESTD"), "slurmrestd address (overrides SlurmRestd in persyst.conf): unix:/path or http(s)://host:port")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.BoolVar(&o.running, "running", false, "only running jobs")
}

func runJobmap(ctx context.Context, io stdio, args []string) error {
	var o jobmapOptions
	fs, err := parseOptions("jobmap [flags] [JOBID]", io, args, &o)
	if err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("jobmap: at most one JOBID, got %v", fs.Args())
	}
	cfg, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	if o.restd != "" {
		cfg.SlurmRestd = o.restd
	}
	m, err := jobmap.FromConfig(cfg, zerolog.New(zerolog.ConsoleWriter{Out: io.err, NoColor: true}).With().Timestamp().Logger())
	if err != nil {
		return err
	}
	var jobs []*jobmap.Job
	switch {
	case fs.NArg() == 1:
		var j *jobmap.Job
		if j, err = m.Job(ctx, fs.Arg(0)); err == nil {
			jobs = []*jobmap.Job{j}
		}
	case o.running:
		jobs, err = m.Running(ctx)
	default:
		jobs, err = m.Jobs(ctx)
	}
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(io.out, jobs)
	}
	return jobmap.WriteTable(io.out, jobs)
}
