package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/accounting"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
)

type reportOptions struct {
	node, socket, db, config string
	cluster                  string
	warn                     io.Writer // where a note on other jobs of the id goes
	json, sacct, html        bool
	width                    int
	wait                     time.Duration
}

func (o *reportOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.node, "node", "", "the job's batch host (default: this machine's daemon, else the batch host from the job map)")
	fs.StringVar(&o.socket, "socket", socketDefault(), "daemon socket path (%n: node name)")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON (docs/digest.md)")
	fs.IntVar(&o.width, "width", 80, "columns of the text digest")
	fs.StringVar(&o.db, "db", "", "read the job-wide report from a collector's database instead of the batch host's daemon")
	fs.StringVar(&o.cluster, "cluster", "", "with --db: the job of this cluster (where clusters share job ids; default: the newest job of the id)")
	fs.StringVar(&o.config, "config", config.DefaultFile(), "persyst.conf (to reach the batch host's daemon from another machine)")
	fs.DurationVar(&o.wait, "wait", 0, "wait up to this long for the report to be made (a job that is ending)")
	fs.BoolVar(&o.html, "html", false, "write the report as one self-contained HTML page (charts over the job's life, a CPU heat map)")
	fs.BoolVar(&o.sacct, "sacct", false, "render the digest from the summary kept in Slurm's accounting (sacct), for any past job")
}

// fromAccounting reads a job's report from the summary in Slurm's accounting.
func fromAccounting(ctx context.Context, job string) (*digest.Report, error) {
	tok, _, err := accounting.Read(ctx, jobmap.ExecRunner, job)
	if err != nil {
		return nil, err
	}
	cat, err := properties.DefaultCatalog()
	if err != nil {
		return nil, err
	}
	r, err := accounting.Decode(tok, func(key string) string {
		if p, ok := cat.Get(key); ok {
			return p.Recommendation
		}
		return ""
	})
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	return &r, nil
}

// runReport prints a job's report: from a collector's database (--db), from this
// machine's daemon when it knows the job, else from the batch host's daemon over the
// network (MUNGE-authenticated as the caller: the job's owner may read it).
func runReport(ctx context.Context, io stdio, args []string) error {
	var o reportOptions
	fs, err := parseOptions("report [flags] JOBID", io, args, &o)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("report: want one JOBID")
	}
	name := fs.Arg(0)
	id, err := strconv.ParseUint(name, 10, 32)
	arr, task, isArray := arrayTask(name)
	if !isArray && (err != nil || id == 0) {
		return usagef("report: bad JOBID %q (a job id, or ARRAYID_TASKID)", name)
	}
	if o.db != "" && isArray {
		return usagef("report --db: give the array task's job id")
	}
	if o.sacct && o.db != "" {
		return usagef("report: --sacct and --db exclude each other")
	}
	if o.html && o.json {
		return usagef("report: --html and --json exclude each other")
	}
	if o.cluster != "" && o.db == "" {
		return usagef("report: --cluster needs --db")
	}
	o.warn = io.err
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second+o.wait)
	defer cancel()
	deadline := time.Now().Add(o.wait)
	for {
		find := findReport
		if o.sacct {
			find = func(ctx context.Context, _ reportOptions, name string, _ uint64, _, _ uint32, _ bool) (*digest.Report, error) {
				return fromAccounting(ctx, name)
			}
		}
		r, err := find(ctx, o, name, id, arr, task, isArray)
		if err == nil {
			if o.json {
				return writeJSON(io.out, r)
			}
			if o.html {
				return writeHTML(ctx, io, o, r)
			}
			_, err = fmt.Fprint(io.out, digest.Text(*r, digest.TextOptions{Width: o.width, MaxFindings: 100}))
			return err
		}
		if time.Until(deadline) < 200*time.Millisecond {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// findReport looks for a job's report where o says.
func findReport(ctx context.Context, o reportOptions, name string, id uint64, arr, task uint32, isArray bool) (*digest.Report, error) {
	var r *digest.Report
	var err error
	switch {
	case o.db != "":
		if r, err = dbReport(ctx, o, uint32(id)); err != nil {
			return nil, err
		}
	default:
		node := o.node
		if node == "" {
			node = shortHostname()
		}
		sock := strings.ReplaceAll(o.socket, "%n", node)
		r, err = localReport(ctx, sock, name, uint32(id), arr, task, isArray)
		if errors.Is(err, errNotHere) {
			var rerr error
			if r, rerr = remoteReport(ctx, o, name); rerr != nil {
				return nil, fmt.Errorf("%v; from the job's batch host: %w", err, rerr)
			}
			err = nil
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

func dbReport(ctx context.Context, o reportOptions, id uint32) (*digest.Report, error) {
	st, err := store.Open(ctx, o.db, store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	j, err := dbJob(ctx, st, o, id)
	if err != nil {
		return nil, err
	}
	r, err := st.ReportAt(ctx, j.Key)
	if err != nil {
		return nil, fmt.Errorf("report of %s in %s: %w", j.Name(), o.db, err)
	}
	return r, nil
}

// dbJob is the job of the id that --db and --cluster name: the newest, and a note on the
// others where the id names several.
func dbJob(ctx context.Context, st *store.Store, o reportOptions, id uint32) (*store.Job, error) {
	js, err := st.Jobs(ctx, id)
	if err != nil {
		return nil, err
	}
	j, err := store.Choose(js, o.cluster)
	if err != nil {
		return nil, fmt.Errorf("job %d in %s: %w", id, o.db, err)
	}
	if len(js) > 1 && o.warn != nil {
		fmt.Fprintf(o.warn, "persyst report: %d jobs in %s have id %d; this is %s (--cluster picks another cluster's)\n", len(js), o.db, id, j.Name())
	}
	return j, nil
}

// errNotHere: this machine's daemon does not have the job (or there is none).
var errNotHere = errors.New("not on this machine")

// localReport asks this machine's daemon.
func localReport(ctx context.Context, sock, name string, id uint32, arr, task uint32, isArray bool) (*digest.Report, error) {
	if _, err := os.Stat(sock); err != nil {
		return nil, fmt.Errorf("%w: no persyst daemon at %s", errNotHere, sock)
	}
	if isArray {
		found, err := daemon.FindArrayTask(ctx, sock, arr, task)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errNotHere, err)
		}
		id = uint32(found)
	}
	r, err := daemon.JobReport(ctx, sock, id)
	if err != nil && (strings.Contains(err.Error(), "not known on this node") || strings.Contains(err.Error(), "report is on its batch host")) {
		return nil, fmt.Errorf("%w: %v", errNotHere, err)
	}
	return r, err
}

// nodeService reaches the node daemons' gRPC service as the caller (MUNGE or TLS, as
// persyst.conf says): the job's facts, each node's address, and the dial option.
type nodeService struct {
	job   *jobmap.Job
	addrs map[string]string
	port  int
	dial  grpc.DialOption
}

func dialNodes(ctx context.Context, o reportOptions, name string) (*nodeService, error) {
	conf, err := loadConfig(o.config)
	if err != nil {
		return nil, err
	}
	if conf.NodePort == 0 {
		return nil, fmt.Errorf("job %s: not on this machine, and the node daemons serve no reports (NodePort=0): run persyst report on the job's batch host", name)
	}
	log := zerolog.Nop()
	jm, err := jobmap.FromConfig(conf, log)
	if err != nil {
		return nil, err
	}
	job, err := jm.Job(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", name, err)
	}
	addrs, err := jm.NodeAddrs(ctx)
	if err != nil {
		return nil, fmt.Errorf("the nodes' addresses: %w", err)
	}
	opts, err := treeauth.FromConfig(conf, treeauth.Identity{Role: treeauth.User, Name: strconv.Itoa(os.Getuid())}, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.config, err)
	}
	auth, err := treeauth.New(opts)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w; run persyst report on its batch host", name, err)
	}
	dial, err := auth.DialOption(treeauth.Node)
	if err != nil {
		return nil, err
	}
	return &nodeService{job: job, addrs: addrs, port: conf.NodePort, dial: dial}, nil
}

// addr is a node daemon's service address.
func (n *nodeService) addr(node string) (string, error) {
	a, ok := n.addrs[node]
	if !ok {
		return "", fmt.Errorf("no address known for node %s", node)
	}
	return net.JoinHostPort(a, strconv.Itoa(n.port)), nil
}

// remoteReport asks the job's batch host's daemon (its first node for a job without a
// batch script), found with the job map, over the node daemons' gRPC service.
func remoteReport(ctx context.Context, o reportOptions, name string) (*digest.Report, error) {
	ns, err := dialNodes(ctx, o, name)
	if err != nil {
		return nil, err
	}
	job := ns.job
	host := o.node
	switch {
	case host != "":
	case job.BatchHost != "":
		host = job.BatchHost
	case len(job.Nodes) > 0:
		host = job.Nodes[0]
	default:
		return nil, fmt.Errorf("job %s has no nodes (yet)", name)
	}
	addr, err := ns.addr(host)
	if err != nil {
		return nil, err
	}
	return uplink.RemoteReport(ctx, addr, ns.dial, job.JobID)
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
