package balance

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"time"
)

// SizeClass is one part of a synthetic job mix: with probability
// proportional to Weight a job gets a node count drawn log-uniformly from
// [Min, Max].
type SizeClass struct {
	Name     string
	Weight   float64
	Min, Max int
}

// SimConfig describes a synthetic cluster and job mix. The simulation is
// fully determined by the config (Seed included); only the measured
// balancing time varies between runs.
type SimConfig struct {
	Name       string
	Nodes      int // compute nodes
	Collectors int // collectors; nodes are split evenly over them
	Syncs      int // mid-level sync agents (0: collectors below the frontend)

	LoadPerNode int // properties per node (l_a); 0 means 1
	// LMaxNodes is l_max in nodes' worth (l_max = LMaxNodes × LoadPerNode);
	// 0 means the largest number of nodes under one collector.
	LMaxNodes int
	Overflow  Overflow
	// MinLoadShare and MaxLoadShare model measured loads: each job's nodes send a share
	// of the maximum load drawn uniformly from [MinLoadShare, MaxLoadShare] once per job
	// (an independent stream of the seed, so the jobs and their placement do not change),
	// and the job is charged that share, as persyst's frontend does once a collector has
	// reported it. Both 0 charge every job the maximum, as the PerSyst thesis assumes (§5.3).
	MinLoadShare, MaxLoadShare float64

	// Concurrent jobs per cycle: drawn uniformly from [MinJobs, MaxJobs];
	// fewer when the machine is full.
	MinJobs, MaxJobs int
	Mix              []SizeClass
	// Turnover is the share of running jobs that end between two cycles
	// (each job independently). 0 means 0.3.
	Turnover float64
	// WarmupCycles are simulated (jobs start and end, fragmenting the
	// machine) but not measured. Cycles are measured and averaged; 0 means 1.
	WarmupCycles int
	Cycles       int
	Seed         int64
	// Placement is how the simulated scheduler picks nodes.
	Placement Placement
}

// Placement is the simulated scheduler's node selection.
type Placement uint8

const (
	// PlaceTree imitates Slurm's topology/tree plugin: a job goes below the
	// lowest agent (collector, then sync agent, then frontend) with enough
	// free nodes, best fit (fewest free nodes) at that level; inside it, a
	// child that can take all that is left is chosen best fit, otherwise
	// the child with the most free nodes is filled first.
	PlaceTree Placement = iota
	// PlaceIsland imitates a scheduler that knows islands but not the
	// collectors' 43-node groups (LoadLeveler on SuperMUC): the job goes
	// below the lowest agent above the collectors that has enough free
	// nodes (best fit), and takes its lowest-numbered free nodes there.
	PlaceIsland
)

// String names the placement ("tree", "island").
func (p Placement) String() string {
	switch p {
	case PlaceTree:
		return "tree"
	case PlaceIsland:
		return "island"
	}
	return fmt.Sprintf("Placement(%d)", uint8(p))
}

// ParsePlacement reads "tree" or "island" (for the CLI).
func ParsePlacement(s string) (Placement, error) {
	switch s {
	case "tree", "":
		return PlaceTree, nil
	case "island":
		return PlaceIsland, nil
	}
	return 0, fmt.Errorf("placement %q: want tree or island", s)
}

// SuperMUC is the preset for the thesis's production setting (§7.2, §7.4):
// 9,216 thin nodes, one frontend, 12 mid-level sync agents, 216 collectors
// (42–43 nodes each, 18 per sync agent), ~150–190 concurrent jobs, averaged
// over 10 measured cycles after 20 warm-up cycles. l_max is a collector's
// own 43 nodes.
//
// The job mix is chosen to resemble Table 7.5 and SuperMUC's job classes
// (test/micro up to a few dozen nodes, general up to one 512-node island,
// large up to several islands): 6% one-node jobs, 85% "medium" jobs of 2–43
// nodes (≤ l_max), 7% of 44–512 nodes and 2% of 513–2,048 nodes, sizes
// log-uniform within each class. That is ~47 nodes per job on average, so
// ~170 jobs keep ~70% of the machine busy after fragmentation. Jobs are
// placed island-aware but not collector-aware (PlaceIsland), as LoadLeveler
// did on SuperMUC.
func SuperMUC() SimConfig {
	return SimConfig{
		Name:         "SuperMUC",
		Nodes:        9216,
		Collectors:   216,
		Syncs:        12,
		LoadPerNode:  1,
		MinJobs:      150,
		MaxJobs:      190,
		Mix:          SuperMUCMix(),
		Turnover:     0.3,
		WarmupCycles: 20,
		Cycles:       10,
		Seed:         1,
		Placement:    PlaceIsland,
	}
}

// SuperMUCMix is the job-size mix of the SuperMUC preset.
func SuperMUCMix() []SizeClass {
	return []SizeClass{
		{Name: "one-node", Weight: 0.06, Min: 1, Max: 1},
		{Name: "medium", Weight: 0.85, Min: 2, Max: 43},
		{Name: "island", Weight: 0.07, Min: 44, Max: 512},
		{Name: "multi-island", Weight: 0.02, Min: 513, Max: 2048},
	}
}

// LargeCluster is the scaling preset: 100,000 nodes, 2,000 collectors (50
// nodes each), 40 sync agents, 20,000 concurrent jobs of mostly small sizes
// (about 4.3 nodes per job on average, ~86% of the nodes busy), tree
// placement.
func LargeCluster() SimConfig {
	return SimConfig{
		Name:        "large",
		Nodes:       100000,
		Collectors:  2000,
		Syncs:       40,
		LoadPerNode: 1,
		MinJobs:     20000,
		MaxJobs:     20000,
		Mix: []SizeClass{
			{Name: "one-node", Weight: 0.50, Min: 1, Max: 1},
			{Name: "small", Weight: 0.45, Min: 2, Max: 8},
			{Name: "medium", Weight: 0.045, Min: 9, Max: 50},
			{Name: "big", Weight: 0.005, Min: 51, Max: 400},
		},
		Turnover:     0.3,
		WarmupCycles: 2,
		Cycles:       1,
		Seed:         1,
	}
}

// ThesisLoadShare is the share of the maximum that SuperMUC's nodes sent with
// threshold-based property selection: 2,346,044 records in a week against 4,027,187 with
// every property (the PerSyst thesis, §7.4.3, "reduced by approximately 42%").
const ThesisLoadShare = 2346044.0 / 4027187.0

// Thesis numbers for SuperMUC (Tables 7.5 and 7.6), printed for comparison.
const (
	ThesisExactShare        = 0.91
	ThesisTreeNodesBalanced = 217.59
	ThesisTreeNodesTopology = 905.81
	ThesisJobs              = 185.3
)

// Averages are Statistics averaged over the measured cycles.
type Averages struct {
	Jobs, LocalJobs, CollectorJobs, SyncJobs, FrontendJobs float64
	ExactShareJobs, ExactShareLoad                         float64
	TreeNodesBalanced, TreeNodesTopology                   float64
	MaxCollectorLoad, MeanCollectorLoad                    float64
	JobsOverLMax, CollectorsOverLMax                       float64
	BusyNodes                                              float64
}

// SimResult is the outcome of Simulate.
type SimResult struct {
	Config     SimConfig
	Collectors int
	Syncs      int
	LMax       int
	PerCycle   []Statistics
	Mean       Averages
	// BalanceTime is the mean wall time of one Balance call (one cycle);
	// MaxBalanceTime the slowest.
	BalanceTime, MaxBalanceTime time.Duration
}

// ErrSimConfig marks an invalid simulator configuration.
var ErrSimConfig = errors.New("invalid simulation config")

func (c SimConfig) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("simulate %s: %w: %s", c.Name, ErrSimConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Nodes <= 0:
		return bad("nodes %d must be positive", c.Nodes)
	case c.Collectors <= 0 || c.Collectors > c.Nodes:
		return bad("collectors %d must be in 1..nodes (%d)", c.Collectors, c.Nodes)
	case c.Syncs < 0 || c.Syncs > c.Collectors:
		return bad("sync agents %d must be in 0..collectors (%d)", c.Syncs, c.Collectors)
	case c.LoadPerNode < 0 || c.LMaxNodes < 0:
		return bad("load per node and l_max must not be negative")
	case c.MinJobs < 0 || c.MaxJobs < c.MinJobs:
		return bad("jobs range [%d, %d] is empty", c.MinJobs, c.MaxJobs)
	case c.Turnover < 0 || c.Turnover > 1 || math.IsNaN(c.Turnover):
		return bad("turnover %v must be in [0, 1]", c.Turnover)
	case c.WarmupCycles < 0 || c.Cycles < 0:
		return bad("cycles must not be negative")
	case c.Overflow > OverflowSpill:
		return bad("unknown overflow policy %d", c.Overflow)
	case c.Placement > PlaceIsland:
		return bad("unknown placement %d", c.Placement)
	case !(c.MinLoadShare >= 0 && c.MaxLoadShare <= 1 && c.MinLoadShare <= c.MaxLoadShare):
		return bad("load shares [%v, %v] must lie in [0, 1], lowest first", c.MinLoadShare, c.MaxLoadShare)
	case len(c.Mix) == 0 && c.MaxJobs > 0:
		return bad("empty job mix")
	}
	total := 0.0
	for _, sc := range c.Mix {
		if sc.Weight < 0 || math.IsNaN(sc.Weight) || math.IsInf(sc.Weight, 0) || sc.Min < 1 || sc.Max < sc.Min {
			return bad("size class %q: weight %v, sizes [%d, %d]", sc.Name, sc.Weight, sc.Min, sc.Max)
		}
		total += sc.Weight
	}
	if len(c.Mix) > 0 && total <= 0 {
		return bad("job mix weights sum to %v", total)
	}
	return nil
}

// Simulate builds the synthetic cluster, runs WarmupCycles+Cycles cycles of
// job arrivals and departures (jobs placed Slurm-like, see below) and
// balances every measured cycle. Only the balancing is timed. Jobs are
// placed as cfg.Placement says.
func Simulate(cfg SimConfig) (SimResult, error) {
	if err := cfg.validate(); err != nil {
		return SimResult{}, err
	}
	if cfg.Cycles == 0 {
		cfg.Cycles = 1
	}
	unit := 1 // balancing load units per unit of LoadPerNode
	if cfg.measuredLoads() {
		unit = ShareUnits
	}
	la := max(cfg.LoadPerNode, 1) * unit
	bcfg := Config{LoadPerNode: la, LMax: cfg.LMaxNodes * la, Overflow: cfg.Overflow}
	res := SimResult{Config: cfg, Syncs: cfg.Syncs}
	var sumTime time.Duration
	t, err := generate(cfg, func(t *Tree, cycle int, jobs []Job, busy int) error {
		start := time.Now()
		out, err := Balance(t, jobs, bcfg)
		dt := time.Since(start)
		if err != nil {
			return fmt.Errorf("cycle %d: %w", cycle, err)
		}
		sumTime += dt
		res.MaxBalanceTime = max(res.MaxBalanceTime, dt)
		res.LMax = out.Stats.LMax / unit
		res.PerCycle = append(res.PerCycle, out.Stats)
		res.Mean.BusyNodes += float64(busy)
		return nil
	})
	if err != nil {
		return SimResult{}, fmt.Errorf("simulate %s: %w", cfg.Name, err)
	}
	res.Collectors = len(t.collectors)
	n := float64(len(res.PerCycle))
	for _, s := range res.PerCycle {
		a := &res.Mean
		a.Jobs += float64(s.Jobs)
		a.LocalJobs += float64(s.LocalJobs)
		a.CollectorJobs += float64(s.CollectorJobs)
		a.SyncJobs += float64(s.SyncJobs)
		a.FrontendJobs += float64(s.FrontendJobs)
		a.ExactShareJobs += s.ExactShareJobs
		a.ExactShareLoad += s.ExactShareLoad
		a.TreeNodesBalanced += float64(s.TreeNodesBalanced)
		a.TreeNodesTopology += float64(s.TreeNodesTopology)
		a.MaxCollectorLoad += float64(s.MaxCollectorLoad) / float64(unit)
		a.MeanCollectorLoad += s.MeanCollectorLoad / float64(unit)
		a.JobsOverLMax += float64(s.JobsOverLMax)
		a.CollectorsOverLMax += float64(s.CollectorsOverLMax)
	}
	a := &res.Mean
	for _, p := range []*float64{&a.Jobs, &a.LocalJobs, &a.CollectorJobs, &a.SyncJobs, &a.FrontendJobs,
		&a.ExactShareJobs, &a.ExactShareLoad, &a.TreeNodesBalanced, &a.TreeNodesTopology,
		&a.MaxCollectorLoad, &a.MeanCollectorLoad, &a.JobsOverLMax, &a.CollectorsOverLMax, &a.BusyNodes} {
		*p /= n
	}
	res.BalanceTime = sumTime / time.Duration(len(res.PerCycle))
	return res, nil
}

func (c SimConfig) measuredLoads() bool { return c.MaxLoadShare > 0 }

// generate builds the cluster and runs the job arrivals and departures,
// calling measure for every measured cycle with that cycle's jobs. cfg must
// be validated, with Cycles > 0.
func generate(cfg SimConfig, measure func(t *Tree, cycle int, jobs []Job, busy int) error) (*Tree, error) {
	t, err := evenTree(simNodeNames(cfg.Nodes), cfg.Collectors, cfg.Syncs)
	if err != nil {
		return nil, err
	}
	w := newWorkload(cfg, t)
	for cycle := 0; cycle < cfg.WarmupCycles+cfg.Cycles; cycle++ {
		w.depart()
		w.arrive()
		if cycle < cfg.WarmupCycles {
			continue
		}
		jobs, busy := w.jobs()
		if err := measure(t, cycle, jobs, busy); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// simNodeNames names the simulated cluster's n nodes n1, n2, ..., zero-padded to one
// width so that the names sort in node order.
func simNodeNames(n int) []string {
	width := len(strconv.Itoa(n))
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%0*d", width, i+1)
	}
	return names
}

// simJob is a running job of the simulation.
type simJob struct {
	id    string
	nodes []int32
	load  int // per node, when measured loads are modelled
}

// workload is the simulated scheduler: the machine's free nodes, the running jobs,
// and the random streams that decide departures, arrivals, sizes and load shares.
// Every draw comes from the seed in a fixed order, so the simulation is repeatable.
type workload struct {
	cfg      SimConfig
	t        *Tree
	m        *machine
	rng      *rand.Rand // departures, job counts and sizes
	shares   *rand.Rand // load shares: a stream of its own, so the jobs do not depend on them
	weights  float64    // sum of the job mix's weights
	turnover float64
	running  []simJob
	nextID   int
}

// newWorkload starts the simulation on the idle machine t, with no job running.
func newWorkload(cfg SimConfig, t *Tree) *workload {
	w := &workload{
		cfg:      cfg,
		t:        t,
		m:        newMachine(t, cfg.Placement),
		rng:      rand.New(rand.NewSource(cfg.Seed)),
		shares:   rand.New(rand.NewSource(cfg.Seed ^ 0x10ad)),
		turnover: cfg.Turnover,
		nextID:   1,
	}
	if w.turnover == 0 {
		w.turnover = 0.3
	}
	for _, sc := range cfg.Mix {
		w.weights += sc.Weight
	}
	return w
}

// depart ends each running job with probability turnover and frees its nodes.
func (w *workload) depart() {
	kept := w.running[:0]
	for _, j := range w.running {
		if w.rng.Float64() < w.turnover {
			w.m.release(j.nodes)
		} else {
			kept = append(kept, j)
		}
	}
	w.running = kept
}

// arrive starts jobs until the cycle's drawn number of jobs runs. A job that does
// not fit is dropped; after 20 of them the machine counts as full for this cycle.
func (w *workload) arrive() {
	cfg := w.cfg
	target := cfg.MinJobs + w.rng.Intn(cfg.MaxJobs-cfg.MinJobs+1)
	for fails := 0; len(w.running) < target && fails < 20; {
		nodes := w.m.allocate(w.drawSize())
		if nodes == nil {
			fails++
			continue
		}
		j := simJob{id: strconv.Itoa(w.nextID), nodes: nodes}
		if cfg.measuredLoads() {
			share := cfg.MinLoadShare + w.shares.Float64()*(cfg.MaxLoadShare-cfg.MinLoadShare)
			j.load = ShareLoad(share, max(cfg.LoadPerNode, 1)*ShareUnits)
		}
		w.running = append(w.running, j)
		w.nextID++
	}
}

// drawSize draws a job's node count: a size class with probability proportional to
// its weight, then a count log-uniformly from the class's range.
func (w *workload) drawSize() int {
	mix := w.cfg.Mix
	x := w.rng.Float64() * w.weights
	sc := mix[len(mix)-1]
	for _, c := range mix {
		if x < c.Weight {
			sc = c
			break
		}
		x -= c.Weight
	}
	if sc.Min == sc.Max {
		return sc.Min
	}
	lo, hi := math.Log(float64(sc.Min)), math.Log(float64(sc.Max)+1)
	n := int(math.Exp(lo + w.rng.Float64()*(hi-lo)))
	return min(max(n, sc.Min), sc.Max)
}

// jobs is the running jobs as Balance takes them, and the number of busy nodes.
func (w *workload) jobs() ([]Job, int) {
	jobs := make([]Job, len(w.running))
	busy := 0
	for i, j := range w.running {
		jobs[i] = Job{ID: j.id, Nodes: make([]string, len(j.nodes)), LoadPerNode: j.load}
		for k, n := range j.nodes {
			jobs[i].Nodes[k] = w.t.name[n]
		}
		busy += len(j.nodes)
	}
	return jobs, busy
}

// WriteText prints the simulation summary next to the thesis's SuperMUC
// numbers.
func (r SimResult) WriteText(w io.Writer) error {
	c := r.Config
	mean := r.Mean
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	share := func(x float64) string {
		if mean.Jobs == 0 {
			return "-"
		}
		return pct(x / mean.Jobs)
	}
	lines := []string{
		fmt.Sprintf("persyst balance simulate: %s (seed %d, overflow %s, placement %s)", c.Name, c.Seed, c.Overflow, c.Placement),
		fmt.Sprintf("tree: 1 frontend, %d sync agents, %d collectors, %d nodes; l_max %d, load per node %d",
			r.Syncs, r.Collectors, c.Nodes, r.LMax, max(c.LoadPerNode, 1)),
		"loads charged: " + c.loadModel(),
		fmt.Sprintf("cycles: %d measured after %d warm-up; %.1f jobs and %.0f busy nodes per cycle",
			len(r.PerCycle), c.WarmupCycles, mean.Jobs, mean.BusyNodes),
		"",
		fmt.Sprintf("%-44s %12s %12s", "", "simulated", "thesis"),
		fmt.Sprintf("%-44s %12s %12s", "exact share (jobs in one place)", pct(mean.ExactShareJobs), pct(ThesisExactShare)),
		fmt.Sprintf("%-44s %12s %12s", "exact share (weighted by load)", pct(mean.ExactShareLoad), "-"),
		fmt.Sprintf("%-44s %12s %12s", "  jobs at node agent (one-node)", share(mean.LocalJobs), "6.04%"),
		fmt.Sprintf("%-44s %12s %12s", "  jobs at one collector", share(mean.CollectorJobs), "85.00%"),
		fmt.Sprintf("%-44s %12s %12s", "  jobs merged at a sync agent", share(mean.SyncJobs), "6.37%"),
		fmt.Sprintf("%-44s %12s %12s", "  jobs merged at the frontend", share(mean.FrontendJobs), "2.59%"),
		fmt.Sprintf("%-44s %12.2f %12.2f", "tree nodes used per cycle, balanced", mean.TreeNodesBalanced, ThesisTreeNodesBalanced),
		fmt.Sprintf("%-44s %12.2f %12.2f", "tree nodes used per cycle, up the topology", mean.TreeNodesTopology, ThesisTreeNodesTopology),
		fmt.Sprintf("%-44s %12.2f %12.2f", "  ratio topology / balanced", ratio(mean.TreeNodesTopology, mean.TreeNodesBalanced), ThesisTreeNodesTopology/ThesisTreeNodesBalanced),
		fmt.Sprintf("%-44s %12s %12s", "collector load max / mean", fmt.Sprintf("%.0f / %.1f", mean.MaxCollectorLoad, mean.MeanCollectorLoad), "-"),
		fmt.Sprintf("%-44s %12.1f %12s", "jobs leaving a collector above l_max", mean.JobsOverLMax, "-"),
		fmt.Sprintf("%-44s %12s %12s", "balancing time per cycle (mean / max)", fmt.Sprintf("%s / %s", r.BalanceTime.Round(time.Microsecond), r.MaxBalanceTime.Round(time.Microsecond)), "-"),
		"thesis: SuperMUC, Tables 7.5 (185.3 jobs, 10 intervals) and 7.6 (58 measurements)",
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return fmt.Errorf("write simulation summary: %w", err)
		}
	}
	return nil
}

// ParseLoadShare reads the simulator's load model (for the CLI): "max" (the assumed
// maximum), "thesis" (every job ThesisLoadShare), a share "0.6", or a range "0.2-1"
// (each job uniform in it). It returns MinLoadShare and MaxLoadShare.
func ParseLoadShare(s string) (lo, hi float64, err error) {
	switch s {
	case "max", "":
		return 0, 0, nil
	case "thesis":
		return ThesisLoadShare, ThesisLoadShare, nil
	}
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	lo, err1 := strconv.ParseFloat(a, 64)
	hi, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil || !(lo > 0 && lo <= hi && hi <= 1) {
		return 0, 0, fmt.Errorf("load share %q: want max, thesis, a share in (0, 1] or a range LO-HI", s)
	}
	return lo, hi, nil
}

// loadModel describes what jobs are charged.
func (c SimConfig) loadModel() string {
	switch {
	case !c.measuredLoads():
		return "the maximum (every property on every device, as the PerSyst thesis assumes, §5.3)"
	case c.MinLoadShare == c.MaxLoadShare:
		return fmt.Sprintf("measured, every job %.1f%% of the maximum", 100*c.MinLoadShare)
	}
	return fmt.Sprintf("measured, each job a share of the maximum uniform in [%.1f%%, %.1f%%]", 100*c.MinLoadShare, 100*c.MaxLoadShare)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// machine tracks free nodes for the simulator's Slurm-like placement.
type machine struct {
	t     *Tree
	place Placement
	busy  []bool  // per agent (leaves)
	free  []int32 // per agent: free leaves below (inner agents)
	inner []int32 // inner agents, deepest first, then index
}

func newMachine(t *Tree, p Placement) *machine {
	m := &machine{t: t, place: p, busy: make([]bool, len(t.name)), free: make([]int32, len(t.name))}
	for _, n := range t.nodes {
		for u := t.parent[n]; u >= 0; u = t.parent[u] {
			m.free[u]++
		}
	}
	for i, k := range t.kind {
		if k != KindNode {
			m.inner = append(m.inner, int32(i))
		}
	}
	// Deepest first (stable keeps index order within a depth).
	depthSorted := make([]int32, 0, len(m.inner))
	for d := t.height; d >= 0; d-- {
		for _, u := range m.inner {
			if t.depth[u] == d {
				depthSorted = append(depthSorted, u)
			}
		}
	}
	m.inner = depthSorted
	return m
}

func (m *machine) mark(n int32, busy bool) {
	m.busy[n] = busy
	d := int32(1)
	if busy {
		d = -1
	}
	for u := m.t.parent[n]; u >= 0; u = m.t.parent[u] {
		m.free[u] += d
	}
}

func (m *machine) release(nodes []int32) {
	for _, n := range nodes {
		m.mark(n, false)
	}
}

// allocate places a job of k nodes or returns nil if it does not fit.
func (m *machine) allocate(k int) []int32 {
	t := m.t
	if int(m.free[t.root]) < k {
		return nil
	}
	best := int32(-1)
	for _, u := range m.inner {
		if best >= 0 && t.depth[u] < t.depth[best] {
			break
		}
		if m.place == PlaceIsland && t.kind[u] == KindCollector {
			continue
		}
		if int(m.free[u]) >= k && (best < 0 || m.free[u] < m.free[best]) {
			best = u
		}
	}
	out := make([]int32, 0, k)
	if m.place == PlaceIsland {
		return m.takeFirst(best, k, out)
	}
	return m.take(best, k, out)
}

// takeFirst takes the k lowest-numbered free nodes below u.
func (m *machine) takeFirst(u int32, k int, out []int32) []int32 {
	t := m.t
	for _, c := range t.children[u] {
		if len(out) == cap(out) || k == 0 {
			break
		}
		switch {
		case t.kind[c] == KindNode:
			if !m.busy[c] {
				m.mark(c, true)
				out = append(out, c)
				k--
			}
		case m.free[c] > 0:
			n := min(k, int(m.free[c]))
			out = m.takeFirst(c, n, out)
			k -= n
		}
	}
	return out
}

func (m *machine) take(u int32, k int, out []int32) []int32 {
	t := m.t
	if t.kind[u] == KindCollector {
		for _, n := range t.children[u] {
			if k == 0 {
				break
			}
			if !m.busy[n] {
				m.mark(n, true)
				out = append(out, n)
				k--
			}
		}
		return out
	}
	for k > 0 {
		fit, most := int32(-1), int32(-1)
		for _, c := range t.children[u] {
			f := m.free[c]
			if int(f) >= k && (fit < 0 || f < m.free[fit]) {
				fit = c
			}
			if f > 0 && (most < 0 || f > m.free[most]) {
				most = c
			}
		}
		if fit >= 0 {
			return m.take(fit, k, out)
		}
		n := int(m.free[most])
		out = m.take(most, n, out)
		k -= n
	}
	return out
}

// SimOptions choose a simulation: a preset ("supermuc" or "large") and what to change in
// it (0, Syncs -1 and "" keep the preset's).
type SimOptions struct {
	Preset                                                        string
	Nodes, Collectors, Syncs, LMaxNodes, MinJobs, MaxJobs, Cycles int
	Overflow, Placement, LoadShare                                string
	Seed                                                          int64
}

// Config is the simulation the options choose; an error names the bad option.
func (o SimOptions) Config() (SimConfig, error) {
	var cfg SimConfig
	switch o.Preset {
	case "supermuc", "":
		cfg = SuperMUC()
	case "large":
		cfg = LargeCluster()
	default:
		return cfg, fmt.Errorf("--preset %q: want supermuc or large", o.Preset)
	}
	for _, x := range []struct{ dst, v *int }{{&cfg.Nodes, &o.Nodes}, {&cfg.Collectors, &o.Collectors},
		{&cfg.LMaxNodes, &o.LMaxNodes}, {&cfg.MinJobs, &o.MinJobs}, {&cfg.MaxJobs, &o.MaxJobs}, {&cfg.Cycles, &o.Cycles}} {
		if *x.v > 0 {
			*x.dst = *x.v
		}
	}
	if o.Syncs >= 0 {
		cfg.Syncs = o.Syncs
	}
	var err error
	if o.Overflow != "" {
		if cfg.Overflow, err = ParseOverflow(o.Overflow); err != nil {
			return cfg, err
		}
	}
	if o.Placement != "" {
		if cfg.Placement, err = ParsePlacement(o.Placement); err != nil {
			return cfg, err
		}
	}
	cfg.Seed = o.Seed
	if o.LoadShare == "" {
		o.LoadShare = "max"
	}
	if cfg.MinLoadShare, cfg.MaxLoadShare, err = ParseLoadShare(o.LoadShare); err != nil {
		return cfg, fmt.Errorf("--load-share: %w", err)
	}
	return cfg, nil
}
