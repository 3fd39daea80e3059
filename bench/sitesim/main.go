// Command sitesim plays a site for bench/site.sh.
//
//	sitesim fill -db PATH -jobs N [-days D] [-seed S]
//	    stores N finished jobs of the last D days (sitesim.Fill: several clusters whose
//	    ids meet, every end state, accounts, users, partitions, CPU and GPU jobs) into the
//	    persyst database at PATH, and prints a line with what it stored and how fast.
//	sitesim certs -dir D -nodes N [-prefix s] -collectors K [-hostile H]
//	    a CA and the tree's certificates (persyst://ROLE/NAME): the frontend's, K
//	    collectors' (c1..cK), N nodes' (s00001...) and H hostile nodes' (h00001...), as
//	    TreeAuth=tls deploys them.
//	sitesim live -nodes N -cpus C -cycle D -port-base P -collector ADDR [-certs D]
//	    -restd PATH -addrs FILE -stats FILE [-cluster NAME]
//	    plays N nodes (sitesim.Live) until SIGTERM, serving the fake slurmrestd on the unix
//	    socket PATH; writes the nodes' addresses (node=host:port lines) to FILE first, and
//	    its counts as JSON to -stats at the end.
//	sitesim slurm -restd PATH [-cluster NAME]
//	    serves the fake slurmrestd alone, for several live processes (-slurm PATH), until
//	    SIGTERM.
//	sitesim hostile -nodes H -collector ADDR -frontend ADDR -certs D -victim NODE
//	    -jobs FIRST-LAST -cycle D -stats FILE
//	    plays H hostile nodes (sitesim.Hostile: malformed, oversized, other nodes'
//	    records, a job not theirs, forged reports, reconnection storms, connections
//	    without authentication) until SIGTERM, and writes its counts as JSON to FILE.
//	sitesim scrape URL...
//	    sums what the collectors at the URLs (their /metrics) refused, and their delay from
//	    a cycle's read to its summary stored, into one line.
//	sitesim count -stats FILE[,FILE...] -skip N [-hostile FILE] DB...
//	    what of the nodes' sends reached a database: the (job, cycle) pairs sent, those
//	    found in none of the DBs (lost), leaving out each job's last N cycles (in flight when
//	    the nodes stopped); and the reports the batch hosts handed over against those kept;
//	    with -hostile, the hostile nodes' counts, and what of theirs the DBs hold (cycles
//	    whose largest value is sitesim.Marker, jobs of Marker seconds).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/target"
	"github.com/persyst/persyst/collectors/treeauth/tlstest"
	"github.com/persyst/persyst/sitesim"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "fill":
		err = fill(ctx, os.Args[2:])
	case "certs":
		err = certs(os.Args[2:])
	case "live":
		err = live(ctx, os.Args[2:])
	case "slurm":
		err = slurm(ctx, os.Args[2:])
	case "count":
		err = count(ctx, os.Args[2:])
	case "hostile":
		err = hostile(ctx, os.Args[2:])
	case "scrape":
		err = scrape(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sitesim %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sitesim fill|certs|live [flags] (see bench/sitesim/main.go)")
	os.Exit(2)
}

func fill(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sitesim fill", flag.ExitOnError)
	db := fs.String("db", "", "persyst database (created if absent)")
	var o sitesim.FillOptions
	fs.IntVar(&o.Jobs, "jobs", 100000, "finished jobs to store")
	fs.IntVar(&o.Days, "days", 7, "the jobs ended within the last this many days")
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed")
	_ = fs.Parse(args)
	if *db == "" {
		return fmt.Errorf("-db PATH")
	}
	st, err := store.Open(ctx, *db, store.Options{})
	if err != nil {
		return err
	}
	t0 := time.Now()
	last := t0
	tot, err := sitesim.Fill(ctx, st, o, func(done int) {
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "sitesim fill: %d of %d jobs, %.0f jobs/s\n", done, o.Jobs, float64(done)/time.Since(t0).Seconds())
		}
	})
	secs := time.Since(t0).Seconds()
	// A MariaDB's bytes are its tables' (information_schema), a file's its size after
	// Close (the WAL is in the file then).
	var size int64
	if err == nil && target.IsMySQL(*db) {
		var s *store.Stats
		if s, err = st.Admin().Stats(ctx); err == nil {
			size = s.FileBytes
		}
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if !target.IsMySQL(*db) {
		fi, err := os.Stat(*db)
		if err != nil {
			return err
		}
		size = fi.Size()
	}
	fmt.Printf("fill: jobs=%d seconds=%.1f jobs_per_s=%.0f db_bytes=%d db_bytes_per_job=%.0f cpu_hours=%.0f gpu_hours=%.0f findings=%d\n",
		tot.Jobs, secs, float64(tot.Jobs)/secs, size, float64(size)/float64(max(tot.Jobs, 1)), tot.CPUHours, tot.GPUHours, len(tot.Findings))
	return nil
}

func certs(args []string) error {
	fs := flag.NewFlagSet("sitesim certs", flag.ExitOnError)
	dir := fs.String("dir", "", "where the certificates go")
	nodes := fs.Int("nodes", 0, "nodes")
	prefix := fs.String("prefix", "s", "node name prefix")
	cols := fs.Int("collectors", 1, "collectors")
	hostile := fs.Int("hostile", 0, "hostile nodes (h00001...)")
	_ = fs.Parse(args)
	if *dir == "" {
		return fmt.Errorf("-dir D")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	ca, err := tlstest.New("sitesim CA")
	if err != nil {
		return err
	}
	issue := func(role, name string) error {
		_, err := ca.Issue(*dir, name, "persyst://"+role+"/"+name)
		return err
	}
	if err := issue("frontend", "frontend"); err != nil {
		return err
	}
	for i := 1; i <= *cols; i++ {
		if err := issue("collector", fmt.Sprintf("c%d", i)); err != nil {
			return err
		}
	}
	for i := 1; i <= *nodes; i++ {
		if err := issue("node", fmt.Sprintf("%s%05d", *prefix, i)); err != nil {
			return err
		}
	}
	for i := 1; i <= *hostile; i++ {
		if err := issue("node", fmt.Sprintf("h%05d", i)); err != nil {
			return err
		}
	}
	return nil
}

func hostile(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sitesim hostile", flag.ExitOnError)
	var o sitesim.HostileOptions
	fs.IntVar(&o.Nodes, "nodes", len(sitesim.HostileKinds), "hostile nodes (node i plays kind i of "+strings.Join(sitesim.HostileKinds, ", ")+")")
	fs.StringVar(&o.Collector, "collector", "", "the collector they push to")
	fs.StringVar(&o.Frontend, "frontend", "", "the frontend they send forged reports to")
	fs.StringVar(&o.CertDir, "certs", "", "their certificates (sitesim certs -hostile)")
	fs.StringVar(&o.Victim, "victim", "s00001", "a real node whose name they push under")
	jobs := fs.String("jobs", "", "the real jobs they name, FIRST-LAST")
	fs.DurationVar(&o.Cycle, "cycle", 2*time.Second, "the compressed cycle")
	statsFile := fs.String("stats", "", "file to write the counts to, as JSON, at the end")
	_ = fs.Parse(args)
	var first, last uint32
	if _, err := fmt.Sscanf(*jobs, "%d-%d", &first, &last); err != nil || first == 0 || last < first {
		return fmt.Errorf("-jobs FIRST-LAST: %q", *jobs)
	}
	for j := first; j <= last; j++ {
		o.Jobs = append(o.Jobs, j)
	}
	o.Log = zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Str("role", "sitesim").Logger()
	h, err := sitesim.NewHostile(o)
	if err != nil {
		return err
	}
	if err := h.Run(ctx); err != nil {
		return err
	}
	js, err := json.Marshal(h.Stats())
	if err != nil {
		return err
	}
	return os.WriteFile(*statsFile, js, 0o644)
}

func scrape(ctx context.Context, urls []string) error {
	f, err := sitesim.Scrape(ctx, urls)
	if err != nil {
		return err
	}
	// A reason or stage never seen has no series: 0.
	for _, r := range []string{"malformed", "not_on_node", "full", "late", "no_slurm"} {
		f.RefusedPushes[r] += 0
	}
	for _, s := range []string{"handshake", "storm", "call"} {
		f.RefusedTree[s] += 0
	}
	fmt.Printf("scrape: stored=%.0f store_delay_p50_s=%g store_delay_p95_s=%g%s%s\n", f.Stored, f.DelayP50, f.DelayP95,
		pairs(" refused_", f.RefusedPushes), pairs(" tree_refused_", f.RefusedTree))
	return nil
}

// pairs writes m as " PREFIXkey=value" pairs, by key.
func pairs(prefix string, m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s%s=%.0f", prefix, k, m[k])
	}
	return b.String()
}

func live(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sitesim live", flag.ExitOnError)
	var o sitesim.LiveOptions
	fs.IntVar(&o.Nodes, "nodes", 100, "simulated nodes")
	fs.IntVar(&o.CPUs, "cpus", 16, "CPUs per node")
	fs.DurationVar(&o.Cycle, "cycle", 2*time.Second, "the compressed cycle")
	fs.IntVar(&o.PortBase, "port-base", 20000, "node i serves routes on 127.0.0.1:port-base+i")
	fs.StringVar(&o.Collector, "collector", "", "the collector before the frontend's routes")
	fs.StringVar(&o.CertDir, "certs", "", "the nodes' certificates (sitesim certs); none: plain")
	fs.StringVar(&o.Cluster, "cluster", "sim", "the cluster's name in the job map")
	fs.IntVar(&o.First, "first", 0, "the number of the first node (its name is first+1)")
	var base uint
	fs.UintVar(&base, "job-base", 1000, "the first job id")
	fs.StringVar(&o.Slurm, "slurm", "", "the fake slurmrestd of another process (sitesim slurm) to announce jobs to")
	restd := fs.String("restd", "", "unix socket of the fake slurmrestd to serve (without -slurm)")
	addrs := fs.String("addrs", "", "file to write the nodes' addresses to (node=host:port lines)")
	statsFile := fs.String("stats", "", "file to write the counts to, as JSON, at the end")
	_ = fs.Parse(args)
	o.JobBase = uint32(base)
	o.Log = zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Str("role", "sitesim").Logger()
	l, err := sitesim.NewLive(o)
	if err != nil {
		return err
	}
	var b strings.Builder
	for i, n := range l.Names() {
		fmt.Fprintf(&b, "%s=%s\n", n, l.Addr(i))
	}
	if err := os.WriteFile(*addrs, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if o.Slurm == "" {
		stop, err := serveSlurm(*restd, l.Slurm())
		if err != nil {
			return err
		}
		defer stop()
	}
	// SIGTERM stops the cycles; the nodes and Slurm stay for three more, so that what
	// is on its way (the last cycles, the final reports) reaches the tree.
	run, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-ctx.Done()
		l.Stop()
		time.Sleep(3 * o.Cycle)
		cancel()
	}()
	if err := l.Run(run); err != nil {
		return err
	}
	js, err := json.Marshal(l.Stats())
	if err != nil {
		return err
	}
	return os.WriteFile(*statsFile, js, 0o644)
}

// serveSlurm serves a fake slurmrestd on the unix socket path.
func serveSlurm(path string, h http.Handler) (stop func(), err error) {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { srv.Close() }, nil
}

func slurm(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sitesim slurm", flag.ExitOnError)
	restd := fs.String("restd", "", "unix socket to serve")
	cluster := fs.String("cluster", "sim", "the cluster's name")
	_ = fs.Parse(args)
	stop, err := serveSlurm(*restd, sitesim.NewSlurm(*cluster))
	if err != nil {
		return err
	}
	defer stop()
	<-ctx.Done()
	return nil
}

func count(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sitesim count", flag.ExitOnError)
	statsFile := fs.String("stats", "", "the live run's counts")
	skip := fs.Int("skip", 2, "leave out each job's last N cycles (in flight at the end)")
	hostileFile := fs.String("hostile", "", "the hostile nodes' counts")
	_ = fs.Parse(args)
	st := sitesim.LiveStats{SentJobCycles: map[uint32][]int64{}}
	for _, f := range strings.Split(*statsFile, ",") {
		var part sitesim.LiveStats
		if err := readJSON(f, &part); err != nil {
			return err
		}
		st.ReportsKept += part.ReportsKept
		for j, ts := range part.SentJobCycles {
			st.SentJobCycles[j] = ts
		}
	}
	stored, err := sitesim.ReadStored(ctx, fs.Args())
	if err != nil {
		return err
	}
	sent, lost := sitesim.Lost(st.SentJobCycles, stored.Cycles, *skip)
	fmt.Printf("count: job_cycles_sent=%d job_cycles_lost=%d reports_sent=%d reports_kept=%d", sent, lost, st.ReportsKept, stored.Reports)
	if *hostileFile != "" {
		var h sitesim.HostileStats
		if err := readJSON(*hostileFile, &h); err != nil {
			return err
		}
		sent, refused, taken := h.Totals()
		fmt.Printf(" hostile_sent=%d hostile_refused=%d hostile_taken=%d hostile_stored=%d", sent, refused, taken, stored.Marked)
		for _, k := range sitesim.HostileKinds {
			fmt.Printf(" hostile_%s=%d/%d", k, h.Refused[k], h.Sent[k])
		}
	}
	fmt.Println()
	return nil
}

// readJSON reads the JSON file path into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
