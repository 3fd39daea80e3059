// Command loadgen plays the SPANK plugin for bench/daemon_load.sh: it sends a fake job's
// lifecycle events to a persyst daemon over its unix socket, with the wire protocol, as
// root.
//
//	loadgen start -socket S -node N -job J [-uid U] -pid P
//	    job_start, then step_start (step 0) carrying the job's cgroup directories as the
//	    plugin reports them (hierarchy key → job directory, found in Slurm's v1/v2 layout
//	    by jobcgroup.FS.Find); then moves process P into the cgroup the daemon answers,
//	    as the plugin does with a step's tasks. Prints that cgroup.
//	loadgen end -socket S -job J [-uid U]
//	    step_end (step 0, exit status 0), then job_end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/hostfs"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen start|end [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("loadgen "+os.Args[1], flag.ExitOnError)
	socket := fs.String("socket", "", "daemon socket")
	node := fs.String("node", "", "node name (Slurm's cgroup layout slurm_<node>)")
	job := fs.Uint("job", 0, "job id")
	uid := fs.Uint("uid", 0, "job owner")
	pid := fs.Int("pid", 0, "start: process to move into the daemon's cgroup")
	timeout := fs.Duration("timeout", 5*time.Second, "per request")
	_ = fs.Parse(os.Args[2:])
	if *socket == "" || *job == 0 {
		fmt.Fprintln(os.Stderr, "loadgen: -socket and -job are required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "start":
		err = start(*socket, *node, uint32(*job), uint32(*uid), *pid, *timeout)
	case "end":
		err = end(*socket, uint32(*job), uint32(*uid), *timeout)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func call(socket string, kind wire.Kind, e *wire.Event, timeout time.Duration) (*wire.Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	e.Time = time.Now()
	rep, err := wire.Call(ctx, socket, &wire.Request{V: wire.Version, Kind: kind, Event: e})
	if err != nil {
		return nil, fmt.Errorf("job %d: %s: %w", e.JobID, kind, err)
	}
	return rep, nil
}

func start(socket, node string, job, uid uint32, pid int, timeout time.Duration) error {
	if node == "" || pid <= 0 {
		return errors.New("start: -node and -pid are required")
	}
	cg, err := jobcgroup.Find(hostfs.New("/"), node, uid, job)
	if err != nil {
		return err
	}
	if len(cg) == 0 {
		return fmt.Errorf("job %d: no cgroup found in Slurm's layout for node %s, uid %d", job, node, uid)
	}
	if _, err := call(socket, wire.JobStart, &wire.Event{JobID: job, UID: uid, Persyst: wire.On}, timeout); err != nil {
		return err
	}
	rep, err := call(socket, wire.StepStart, &wire.Event{
		JobID: job, UID: uid, Persyst: wire.On, StepID: "0",
		NNodes: 1, LocalTasks: 1, TotalTasks: 1, Cgroups: cg,
	}, timeout)
	if err != nil {
		return err
	}
	if rep.Cgroup != "" {
		f, err := os.OpenFile(filepath.Join(rep.Cgroup, "cgroup.procs"), os.O_WRONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("job %d: join %s: %w", job, rep.Cgroup, err)
		}
		_, err = f.WriteString(strconv.Itoa(pid))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("job %d: move pid %d into %s: %w", job, pid, rep.Cgroup, err)
		}
	}
	fmt.Println(rep.Cgroup)
	return nil
}

func end(socket string, job, uid uint32, timeout time.Duration) error {
	status := 0
	if _, err := call(socket, wire.StepEnd, &wire.Event{JobID: job, UID: uid, Persyst: wire.On, StepID: "0", ExitStatus: &status}, timeout); err != nil {
		return err
	}
	_, err := call(socket, wire.JobEnd, &wire.Event{JobID: job, UID: uid, Persyst: wire.On, ExitStatus: &status}, timeout)
	return err
}
