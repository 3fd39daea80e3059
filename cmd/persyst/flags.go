package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/spank/options"
)

// flagSet is a command's flags, printing its errors and usage to io.err.
func flagSet(name string, io stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("persyst "+name, flag.ContinueOnError)
	fs.SetOutput(io.err)
	if io.onFlags != nil {
		io.onFlags(fs)
	}
	return fs
}

// flagger is a command's options struct, which defines its flags.
type flagger interface{ flags(fs *flag.FlagSet) }

// parseOptions parses args into o; a bad flag is a usage error (the flag package has
// printed it), -h is flag.ErrHelp.
func parseOptions(name string, io stdio, args []string, o flagger) (*flag.FlagSet, error) {
	fs := flagSet(name, io)
	o.flags(fs)
	return fs, parse(fs, args)
}

// parse parses args; a bad flag is a usage error (the flag package has printed it).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err}
	}
	return nil
}

// siteStore is the store a command reads: --db where the user gave it, else persyst.conf's
// SiteStore (the frontend's SQLite file by default).
func siteStore(fs *flag.FlagSet, db string, conf config.Config) string {
	if setByUser(fs, "db") {
		return db
	}
	return conf.SiteStore
}

// setByUser says whether the command line set the flag name.
func setByUser(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// loadConfig reads persyst.conf; the default path may be missing (then: defaults).
func loadConfig(path string) (config.Config, error) {
	return config.Load(path, path == config.DefaultFile())
}

// newLogger is a JSON logger at level with the given context fields (key, value, ...).
func newLogger(w io.Writer, level string, kv ...string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, usagef("--log-level: %v", err)
	}
	c := zerolog.New(w).Level(lvl).With().Timestamp()
	for i := 0; i+1 < len(kv); i += 2 {
		c = c.Str(kv[i], kv[i+1])
	}
	return c.Logger(), nil
}

// socketDefault is the daemon's socket path template (%n: the node); PERSYST_SOCKET
// overrides it, as for the plugin.
func socketDefault() string {
	if s := os.Getenv("PERSYST_SOCKET"); s != "" {
		return s
	}
	return options.DefaultSocket
}

// shortHostname is this host's name without the domain (Slurm's node name, usually).
func shortHostname() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return h
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return nil
}
