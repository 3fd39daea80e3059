// Command persyst is the one binary of persyst, with a subcommand per role.
// This file only wires flags to the packages that do the work.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/spank/options"
)

const usage = `usage: persyst COMMAND [flags]

commands:
  daemon     run the node daemon (as root, one per node)
  jobs       show a node daemon's jobs
  jobmap     show the cluster's jobs as persyst sees them (slurmrestd or Slurm's commands)
  version    print the version

Run 'persyst COMMAND -h' for a command's flags.
`

var version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "daemon":
		err = runDaemon(ctx, args)
	case "jobs":
		err = runJobs(ctx, args)
	case "jobmap":
		err = runJobmap(ctx, args)
	case "version", "--version":
		fmt.Println("persyst", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "persyst: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "persyst:", err)
		os.Exit(1)
	}
}

// socketFlag is the socket path template shared by daemon and clients; %n is the node.
func socketDefault() string {
	if s := os.Getenv("PERSYST_SOCKET"); s != "" {
		return s
	}
	return options.DefaultSocket
}

func shortHostname() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return h
}

func runDaemon(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst daemon", flag.ContinueOnError)
	node := fs.String("node", shortHostname(), "this node's Slurm node name")
	socket := fs.String("socket", socketDefault(), "unix socket path (%n: node name)")
	stateDir := fs.String("state-dir", "/run/persyst/%n", "directory for the job registry (%n: node name)")
	slurmUser := fs.String("slurm-user", "root", "Slurm user allowed to send events besides root")
	retention := fs.Duration("retention", 24*time.Hour, "how long ended jobs stay in the registry")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lvl, err := zerolog.ParseLevel(*level)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("node", *node).Logger()
	expand := func(s string) string { return strings.ReplaceAll(s, "%n", *node) }
	return daemon.Run(ctx, daemon.Config{
		Node:      *node,
		Socket:    expand(*socket),
		StateDir:  expand(*stateDir),
		SlurmUser: *slurmUser,
		Retention: *retention,
	}, log, time.Now)
}

func runJobs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst jobs", flag.ContinueOnError)
	node := fs.String("node", shortHostname(), "node whose daemon to ask (expands %n in --socket)")
	socket := fs.String("socket", socketDefault(), "daemon socket path (%n: node name)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the daemon")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	n, jobs, err := daemon.ListJobs(ctx, strings.ReplaceAll(*socket, "%n", *node))
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Node string        `json:"node"`
			Jobs []*daemon.Job `json:"jobs"`
		}{n, jobs})
	}
	return daemon.WriteJobsTable(os.Stdout, n, jobs)
}

func runJobmap(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("persyst jobmap [flags] [JOBID]", flag.ContinueOnError)
	confPath := fs.String("config", config.DefaultPath, "persyst.conf")
	restd := fs.String("slurmrestd", os.Getenv("PERSYST_SLURMRESTD"), "slurmrestd address (overrides SlurmRestd in persyst.conf): unix:/path or http(s)://host:port")
	asJSON := fs.Bool("json", false, "print JSON")
	running := fs.Bool("running", false, "only running jobs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("jobmap: at most one JOBID, got %v", fs.Args())
	}
	cfg, err := config.Load(*confPath, *confPath == config.DefaultPath)
	if err != nil {
		return err
	}
	if *restd != "" {
		cfg.SlurmRestd = *restd
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).With().Timestamp().Logger()
	m, err := jobmap.FromConfig(cfg, log)
	if err != nil {
		return err
	}
	var jobs []*jobmap.Job
	switch {
	case fs.NArg() == 1:
		j, err := m.Job(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		jobs = []*jobmap.Job{j}
	case *running:
		jobs, err = m.Running(ctx)
	default:
		jobs, err = m.Jobs(ctx)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(jobs)
	}
	return jobmap.WriteTable(os.Stdout, jobs)
}
