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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sock := strings.ReplaceAll(o.socket, "%n", o.node)
	id, err := strconv.ParseUint(fs.Arg(0), 10, 32)
	if arr, task, ok := arrayTask(fs.Arg(0)); ok && o.db == "" {
		// An array task as users know it ("416_1"): the daemon knows its job id.
		if id, err = daemon.FindArrayTask(ctx, sock, arr, task); err != nil {
			return err
		}
	} else if err != nil || id == 0 {
		return usagef("report: bad JOBID %q (a job id, or ARRAYID_TASKID)", fs.Arg(0))
	}
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
	} else if r, err = daemon.JobReport(ctx, sock, uint32(id)); err != nil {
		return err
	}
	if o.json {
		return writeJSON(io.out, r)
	}
	_, err = fmt.Fprint(io.out, digest.Text(*r, digest.TextOptions{Width: o.width, MaxFindings: 100}))
	return err
}

// arrayTask parses an array task's name, "416_1".
func arrayTask(s string) (arr, task uint32, ok bool) {
	a, t, found := strings.Cut(s, "_")
	x, err1 := strconv.ParseUint(a, 10, 32)
	y, err2 := strconv.ParseUint(t, 10, 32)
	if !found || err1 != nil || err2 != nil || x == 0 {
		return 0, 0, false
	}
	return uint32(x), uint32(y), true
}
