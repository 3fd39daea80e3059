package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/check"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/gres"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/jobmap"
)

type checkOptions struct {
	node, socket, config string
	json                 bool
	timeout              time.Duration
}

func (o *checkOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.node, "node", shortHostname(), "this node's Slurm node name")
	fs.StringVar(&o.socket, "socket", socketDefault(), "the daemon's socket, when plugstack.conf does not give the plugin's (%n: node name)")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for each command and request")
}

// errCheckFailed is the exit status of a check that found a failure (the lines said
// what).
var errCheckFailed = errors.New("check: persyst does not work on this node")

func runCheck(ctx context.Context, io stdio, args []string) error {
	var o checkOptions
	fs, err := parseOptions("check", io, args, &o)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("check: unexpected arguments %q", fs.Args())
	}
	conf, confErr := loadConfig(o.config)
	if confErr != nil {
		conf = config.Defaults()
	}
	// Slurm's commands are the job map's source even where slurmrestd's settings are wrong.
	srcs, err := jobmap.SourcesFromConfig(conf, zerolog.Nop())
	if err != nil {
		srcs = []jobmap.Source{jobmap.NewCLISource(nil, 0, zerolog.Nop())}
		confErr = errors.Join(confErr, err)
	}
	rs := check.Run(ctx, check.Options{Host: hostfs.New("/"), Node: o.node, Socket: strings.ReplaceAll(o.socket, "%n", o.node),
		ConfigPath: o.config, Config: conf, ConfigErr: confErr, Run: jobmap.ExecRunner, RunAll: gres.ExecRun, Sources: srcs, Timeout: o.timeout})
	if o.json {
		err = check.WriteJSON(io.out, o.node, rs)
	} else {
		err = check.Write(io.out, o.node, rs)
	}
	if err == nil && check.Failed(rs) {
		err = errCheckFailed
	}
	return err
}
