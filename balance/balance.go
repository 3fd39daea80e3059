package balance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Overflow says what Algorithm 2 does when the rest of a job's load does not
// fit under l_max on the collectors already chosen for it.
type Overflow uint8

const (
	// OverflowAllow is Algorithm 2 as printed (lines 22–25): the rest goes
	// to the least-loaded chosen collector even above l_max. Medium jobs
	// (l_j ≤ l_max) therefore always stay whole on one collector (exact).
	// This is the default.
	OverflowAllow Overflow = iota
	// OverflowSpill is the variant the thesis describes in the text: when
	// the rest would push every chosen collector above l_max, another
	// collector is acquired with FindBestCollector, as long as one with
	// room exists. Collectors stay under l_max, but the job is split.
	OverflowSpill
)

// String names the policy ("allow", "spill").
func (o Overflow) String() string {
	switch o {
	case OverflowAllow:
		return "allow"
	case OverflowSpill:
		return "spill"
	}
	return fmt.Sprintf("Overflow(%d)", uint8(o))
}

// ParseOverflow reads "allow" or "spill" (for the CLI).
func ParseOverflow(s string) (Overflow, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "allow", "":
		return OverflowAllow, nil
	case "spill":
		return OverflowSpill, nil
	}
	return 0, fmt.Errorf("overflow policy %q: want allow or spill", s)
}

// Config holds the balancing parameters.
type Config struct {
	// LoadPerNode is l_a, the load one node agent sends for a job: the
	// number of properties per node (or per core × cores, ...). 0 means 1.
	LoadPerNode int
	// LMax is l_max, the load one collector takes. 0 means the largest
	// number of nodes under one collector × LoadPerNode, i.e. a collector
	// can take its own children.
	LMax int
	// Overflow chooses the reading of Algorithm 2 lines 22–25.
	Overflow Overflow
}

// Job is one running job as the balancer sees it.
type Job struct {
	ID    string
	Nodes []string
	// LoadPerNode overrides Config.LoadPerNode for this job when > 0
	// (jobs with more properties per node, e.g. more cores measured).
	LoadPerNode int
}

// Send says where one node agent sends the job's properties.
type Send struct {
	Node string
	To   string // a collector, or the node itself for a local job
}

// Route is the balancing decision for one job: the JOB_DISTR route.
type Route struct {
	JobID string
	// Load is l_j = nodes × load per node.
	Load int
	// Level is the kind of agent that holds the whole job: KindNode (a
	// one-node job, processed locally), KindCollector (exact: the whole
	// job on one collector), KindSync or KindFrontend (split over several
	// collectors and merged there with quantile estimation).
	Level Kind
	// Aggregator is that agent's name.
	Aggregator string
	// Collectors receiving part of the job, in the order Algorithm 2 chose
	// them (nil for local jobs).
	Collectors []string
	// Sends has one entry per node of the job, in the job's node order.
	Sends []Send
}

// Exact reports whether the job is aggregated in one place without
// quantile estimation (locally or on one collector).
func (r Route) Exact() bool { return r.Level == KindNode || r.Level == KindCollector }

// Statistics summarise one balancing (one measurement cycle).
type Statistics struct {
	Jobs          int // all jobs
	LocalJobs     int // one-node jobs, aggregated at their node agent
	CollectorJobs int // aggregated exactly on one collector
	SyncJobs      int // merged at a sync agent
	FrontendJobs  int // merged at the frontend

	// ExactShareJobs is (LocalJobs+CollectorJobs)/Jobs: the thesis's
	// Table 7.5 measure (91% on SuperMUC).
	ExactShareJobs float64
	// ExactShareLoad weights each job by its load l_j.
	ExactShareLoad float64
	TotalLoad      int

	// TreeNodesBalanced is, summed over jobs, the number of inner agents
	// (collectors, syncs, frontend) the job's data is sent to with the
	// balanced routes: 0 for a local job, 1 for an exact job, and for a
	// split job its collectors plus every agent on the paths from them up
	// to and including the merging agent. Table 7.6: 217.59.
	TreeNodesBalanced int
	// TreeNodesTopology is the same count when every node sends through
	// the established topology up to the frontend: all inner agents that
	// are ancestors of the job's nodes, the frontend included (a one-node
	// job on a 3-level tree counts 3). Table 7.6: 905.81.
	TreeNodesTopology int

	LMax               int
	Collectors         int
	MaxCollectorLoad   int
	MeanCollectorLoad  float64 // over all collectors, idle ones included
	CollectorsOverLMax int     // collectors ending above l_max
	// JobsOverLMax counts jobs that left a collector they use above l_max
	// at the time they were placed.
	JobsOverLMax int
	// RequiredCollectors is ⌈Σ l_j / l_max⌉ over the jobs sent to
	// collectors; eq. 5.7 requires it ≤ Collectors.
	RequiredCollectors int
}

// Result is the outcome of Balance.
type Result struct {
	Routes        []Route // in the order of the input jobs
	CollectorLoad []int   // aligned with Tree.Collectors()
	Stats         Statistics
}

// ErrInput marks invalid jobs or configuration.
var ErrInput = errors.New("invalid balancing input")

// Balance runs Algorithms 1–3 for one measurement cycle: jobs sorted by
// load, biggest first (ties by job id, numerically when both ids are
// numbers, then input order); one-node jobs stay local; every other job gets
// n_c = ⌈l_j/l_max⌉ collectors chosen by FindBestCollector. It is
// deterministic: the same tree, jobs and config give the same result.
// A node may appear in several jobs (shared nodes): each (job, node) pair
// is routed on its own.
func Balance(t *Tree, jobs []Job, cfg Config) (*Result, error) {
	if err := checkConfig(t, cfg); err != nil {
		return nil, err
	}
	la, lmax := loadLimits(t, cfg)
	b := newBalancer(t, lmax, cfg.Overflow)
	res, err := b.resolve(jobs, la)
	if err != nil {
		return nil, err
	}
	out := &Result{Routes: make([]Route, len(jobs))}
	tl := tally{Statistics: Statistics{Jobs: len(jobs), LMax: lmax, Collectors: len(t.collectors)}}
	for _, i := range placementOrder(jobs, res) {
		j := res[i]
		topology := b.topologyNodes(j.nodes)
		r, balanced, over := b.route(jobs[i].ID, j)
		tl.add(r, topology, balanced, over)
		out.Routes[i] = r
	}
	out.CollectorLoad = b.load
	out.Stats = tl.finish(b.load)
	return out, nil
}

// checkConfig refuses what Balance cannot work with: no tree, a tree without
// collectors, negative loads, an unknown overflow policy. The errors wrap ErrInput.
func checkConfig(t *Tree, cfg Config) error {
	if t == nil {
		return fmt.Errorf("balance: %w: nil tree", ErrInput)
	}
	if cfg.LoadPerNode < 0 {
		return fmt.Errorf("balance: %w: load per node %d < 0", ErrInput, cfg.LoadPerNode)
	}
	if cfg.LMax < 0 {
		return fmt.Errorf("balance: %w: l_max %d < 0", ErrInput, cfg.LMax)
	}
	if cfg.Overflow > OverflowSpill {
		return fmt.Errorf("balance: %w: unknown overflow policy %d", ErrInput, cfg.Overflow)
	}
	if len(t.collectors) == 0 {
		return fmt.Errorf("balance: %w: tree has no collectors", ErrInput)
	}
	return nil
}

// loadLimits is l_a and l_max with Config's defaults filled in: a node sends 1,
// and a collector takes the load of the largest group of nodes below one collector.
func loadLimits(t *Tree, cfg Config) (la, lmax int) {
	la = cfg.LoadPerNode
	if la == 0 {
		la = 1
	}
	lmax = cfg.LMax
	if lmax == 0 {
		for _, c := range t.collectors {
			lmax = max(lmax, len(t.children[c])*la)
		}
	}
	return la, lmax
}

// resolvedJob is a job as the balancer works on it: its nodes as agent indices,
// with its load per node and its load l_j worked out.
type resolvedJob struct {
	nodes []int32
	la    int
	load  int
}

// resolve checks the jobs (an id given once, at least one node, no negative load)
// and resolves their nodes; la is the load per node of jobs that do not set their own.
// Refusing a load that could overflow here keeps every sum of loads below in range.
func (b *balancer) resolve(jobs []Job, la int) ([]resolvedJob, error) {
	res := make([]resolvedJob, len(jobs))
	ids := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if j.ID == "" {
			return nil, fmt.Errorf("balance: %w: job #%d has no id", ErrInput, i)
		}
		if p, dup := ids[j.ID]; dup {
			return nil, fmt.Errorf("balance: %w: job %s given twice (#%d and #%d)", ErrInput, j.ID, p, i)
		}
		ids[j.ID] = i
		if len(j.Nodes) == 0 {
			return nil, fmt.Errorf("balance: %w: job %s has no nodes", ErrInput, j.ID)
		}
		if j.LoadPerNode < 0 {
			return nil, fmt.Errorf("balance: %w: job %s: load per node %d < 0", ErrInput, j.ID, j.LoadPerNode)
		}
		idx, err := b.nodeIndices(j)
		if err != nil {
			return nil, err
		}
		l := la
		if j.LoadPerNode > 0 {
			l = j.LoadPerNode
		}
		if len(idx) > math.MaxInt/(2*l) {
			return nil, fmt.Errorf("balance: %w: job %s: load overflows", ErrInput, j.ID)
		}
		res[i] = resolvedJob{nodes: idx, la: l, load: len(idx) * l}
	}
	return res, nil
}

// nodeIndices looks up a job's nodes in the tree. Each must be a compute node
// (not an inner agent) and be listed once in the job.
func (b *balancer) nodeIndices(j Job) ([]int32, error) {
	t := b.t
	b.epoch++
	idx := make([]int32, len(j.Nodes))
	for k, n := range j.Nodes {
		a, ok := t.index[n]
		if !ok {
			return nil, fmt.Errorf("balance: %w: job %s: node %q is not in the agent tree", ErrInput, j.ID, n)
		}
		if t.kind[a] != KindNode {
			return nil, fmt.Errorf("balance: %w: job %s: %q is a %s, not a compute node", ErrInput, j.ID, n, t.kind[a])
		}
		if b.mark[a] == b.epoch {
			return nil, fmt.Errorf("balance: %w: job %s: node %q listed twice", ErrInput, j.ID, n)
		}
		b.mark[a] = b.epoch
		idx[k] = a
	}
	return idx, nil
}

// placementOrder is the order in which Algorithm 1 places the jobs (indices into
// jobs): biggest load first, so that the big jobs find collectors with room; ties by
// job id (compareIDs), then input order, so that the result does not depend on a
// map's or a scheduler's order.
func placementOrder(jobs []Job, res []resolvedJob) []int {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		if res[x].load != res[y].load {
			return res[y].load - res[x].load
		}
		return compareIDs(jobs[x].ID, jobs[y].ID)
	})
	return order
}

// route places one job. A one-node job stays with its node agent. Any other job is
// spread over collectors (distribute) and merged at the lowest agent above all the
// collectors that received part of it. route also returns the job's count for
// Statistics.TreeNodesBalanced and whether it left a collector above l_max.
func (b *balancer) route(id string, j resolvedJob) (r Route, balanced int, over bool) {
	t := b.t
	r = Route{JobID: id, Load: j.load, Sends: make([]Send, len(j.nodes))}
	if len(j.nodes) == 1 {
		n := t.name[j.nodes[0]]
		r.Level, r.Aggregator = KindNode, n
		r.Sends[0] = Send{Node: n, To: n}
		return r, 0, false
	}
	dest, used, over := b.distribute(j.nodes, j.la)
	for k, n := range j.nodes {
		r.Sends[k] = Send{Node: t.name[n], To: t.name[dest[k]]}
	}
	r.Collectors = make([]string, len(used))
	agg := t.collectors[used[0]]
	for k, s := range used {
		c := t.collectors[s]
		r.Collectors[k] = t.name[c]
		agg = t.lca(agg, c)
	}
	r.Level, r.Aggregator = t.kind[agg], t.name[agg]
	return r, b.balancedNodes(used, agg), over
}

// tally adds up the Statistics of one balancing as the jobs are placed.
type tally struct {
	Statistics
	exactLoad     int // load of the jobs aggregated exactly: locally or on one collector
	collectorLoad int // load of the jobs sent to collectors (all but one-node jobs)
}

// add counts one placed job: its route, its topology and balanced tree-node counts,
// and whether it left a collector above l_max.
func (tl *tally) add(r Route, topology, balanced int, over bool) {
	tl.TotalLoad += r.Load
	tl.TreeNodesTopology += topology
	tl.TreeNodesBalanced += balanced
	if over {
		tl.JobsOverLMax++
	}
	if r.Level != KindNode {
		tl.collectorLoad += r.Load
	}
	switch r.Level {
	case KindNode:
		tl.LocalJobs++
		tl.exactLoad += r.Load
	case KindCollector:
		tl.CollectorJobs++
		tl.exactLoad += r.Load
	case KindSync:
		tl.SyncJobs++
	default:
		tl.FrontendJobs++
	}
}

// finish works out the shares and the collectors' figures once every job is
// placed; load is the final load of each collector.
func (tl *tally) finish(load []int) Statistics {
	st := tl.Statistics
	if st.Jobs > 0 {
		st.ExactShareJobs = float64(st.LocalJobs+st.CollectorJobs) / float64(st.Jobs)
	}
	if st.TotalLoad > 0 {
		st.ExactShareLoad = float64(tl.exactLoad) / float64(st.TotalLoad)
	}
	st.RequiredCollectors = (tl.collectorLoad + st.LMax - 1) / st.LMax
	sum := 0
	for _, l := range load {
		sum += l
		st.MaxCollectorLoad = max(st.MaxCollectorLoad, l)
		if l > st.LMax {
			st.CollectorsOverLMax++
		}
	}
	st.MeanCollectorLoad = float64(sum) / float64(len(load))
	return st
}

// compareIDs orders job ids: numerically when both are decimal numbers,
// otherwise bytewise.
func compareIDs(a, b string) int {
	if isDecimal(a) && isDecimal(b) {
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			return len(a) - len(b)
		}
	}
	return strings.Compare(a, b)
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// balancer holds the per-call scratch state; nothing survives a Balance call.
type balancer struct {
	t        *Tree
	lmax     int
	overflow Overflow
	h1       int32   // height + 1: hist row length
	load     []int   // l_c per collector slot
	avail    []bool  // C*: collectors not yet chosen for the current job
	hist     []int32 // hist[u*h1+d]: unassigned job nodes at depth d below u
	mark     []int32 // epoch marks per agent
	epoch    int32
	// per-job grouping of the job's nodes by collector slot
	slotStamp []int32
	slotStart []int32
	slotCount []int32
}

func newBalancer(t *Tree, lmax int, o Overflow) *balancer {
	n := len(t.name)
	nc := len(t.collectors)
	b := &balancer{
		t: t, lmax: lmax, overflow: o,
		h1:        t.height + 1,
		load:      make([]int, nc),
		avail:     make([]bool, nc),
		mark:      make([]int32, n),
		slotStamp: make([]int32, nc),
		slotStart: make([]int32, nc),
		slotCount: make([]int32, nc),
	}
	b.hist = make([]int32, n*int(b.h1))
	for i := range b.avail {
		b.avail[i] = true
	}
	return b
}

// histAdd adds delta for node a at every ancestor of a: O(h).
func (b *balancer) histAdd(a int32, delta int32) {
	t := b.t
	d := t.depth[a]
	for u := t.parent[a]; u >= 0; u = t.parent[u] {
		b.hist[u*b.h1+d] += delta
	}
}

// sumDist is Σ_a TreeDistance(c, a) over the job's unassigned nodes a, from
// the depth histograms of c's ancestors: O(h²) instead of O(|A_j|·log h).
func (b *balancer) sumDist(c int32) int64 {
	t := b.t
	h1 := b.h1
	dc := t.depth[c]
	var sum int64
	row := b.hist[c*h1 : c*h1+h1]
	for d := dc + 1; d < h1; d++ {
		sum += int64(row[d]) * int64(d-dc)
	}
	prev := c
	for u := t.parent[c]; u >= 0; u = t.parent[u] {
		du := t.depth[u]
		ru := b.hist[u*h1 : u*h1+h1]
		rp := b.hist[prev*h1 : prev*h1+h1]
		for d := du + 1; d < h1; d++ {
			if cnt := ru[d] - rp[d]; cnt != 0 {
				sum += int64(cnt) * int64(max(dc-du, d-du))
			}
		}
		prev = u
	}
	return sum
}

// findBest is Algorithm 3 over C* (b.avail): the collectors with minimum
// load, then the least total distance to the unassigned nodes, then the
// lowest collector index. -1 when C* is empty.
func (b *balancer) findBest() int32 {
	minLoad := math.MaxInt
	for s, ok := range b.avail {
		if ok && b.load[s] < minLoad {
			minLoad = b.load[s]
		}
	}
	best, bestD := int32(-1), int64(0)
	for s, ok := range b.avail {
		if !ok || b.load[s] != minLoad {
			continue
		}
		d := b.sumDist(b.t.collectors[s])
		if best < 0 || d < bestD {
			best, bestD = int32(s), d
		}
	}
	return best
}

// minAvailLoad is the smallest load in C* (MaxInt if empty).
func (b *balancer) minAvailLoad() int {
	m := math.MaxInt
	for s, ok := range b.avail {
		if ok {
			m = min(m, b.load[s])
		}
	}
	return m
}

// topologyNodes counts the inner agents that are ancestors of the nodes.
func (b *balancer) topologyNodes(nodes []int32) int {
	t := b.t
	b.epoch++
	n := 0
	for _, a := range nodes {
		for u := t.parent[a]; u >= 0 && b.mark[u] != b.epoch; u = t.parent[u] {
			b.mark[u] = b.epoch
			n++
		}
	}
	return n
}

// balancedNodes counts the used collectors and the agents on their paths up
// to and including the aggregator.
func (b *balancer) balancedNodes(used []int32, agg int32) int {
	t := b.t
	b.epoch++
	n := 0
	for _, s := range used {
		for u := t.collectors[s]; b.mark[u] != b.epoch; u = t.parent[u] {
			b.mark[u] = b.epoch
			n++
			if u == agg {
				break
			}
		}
	}
	return n
}

// ShareUnits is the load of a node's worth in thousandths, the unit when jobs are
// charged a measured share of their maximum load instead of the maximum itself.
const ShareUnits = 1000

// ShareLoad is the load per node of a job whose nodes sent share of maxPerNode: at least
// 1, rounded up.
func ShareLoad(share float64, maxPerNode int) int {
	return max(1, int(math.Ceil(share*float64(maxPerNode))))
}
