package main

import (
	"context"
	"flag"

	"github.com/persyst/persyst/collectors"
	"github.com/persyst/persyst/config"
)

// agentFlags are the flags every agent of the tree has.
func agentFlags(fs *flag.FlagSet, o *collectors.AgentOptions, listen, db string) (confPath *string) {
	fs.StringVar(&o.Listen, "listen", listen, "gRPC address to listen on")
	fs.StringVar(&o.DB, "db", db, "SQLite database of results")
	fs.StringVar(&o.Name, "name", shortHostname(), "this agent's name")
	fs.IntVar(&o.Q, "quantiles", 10, "quantile steps per property and cycle (10: deciles)")
	return fs.String("config", config.DefaultFile(), "persyst.conf (thresholds, strategy, mutual TLS)")
}

// agentOptions finishes an agent's options after its flags were parsed.
func agentOptions(io stdio, o *collectors.AgentOptions, confPath, role string) error {
	conf, err := loadConfig(confPath)
	if err != nil {
		return err
	}
	o.Config, o.ConfigPath, o.Version = conf, confPath, version
	o.Log, err = newLogger(io.err, "info", role, o.Name)
	return err
}

func runCollector(ctx context.Context, io stdio, args []string) error {
	var o collectors.AgentOptions
	fs := flagSet("collector", io)
	confPath := agentFlags(fs, &o, "127.0.0.1:16830", "/var/lib/persyst/collector.db")
	self := fs.String("self", "", "this collector's address as the frontend names it (\"\": --listen)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := agentOptions(io, &o, *confPath, "collector"); err != nil {
		return err
	}
	return collectors.RunCollector(ctx, o, *self)
}

func runSync(ctx context.Context, io stdio, args []string) error {
	var o collectors.AgentOptions
	fs := flagSet("sync", io)
	confPath := agentFlags(fs, &o, "127.0.0.1:16833", "/var/lib/persyst/sync.db")
	cols := fs.String("collectors", "", "collectors asked for a job's parts when its batch host names none: name=host:port,...")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := agentOptions(io, &o, *confPath, "sync"); err != nil {
		return err
	}
	return collectors.RunSync(ctx, o, *cols)
}
