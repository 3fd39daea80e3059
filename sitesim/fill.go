// Package sitesim plays a site for persyst's site side: Fill stores a week of a site's
// finished jobs (every end state, several clusters whose job ids meet, accounts, users,
// partitions, CPU and GPU jobs from 1 to 256 nodes, array tasks, findings of every kind
// the property catalog has) into a store, fast, so that the site's pages and `persyst
// report` can be measured and checked at a million jobs.
//
// The jobs are synthetic (named so): their reports have the shape and size of the node
// daemons' (every property of the catalog with its deciles, the findings with their
// names and advice), their figures are drawn from a fixed seed.
package sitesim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
)

// FillOptions say what Fill stores. Zero values take the defaults.
type FillOptions struct {
	Jobs     int      // jobs to store
	Clusters []string // default: alpha and beta, whose job ids overlap
	Accounts int      // default 40
	Users    int      // default 400 (each in one account)
	Days     int      // the jobs ended within the last Days days (default 7)
	Now      time.Time
	Seed     uint64
	Batch    int // jobs per transaction (default 500)
	// Reused is the share of jobs whose id an earlier job of the same cluster had (a
	// slurmctld that started again at FirstJobId; default 0.01).
	Reused float64
}

// Totals are what Fill stored, summed as the site's figures sum them: per job its CPUs
// (GPUs) × measured hours, and per finding those hours × the finding's share of the job.
type Totals struct {
	Jobs               int64
	CPUHours, GPUHours float64
	// Findings are per finding key: jobs and CPU-hours held.
	Findings map[string]FindingTotal
	// ByUser are the CPU-hours per user.
	ByUser map[string]float64
	// ByAccount are per account what its jobs held and requested, computed from their
	// facts and reports as the admin's view should (independently of the store's SQL).
	ByAccount map[string]AccountTotal
}

// AccountTotal is an account's sum: jobs, CPU- and GPU-hours, memory requested and
// unused (GiB × the jobs' hours; unused above the peak, memory_unused's value), and the
// time limits' CPU-hours requested and not run.
type AccountTotal struct {
	Jobs                               int64
	CPUHours, GPUHours                 float64
	MemGiBHours, MemUnusedGiBHours     float64
	LimitCPUHours, LimitUnusedCPUHours float64
	// EnergyKWh is the energy of the EnergyJobs whose report has one.
	EnergyKWh  float64
	EnergyJobs int64
}

// FindingTotal is one finding's sum.
type FindingTotal struct {
	Jobs     int64
	CPUHours float64
}

// endStates and their shares among jobs.
var endStates = []struct {
	state string
	share float64
	exit  int
}{
	{"COMPLETED", 0.70, 0}, {"FAILED", 0.10, 1}, {"CANCELLED", 0.08, 0}, {"TIMEOUT", 0.05, 0},
	{"OUT_OF_MEMORY", 0.04, 137}, {"PREEMPTED", 0.02, 0}, {"NODE_FAIL", 0.01, 0},
}

var partitions = []string{"cpu", "cpu", "cpu", "gpu", "bigmem", "debug"}
var qoses = []string{"normal", "normal", "normal", "high", "low"}

// Fill stores o.Jobs finished jobs into st, in batches, and returns their totals.
// progress, if set, is called after each batch with the jobs stored so far.
func Fill(ctx context.Context, st *store.Store, o FillOptions, progress func(done int)) (Totals, error) {
	if o.Jobs < 0 {
		return Totals{}, fmt.Errorf("sitesim: %d jobs", o.Jobs)
	}
	if len(o.Clusters) == 0 {
		o.Clusters = []string{"alpha", "beta"}
	}
	if o.Accounts <= 0 {
		o.Accounts = 40
	}
	if o.Users <= 0 {
		o.Users = 400
	}
	if o.Days <= 0 {
		o.Days = 7
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.Reused == 0 {
		o.Reused = 0.01
	}
	cat, err := properties.DefaultCatalog()
	if err != nil {
		return Totals{}, err
	}
	g := &generator{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x5157)), cat: cat, next: map[string]uint32{},
		starts: map[string]map[uint32][]time.Time{}}
	for _, k := range cat.Keys() {
		p, _ := cat.Get(k)
		if p.Finding {
			g.findable = append(g.findable, p)
		}
	}
	tot := Totals{Findings: map[string]FindingTotal{}, ByUser: map[string]float64{}, ByAccount: map[string]AccountTotal{}}
	batch := make([]store.Kept, 0, o.Batch)
	for done := 0; done < o.Jobs; {
		batch = batch[:0]
		for len(batch) < o.Batch && done+len(batch) < o.Jobs {
			k := g.job()
			batch = append(batch, k)
		}
		if err := st.KeepAll(ctx, batch); err != nil {
			return tot, err
		}
		for i := range batch {
			tot.add(&batch[i])
		}
		done += len(batch)
		if progress != nil {
			progress(done)
		}
	}
	return tot, nil
}

func (t *Totals) add(k *store.Kept) {
	r := &k.Report
	h := r.Seconds / 3600
	cpuH, gpuH := float64(r.CPUs)*h, float64(r.GPUs)*h
	t.Jobs++
	t.CPUHours += cpuH
	t.GPUHours += gpuH
	t.ByUser[k.Facts.User] += cpuH
	a := t.ByAccount[k.Facts.Account]
	a.Jobs++
	a.CPUHours += cpuH
	a.GPUHours += gpuH
	mem := float64(k.Facts.ReqMemMB) / 1024 * h
	a.MemGiBHours += mem
	for _, p := range r.Properties {
		if p.Key == "memory_unused" && p.Assessed {
			a.MemUnusedGiBHours += mem * (1 - min(max(p.Deciles[0], 0), 1))
		}
	}
	if lim := k.Facts.TimeLimit.Hours(); lim > 0 {
		a.LimitCPUHours += float64(r.CPUs) * lim
		a.LimitUnusedCPUHours += float64(r.CPUs) * max(lim-k.Facts.End.Sub(k.Facts.Start).Hours(), 0)
	}
	if e := r.Energy; e != nil {
		a.EnergyKWh += e.KWh
		a.EnergyJobs++
	}
	t.ByAccount[k.Facts.Account] = a
	for _, f := range r.Findings {
		ft := t.Findings[f.Key]
		ft.Jobs++
		ft.CPUHours += cpuH * f.TimeShare
		t.Findings[f.Key] = ft
	}
}

type generator struct {
	o        FillOptions
	rng      *rand.Rand
	cat      *properties.Catalog
	findable []*properties.Property
	next     map[string]uint32 // per cluster, the next job id
	// starts are the jobs' starts by cluster and id, so that a reused id starts well
	// apart from the id's earlier jobs (within minutes it would be the same job).
	starts map[string]map[uint32][]time.Time
}

// job draws one finished job.
func (g *generator) job() store.Kept {
	r := g.rng
	cluster := g.o.Clusters[r.IntN(len(g.o.Clusters))]
	if g.next[cluster] == 0 {
		g.next[cluster] = 1_000_000 // every cluster counts from the same id: they meet
	}
	id := g.next[cluster]
	g.next[cluster]++
	if r.Float64() < g.o.Reused && id > 1_000_100 {
		id = 1_000_000 + uint32(r.IntN(int(id-1_000_000-50))) // an id handed out again
	}
	user := r.IntN(g.o.Users)
	part := partitions[r.IntN(len(partitions))]
	nodes := 1
	switch x := r.Float64(); {
	case x < 0.70:
	case x < 0.90:
		nodes = 2 + r.IntN(7)
	case x < 0.99:
		nodes = 9 + r.IntN(56)
	default:
		nodes = 65 + r.IntN(192)
	}
	if part == "debug" {
		nodes = 1
	}
	cpus := nodes * 64
	if nodes == 1 {
		cpus = 1 << r.IntN(7) // 1..64
	}
	gpus := 0
	if part == "gpu" {
		gpus = nodes * 4
		if nodes == 1 {
			gpus = 1 + r.IntN(4)
		}
	}
	// Elapsed: a minute to a day, lognormal around half an hour; the end within the days.
	secs := math.Min(86400, math.Max(60, math.Exp(r.NormFloat64()*1.3+math.Log(1800))))
	span := time.Duration(g.o.Days) * 24 * time.Hour
	end := g.o.Now.Add(-time.Duration(r.Int64N(int64(span-time.Minute))) - time.Minute).Truncate(time.Second)
	start := end.Add(-time.Duration(secs) * time.Second)
	if g.starts[cluster] == nil {
		g.starts[cluster] = map[uint32][]time.Time{}
	}
	for _, t := range g.starts[cluster][id] {
		if d := start.Sub(t); d > -time.Hour && d < time.Hour {
			start, end = start.Add(-2*time.Hour), end.Add(-2*time.Hour)
		}
	}
	g.starts[cluster][id] = append(g.starts[cluster][id], start)
	es := g.endState()
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("%s%04d", cluster[:1], (int(id)*7+i)%10000)
	}
	rep := digest.Report{
		Schema: digest.SchemaVersion, JobID: id, Nodes: names, NNodes: nodes, CPUs: cpus, GPUs: gpus,
		Start: start, End: end, Seconds: secs, Samples: int(secs/60) + 1, MinSeconds: 300,
		EndState: &digest.EndState{State: es.state, ExitCode: es.exit},
	}
	if r.Float64() < 0.2 {
		task := uint32(r.IntN(1000))
		rep.ArrayJobID, rep.ArrayTaskID = id-uint32(r.IntN(50)), &task
	}
	rep.Properties, rep.Findings = g.results(gpus > 0)
	rep.Energy = energy(id, cpus, gpus, secs)
	facts := store.Job{
		Cluster: cluster, ID: id, User: fmt.Sprintf("u%04d", user), Account: fmt.Sprintf("acct%02d", user%g.o.Accounts),
		Partition: part, QOS: qoses[r.IntN(len(qoses))], State: es.state, Nodes: fmt.Sprintf("%s[%04d-%04d]", cluster[:1], 0, nodes-1),
		NNodes: nodes, CPUs: cpus, GPUs: gpus, ReqMemMB: int64(nodes) * 4096 * int64(1+r.IntN(64)),
		TimeLimit: time.Duration(math.Ceil(secs/3600)) * 2 * time.Hour, Start: start, End: end,
	}
	return store.Kept{Facts: facts, Report: rep}
}

// energy is a job's energy: 8 W a CPU and 300 W a GPU, for three jobs of five (the
// others' nodes have no counters); drawn from the job's figures alone, so that the
// generator's random draws stay as they were.
func energy(id uint32, cpus, gpus int, secs float64) *digest.Energy {
	if id%5 >= 3 {
		return nil
	}
	cpu, gpu := 8*float64(cpus)*secs, 300*float64(gpus)*secs
	e := &digest.Energy{Joules: cpu + gpu, KWh: (cpu + gpu) / 3.6e6, Parts: map[string]float64{"cpu": cpu}}
	if gpus > 0 {
		e.Parts["gpus"] = gpu
	}
	return e
}

func (g *generator) endState() (e struct {
	state string
	exit  int
}) {
	x := g.rng.Float64()
	for _, s := range endStates {
		if x < s.share {
			e.state, e.exit = s.state, s.exit
			return e
		}
		x -= s.share
	}
	e.state = "COMPLETED"
	return e
}

// results draws every property's result (deciles of a plausible shape) and 0 to 3
// findings among the properties that may be findings (GPU ones only for GPU jobs).
func (g *generator) results(gpu bool) (all, findings []properties.Result) {
	r := g.rng
	nf := 0
	switch x := r.Float64(); {
	case x < 0.45:
	case x < 0.80:
		nf = 1
	case x < 0.95:
		nf = 2
	default:
		nf = 3
	}
	found := map[string]bool{}
	for len(found) < nf {
		p := g.findable[r.IntN(len(g.findable))]
		if p.Applies == "gpus" && !gpu {
			continue
		}
		found[p.Key()] = true
	}
	for _, k := range g.cat.Keys() {
		p, _ := g.cat.Get(k)
		if p.Applies == "gpus" && !gpu {
			continue
		}
		lo := r.Float64() * 50
		d := make([]float64, 11)
		for i := range d {
			d[i] = math.Round((lo+float64(i)*r.Float64()*5)*1000) / 1000
		}
		if k == "memory_unused" { // one value per job: the peak's share of the request
			v := math.Round(r.Float64()*1000) / 1000
			for i := range d {
				d[i] = v
			}
		}
		res := properties.Result{Key: k, ID: p.ID, Name: p.Name, Unit: p.Unit, Domain: p.Domain, Assessed: true,
			Count: int64(1 + r.IntN(10000)), Deciles: d}
		if found[k] {
			share := math.Round((0.05+0.95*r.Float64())*1000) / 1000
			sev := 0.25 + 0.75*r.Float64()
			res.TimeShare, res.MeanSeverity, res.MaxSeverity = share, sev*share, sev
			res.Score, res.Finding, res.Recommendation = sev*share*p.Rank, true, p.Recommendation
			findings = append(findings, res)
		}
		all = append(all, res)
	}
	return all, findings
}
