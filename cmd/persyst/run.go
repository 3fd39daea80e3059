package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/standalone"
)

type runOptions struct {
	interval      time.Duration
	json          bool
	jsonFile      string
	level, config string
}

func (o *runOptions) flags(fs *flag.FlagSet) {
	fs.DurationVar(&o.interval, "interval", time.Minute, "measurement cycle (reads at multiples of it, and at the end)")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON (to stderr)")
	fs.StringVar(&o.jsonFile, "json-file", "", "write the result as JSON into this file instead (never mixed with the command's stderr)")
	fs.StringVar(&o.level, "log-level", "warn", "log level: debug, info, warn, error")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf (thresholds, strategy, calibration, MetricSource.<name>)")
}

// runRun is `persyst run -- CMD`: its exit code is CMD's.
func runRun(ctx context.Context, io stdio, args []string) int {
	var o runOptions
	fs, err := parseOptions("run [flags] -- CMD ARGS...", io, args, &o)
	if err != nil {
		return exitCode(io, err)
	}
	if o.interval < time.Second || o.interval > time.Hour {
		return exitCode(io, usagef("--interval %v: must be between 1s and 1h", o.interval))
	}
	lvl, err := zerolog.ParseLevel(o.level)
	if err != nil {
		return exitCode(io, usagef("--log-level: %v", err))
	}
	conf, err := loadConfig(o.config)
	if err != nil {
		return exitCode(io, usageError{err})
	}
	engine, _, err := properties.LoadConfigForNode(hostfs.New("/"), o.config, conf)
	if err != nil {
		return exitCode(io, usageError{err})
	}
	if err := measure.CheckEnable(conf.Sources, o.config, conf.SourceLines); err != nil {
		return exitCode(io, usageError{err})
	}
	var result *os.File
	if o.jsonFile != "" {
		// Made before the command runs, so that a bad path stops it first.
		if result, err = os.OpenFile(o.jsonFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644); err != nil {
			return exitCode(io, usageError{fmt.Errorf("--json-file: %w", err)})
		}
		defer result.Close()
	}
	opts := standalone.Options{
		Engine: engine, Node: shortHostname(), Interval: o.interval, JSON: o.json || result != nil, Sources: conf.Sources, SyscallBudget: conf.SyscallBudget,
		Stdin: io.in, Stdout: io.out, Stderr: io.err,
		Log: zerolog.New(zerolog.ConsoleWriter{Out: io.err, NoColor: true}).Level(lvl).With().Timestamp().Logger(),
	}
	if result != nil {
		opts.Result = result
	}
	code, err := standalone.Run(ctx, opts, fs.Args())
	if err != nil {
		if errors.Is(err, standalone.ErrNoCommand) {
			return exitCode(io, usageError{err})
		}
		fmt.Fprintln(io.err, "persyst:", err)
		return max(code, 1)
	}
	return code
}
