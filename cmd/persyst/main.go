// Command persyst is the one binary of persyst, with a subcommand per role. Each
// subcommand is a file of this directory that parses its flags into an options struct
// and hands them to the package that does the work; nothing else happens here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/persyst/persyst/standalone"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// stdio is where a command reads and writes.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	// onFlags, if set, gets every flag set a command makes (the manual pages are written
	// from them).
	onFlags func(*flag.FlagSet)
}

// command is one subcommand.
type command struct {
	name, synopsis string
	run            func(ctx context.Context, io stdio, args []string) error
}

// commands are persyst's subcommands, in the order of the usage.
var commands = []command{
	{"daemon", "run the node daemon (as root, one per node)", runDaemon},
	{"run", "run a command measured like a job: persyst run [--interval D] [--json] -- CMD", nil},
	{"report", "a job's digest: persyst report [--json] [--node BATCHHOST] JOBID", runReport},
	{"collector", "a collector of the agent tree (gRPC): persyst collector --listen ADDR --db PATH", runCollector},
	{"sync", "a sync agent, merging jobs split over collectors: persyst sync --listen ADDR --db PATH", runSync},
	{"frontend", "balances jobs over collectors and pushes routes: persyst frontend --collectors c1=ADDR,... --nodes HOSTLIST", runFrontend},
	{"jobs", "show a node daemon's jobs", runJobs},
	{"check", "does persyst work on this node? each link from Slurm to the digest, and what to fix", runCheck},
	{"db", "the tree's database, for admins: persyst db stats|check|prune|vacuum|export --db PATH", runDb},
	{"site", "where the site's CPU and GPU hours went, by account, user, partition or QOS: persyst site [--period quarter] [--by user] [--csv|--json]", runSite},
	{"web", "a read-only web view of the jobs and the site's findings: persyst web --db PATH --user-header X-Remote-User", runWeb},
	{"mail", "Slurm's MailProg: appends the digest to end-of-job mails, then runs the mail program: persyst mail -s SUBJECT USER", runMail},
	{"jobmap", "show the cluster's jobs as persyst sees them (slurmrestd or Slurm's commands)", runJobmap},
	{"balance", "simulate: run PerSyst's job balancing on a synthetic cluster and job mix", runBalance},
	{"calibrate", "measure this node type's memory bandwidth and peak flops for the thresholds", runCalibrate},
	{"version", "print the version", runVersion},
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: persyst COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.synopsis)
	}
	b.WriteString("\nRun 'persyst COMMAND -h' for a command's flags.\n")
	return b.String()
}

func init() {
	// persyst run's child execs CMD from the main thread: perf counters opened on its pid
	// (unprivileged, inherit mode) are attached to that thread, and an exec from another
	// thread would end them with it.
	if len(os.Args) > 1 && os.Args[1] == standalone.ChildCommand {
		runtime.LockOSThread()
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == standalone.ChildCommand {
		// persyst run's child catches no signal: one forwarded to it before it execs CMD
		// ends it as it would end CMD.
		os.Exit(standalone.Child(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit code: 0, 1 for a failure, 2 for
// a usage error (a bad flag or argument), or what `persyst run`'s command exited with.
func run(ctx context.Context, args []string, io stdio) int {
	if len(args) == 0 {
		fmt.Fprint(io.err, usage())
		return 2
	}
	name, args := args[0], args[1:]
	switch name {
	case "run":
		return runRun(ctx, io, args)
	case manCommand: // hidden: the manual pages (make package)
		return exitCode(io, runMan(ctx, io, args))
	case "help", "-h", "--help":
		fmt.Fprint(io.out, usage())
		return 0
	case "--version":
		name = "version"
	}
	for _, c := range commands {
		if c.name == name && c.run != nil {
			return exitCode(io, c.run(ctx, io, args))
		}
	}
	fmt.Fprintf(io.err, "persyst: unknown command %q\n\n%s", name, usage())
	return 2
}

// usageError is a bad flag or argument: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usage error.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode prints err, if any, and returns the exit code for it.
func exitCode(io stdio, err error) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(io.err, "persyst:", err)
		return 2
	}
	fmt.Fprintln(io.err, "persyst:", err)
	return 1
}

func runVersion(_ context.Context, io stdio, args []string) error {
	if len(args) > 0 {
		return usagef("version: unexpected arguments %q", args)
	}
	fmt.Fprintln(io.out, "persyst", version)
	return nil
}
