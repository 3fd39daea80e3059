package sitesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// LiveOptions say what site Live plays.
type LiveOptions struct {
	Nodes  int    // simulated nodes
	Prefix string // node names: Prefix and a 5-digit number ("s00001")
	CPUs   int    // per node: a node's records per cycle are CPUs × the CPU properties + the node properties
	// Cycle is the compressed measurement cycle (a 60 s cycle played every Cycle).
	Cycle time.Duration
	// PortBase: node i serves its route service on 127.0.0.1:PortBase+i.
	PortBase int
	// Collector is where nodes send before the frontend's first routes.
	Collector string
	// First is the number of the first node (0: s00001 is node 0), JobBase the first job
	// id: several processes play parts of one site (a process's open files bound the nodes
	// it can hold).
	First   int
	JobBase uint32
	// Slurm is where jobs are announced ("": Live serves its own, Slurm()).
	Slurm string
	// CertDir holds each node's certificate NAME.crt, key NAME.key and the CA NAME-ca.crt
	// (TreeAuth=tls, as deployed); "": plain connections (TreeAuth=none).
	CertDir string
	Cluster string
	Seed    uint64
	Log     zerolog.Logger
}

// LiveStats count what the simulated nodes did.
type LiveStats struct {
	Cycles      int64
	JobsStarted int64
	JobsEnded   int64
	Records     int64 // records handed to the uplinks of nodes the frontend routed to a collector
	Sends       int64 // such (job, node, cycle) sends
	// Local are the sends of jobs the frontend left on their node (one-node jobs: the
	// node's daemon aggregates them itself, as PerSyst does).
	Local         int64
	ReportsKept   int64 // final reports handed to the keeper by batch hosts
	EndedJobIDs   []uint32
	SentJobCycles map[uint32][]int64 // job → the cycle timestamps its nodes sent
}

// Live plays a site's nodes against a real collector tree: each node is a node daemon's
// uplink (collectors/uplink, the daemons' own code) with its own identity and route
// service, sending every cycle the property records of the jobs it runs, and, as a job's
// batch host, its final report at the job's end. Jobs of 1 to 64 nodes start on free
// nodes and end after 3 to 30 cycles. The records are synthetic (named so): values drawn
// from a fixed seed for the catalog's CPU and node properties. Slurm serves the jobs
// through Fake slurmrestd (Slurm).
type Live struct {
	o      LiveOptions
	names  []string
	links  []*uplink.Uplink
	slurm  *Slurm
	book   jobBook
	cpuKey []string
	nodKey []string
	tmpl   *generator

	stop  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	rng   *rand.Rand
	busy  []uint32 // node → its job (0: free)
	jobs  map[uint32]*liveJob
	next  uint32
	stats LiveStats
	recs  atomic.Int64
}

// simWatts is what a simulated node's processors draw.
const simWatts = 250

type liveJob struct {
	id         uint32
	first, n   int // nodes first..first+n-1
	start      time.Time
	cycles     int // cycles left
	kept       digest.Report
	user, acct string
}

// NewLive prepares the nodes (names, identities); Run starts them.
func NewLive(o LiveOptions) (*Live, error) {
	if o.Nodes <= 0 || o.CPUs <= 0 || o.Cycle <= 0 || o.PortBase <= 0 {
		return nil, fmt.Errorf("sitesim: live needs nodes, CPUs, a cycle and a port base")
	}
	if o.Prefix == "" {
		o.Prefix = "s"
	}
	cat, err := properties.DefaultCatalog()
	if err != nil {
		return nil, err
	}
	if o.JobBase == 0 {
		o.JobBase = 1000
	}
	l := &Live{o: o, stop: make(chan struct{}), rng: rand.New(rand.NewPCG(o.Seed+uint64(o.First), 0x11fe)), jobs: map[uint32]*liveJob{},
		next: o.JobBase, busy: make([]uint32, o.Nodes)}
	l.tmpl = &generator{o: FillOptions{Clusters: []string{o.Cluster + "x"}, Accounts: 40, Users: 400, Days: 1, Now: time.Now()}, rng: rand.New(rand.NewPCG(o.Seed, 7)), cat: cat,
		next: map[string]uint32{}, starts: map[string]map[uint32][]time.Time{}}
	for _, k := range cat.Keys() {
		p, _ := cat.Get(k)
		switch {
		case p.Applies != "":
		case p.Domain == properties.CPU && len(l.cpuKey) < 6:
			l.cpuKey = append(l.cpuKey, k)
		case p.Domain == properties.Node && len(l.nodKey) < 12:
			l.nodKey = append(l.nodKey, k)
		}
		if p.Finding && p.Applies == "" {
			l.tmpl.findable = append(l.tmpl.findable, p)
		}
	}
	for i := range o.Nodes {
		l.names = append(l.names, fmt.Sprintf("%s%05d", o.Prefix, o.First+i+1))
	}
	l.slurm = NewSlurm(o.Cluster)
	l.book = l.slurm
	if o.Slurm != "" {
		l.book = newSlurmClient(o.Slurm)
	}
	return l, nil
}

// Names are the nodes' names, in order; Addr is node i's route service.
func (l *Live) Names() []string { return l.names }
func (l *Live) Addr(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", l.o.PortBase+l.o.First+i)
}

// Slurm is the site's fake slurmrestd.
func (l *Live) Slurm() *Slurm { return l.slurm }

// Stop ends the cycles; the nodes stay (their last cycles and reports drain) until Run's
// ctx is done.
func (l *Live) Stop() { l.once.Do(func() { close(l.stop) }) }

// Run starts every node and plays cycles until Stop, and keeps the nodes until ctx is
// done.
func (l *Live) Run(ctx context.Context) error {
	for i, name := range l.names {
		var auth *treeauth.Tree
		if l.o.CertDir != "" {
			var err error
			auth, err = treeauth.New(treeauth.Options{Mode: treeauth.TLS, Self: treeauth.Identity{Role: treeauth.Node, Name: name},
				TLS: treeauth.TLSFiles{Cert: filepath.Join(l.o.CertDir, name+".crt"), Key: filepath.Join(l.o.CertDir, name+".key"),
					CA: filepath.Join(l.o.CertDir, name+"-ca.crt")}, Log: l.o.Log})
			if err != nil {
				return fmt.Errorf("node %s: %w", name, err)
			}
		}
		u, err := uplink.Start(ctx, uplink.Options{Collector: l.o.Collector, Listen: l.Addr(i), Node: name, Auth: auth,
			Retry: l.o.Cycle, Log: l.o.Log})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		l.links = append(l.links, u)
	}
	// The nodes' cycles keep the phase this process started in: on this one machine,
	// cycles at the wall clock's multiples would meet the frontend's balancing, which in
	// a site runs on a host of its own. A cycle's timestamp is when it was read.
	t := time.NewTicker(l.o.Cycle)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.stop:
			<-ctx.Done()
			return nil
		case now := <-t.C:
			l.cycle(now)
		}
	}
}

// cycle plays one cycle at now: jobs end (their batch hosts send their reports), new jobs
// start on free nodes, every running job's nodes send their records.
func (l *Live) cycle(now time.Time) {
	ts := now.Truncate(time.Second)
	l.mu.Lock()
	l.stats.Cycles++
	for id, j := range l.jobs {
		j.cycles--
		if j.cycles > 0 {
			continue
		}
		delete(l.jobs, id)
		for k := j.first; k < j.first+j.n; k++ {
			l.busy[k] = 0
		}
		j.kept.End, j.kept.Seconds = now, now.Sub(j.start).Seconds()
		l.book.end(id, now)
		l.links[j.first].Keep(id, j.kept)
		l.stats.JobsEnded++
		l.stats.ReportsKept++
		l.stats.EndedJobIDs = append(l.stats.EndedJobIDs, id)
	}
	l.startJobs(now)
	type send struct {
		node  int
		job   uint32
		start time.Time
	}
	var sends []send
	for i, id := range l.busy {
		if id != 0 {
			sn := send{node: i, job: id, start: ts}
			if j := l.jobs[id]; j != nil {
				sn.start = j.start
			}
			sends = append(sends, sn)
		}
	}
	l.mu.Unlock()
	for _, s := range sends {
		if l.links[s.node].Route(s.job) == "" {
			l.mu.Lock()
			l.stats.Local++
			l.mu.Unlock()
			continue
		}
		recs := l.records(s.node)
		// The job's energy on the node so far, as a node alone with its job sends it.
		energy := sample.Energy{Totals: map[string]float64{sample.EnergyPkgJoules: simWatts * max(ts.Sub(s.start).Seconds(), 0)},
			How: "RAPL (powercap): the node's, the job had it alone"}
		l.links[s.node].Send(s.job, ts, l.o.Cycle.Seconds(), recs, len(recs), energy)
		l.recs.Add(int64(len(recs)))
		l.mu.Lock()
		l.stats.Sends++
		if l.stats.SentJobCycles == nil {
			l.stats.SentJobCycles = map[uint32][]int64{}
		}
		if c := l.stats.SentJobCycles[s.job]; len(c) == 0 || c[len(c)-1] != ts.Unix() {
			l.stats.SentJobCycles[s.job] = append(c, ts.Unix())
		}
		l.mu.Unlock()
	}
}

// startJobs fills free nodes with new jobs (l.mu held).
func (l *Live) startJobs(now time.Time) {
	for i := 0; i < len(l.busy); {
		if l.busy[i] != 0 {
			i++
			continue
		}
		free := 0
		for i+free < len(l.busy) && l.busy[i+free] == 0 && free < 64 {
			free++
		}
		n := 1
		switch x := l.rng.Float64(); {
		case x < 0.7:
		case x < 0.95:
			n = 2 + l.rng.IntN(7)
		default:
			n = 16 + l.rng.IntN(49)
		}
		n = min(n, free)
		l.next++
		j := &liveJob{id: l.next, first: i, n: n, start: now, cycles: 3 + l.rng.IntN(28)}
		u := l.rng.IntN(400)
		j.user, j.acct = fmt.Sprintf("u%04d", u), fmt.Sprintf("acct%02d", u%40)
		kept := l.tmpl.job()
		kept.Report.JobID, kept.Report.Nodes, kept.Report.NNodes = j.id, l.names[i:i+n], n
		kept.Report.CPUs, kept.Report.GPUs, kept.Report.Start, kept.Report.ArrayJobID, kept.Report.ArrayTaskID = n*l.o.CPUs, 0, now, 0, nil
		j.kept = kept.Report
		for k := i; k < i+n; k++ {
			l.busy[k] = j.id
		}
		l.jobs[j.id] = j
		l.book.start(j, l.names[i:i+n], now)
		l.stats.JobsStarted++
		i += n
	}
}

// records are a node's records of one cycle.
func (l *Live) records(node int) []properties.Record {
	l.mu.Lock()
	seed := l.rng.Uint64()
	l.mu.Unlock()
	r := rand.New(rand.NewPCG(seed, uint64(node)))
	out := make([]properties.Record, 0, len(l.cpuKey)*l.o.CPUs+len(l.nodKey))
	for _, k := range l.cpuKey {
		for c := range l.o.CPUs {
			out = append(out, properties.Record{Key: k, Device: fmt.Sprintf("cpu%d", c), Value: 100 * r.Float64(), Severity: sev(r)})
		}
	}
	for _, k := range l.nodKey {
		out = append(out, properties.Record{Key: k, Device: "node", Value: 100 * r.Float64(), Severity: sev(r)})
	}
	return out
}

func sev(r *rand.Rand) float64 {
	if r.Float64() < 0.8 {
		return 0
	}
	return r.Float64()
}

// Stats returns what the nodes did so far.
func (l *Live) Stats() LiveStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Records = l.recs.Load()
	s.EndedJobIDs = append([]uint32(nil), s.EndedJobIDs...)
	return s
}
