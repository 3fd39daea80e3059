package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
)

type reportOptions struct {
	node, socket, db string
	json             bool
	width            int
}

func (o *reportOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.node, "node", shortHostname(), "the job's batch host, whose daemon has the report")
	fs.StringVar(&o.socket, "socket", socketDefault(), "daemon socket path (%n: node name)")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON (docs/digest.md)")
	fs.IntVar(&o.width, "width", 80, "columns of the text digest")
	fs.StringVar(&o.db, "db", "", "read the job-wide report from a collector's database instead of the batch host's daemon")
}

func runReport(ctx context.Context, io stdio, args []string) error {
	var o reportOptions
	fs, err := parseOptions("report [flags] JOBID", io, args, &o)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("report: want one JOBID")
	}
	id, err := strconv.ParseUint(fs.Arg(0), 10, 32)
	if err != nil || id == 0 {
		return usagef("report: bad JOBID %q", fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var r *digest.Report
	if o.db != "" {
		st, err := store.Open(ctx, o.db, store.Options{})
		if err != nil {
			return err
		}
		defer st.Close()
		if r, err = st.Report(ctx, uint32(id)); err != nil {
			return fmt.Errorf("report of job %d in %s: %w", id, o.db, err)
		}
	} else if r, err = daemon.JobReport(ctx, strings.ReplaceAll(o.socket, "%n", o.node), uint32(id)); err != nil {
		return err
	}
	if o.json {
		return writeJSON(io.out, r)
	}
	_, err = fmt.Fprint(io.out, digest.Text(*r, digest.TextOptions{Width: o.width, MaxFindings: 100}))
	return err
}
