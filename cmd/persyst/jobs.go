package main

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/persyst/persyst/daemon"
)

type jobsOptions struct {
	node, socket string
	json         bool
	timeout      time.Duration
	samples      uint
}

func (o *jobsOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.node, "node", shortHostname(), "node whose daemon to ask (expands %n in --socket)")
	fs.StringVar(&o.socket, "socket", socketDefault(), "daemon socket path (%n: node name)")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for the daemon")
	fs.UintVar(&o.samples, "samples", 0, "print this job's samples on the node as JSON")
}

func runJobs(ctx context.Context, io stdio, args []string) error {
	var o jobsOptions
	fs, err := parseOptions("jobs", io, args, &o)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("jobs: unexpected arguments %q", fs.Args())
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	socket := strings.ReplaceAll(o.socket, "%n", o.node)
	if o.samples != 0 {
		s, err := daemon.JobSamples(ctx, socket, uint32(o.samples))
		if err != nil {
			return err
		}
		return writeJSON(io.out, s)
	}
	n, jobs, err := daemon.ListJobs(ctx, socket)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(io.out, struct {
			Node string             `json:"node"`
			Jobs []daemon.JobStatus `json:"jobs"`
		}{n, jobs})
	}
	return daemon.WriteJobsTable(io.out, n, jobs)
}
