package collectors

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
	"github.com/persyst/persyst/sample"
)

// jobView is what a collector holding a job's nodes knows of the whole job: every
// record's value per property, severity-time, device-time per domain, and each node's
// CPU use for the imbalance between nodes. A node's repeated push of a cycle is counted
// once.
type jobView struct {
	keys     map[string]*keyAgg
	devSecs  map[string]float64 // domain → Σ devices × interval
	pushed   map[push]bool
	nodeUser map[string]*[2]float64
	first    int64
	last     int64
	samples  map[int64]bool
	// energy is each node's energy of the job, the latest its cycles brought.
	energy map[string]nodeEnergy
	// sketchOnly: values go into the sketches only (a node's own part, which is only
	// ever merged: Peers).
	sketchOnly bool
	// seq numbers the pushes; touched is the keys of the current one, domains its
	// devices per domain (scratch).
	seq     int
	touched []*keyAgg
	domains []domainCount
}

// nodeEnergy is a node's energy of a job as of its cycle ts.
type nodeEnergy struct {
	ts int64
	e  sample.Energy
}

// push is one node's push of one cycle.
type push struct {
	node string
	ts   int64
}

type keyAgg struct {
	domain               string
	values               []float64
	sketch               *quantile.Sketch // for merging with other collectors' parts
	severe, sevSum, maxS float64
	// severeWall is the wall-clock time of the cycles with severity > 0 on some device
	// (severeAt: those cycles).
	severeWall float64
	severeAt   map[int64]bool
	// seq is the push that last had records of the key, n how many it had.
	seq, n int
}

func newJobView() *jobView {
	return &jobView{keys: map[string]*keyAgg{}, devSecs: map[string]float64{}, pushed: map[push]bool{},
		nodeUser: map[string]*[2]float64{}, samples: map[int64]bool{}, energy: map[string]nodeEnergy{}}
}

// add counts one node's push of one cycle (from the wire), and keeps its energy of the
// job where it is newer than what the node sent before.
func (v *jobView) add(in *pb.CycleRecords) {
	v.addRecords(in.Node, in.Ts, in.Seconds, len(in.Records), func(i int) (string, string, float64, float64) {
		r := in.Records[i]
		return r.Key, r.Device, r.Value, r.Severity
	})
	if in.Energy != nil {
		if e, ok := sample.CleanEnergy(in.Energy.Totals, in.Energy.How); ok {
			v.noteEnergy(in.Node, in.Ts, e)
		}
	}
}

// noteEnergy keeps a node's energy of the job as of cycle ts, unless an energy of a later
// cycle is kept (the totals are the job's so far: the latest holds the earlier ones).
func (v *jobView) noteEnergy(node string, ts int64, e sample.Energy) {
	if len(e.Totals) == 0 {
		return
	}
	if old, ok := v.energy[node]; ok && old.ts > ts {
		return
	}
	v.energy[node] = nodeEnergy{ts, e}
}

// energies is each node's energy of the job (nil: none sent any).
func (v *jobView) energies() map[string]*digest.Energy {
	if len(v.energy) == 0 {
		return nil
	}
	out := make(map[string]*digest.Energy, len(v.energy))
	for n, ne := range v.energy {
		out[n] = digest.NodeEnergy(ne.e)
	}
	return out
}

// addLocal counts this node's records of one cycle (Peers: no wire message is made).
func (v *jobView) addLocal(node string, ts int64, seconds float64, recs []properties.Record) {
	v.addRecords(node, ts, seconds, len(recs), func(i int) (string, string, float64, float64) {
		r := &recs[i]
		return r.Key, r.Device, r.Value, r.Severity
	})
}

// addRecords counts one node's push of one cycle: n records, record i from rec.
func (v *jobView) addRecords(node string, ts int64, seconds float64, n int, rec func(i int) (key, device string, value, severity float64)) {
	if !v.notePush(node, ts, seconds) {
		return
	}
	v.touched = v.touched[:0]
	for i := range n {
		key, device, value, severity := rec(i)
		a := v.keys[key]
		if a == nil {
			sk, _ := quantile.NewSketch(sketchAlpha)
			a = &keyAgg{domain: store.DomainOf(device), sketch: sk}
			v.keys[key] = a
		}
		a.add(ts, seconds, value, severity, !v.sketchOnly)
		if a.seq != v.seq { // records per key in this push
			a.seq, a.n = v.seq, 0
			v.touched = append(v.touched, a)
		}
		a.n++
		if key == "cpu_user_pct" && store.DomainOf(device) == "node" {
			u := v.nodeUser[node]
			if u == nil {
				u = &[2]float64{}
				v.nodeUser[node] = u
			}
			u[0] += value * seconds
			u[1] += seconds
		}
	}
	v.addDeviceTime(seconds)
}

// notePush notes one node's push of cycle ts (the job's first and last cycles, its
// samples) and numbers it; false for a push counted already or of no time.
func (v *jobView) notePush(node string, ts int64, seconds float64) bool {
	id := push{node, ts}
	if v.pushed[id] || seconds <= 0 {
		return false
	}
	v.pushed[id] = true
	if v.first == 0 || ts < v.first {
		v.first = ts
	}
	v.last = max(v.last, ts)
	v.samples[ts] = true
	v.seq++
	return true
}

// add counts one record of cycle ts, covering seconds, into the key: its value (kept
// when keep, always in the sketch), its severity-time, and the wall-clock time of the
// cycles it was severe in.
func (a *keyAgg) add(ts int64, seconds, value, severity float64, keep bool) {
	if keep {
		a.values = append(a.values, value)
	}
	a.sketch.Add(value)
	a.sevSum += severity * seconds
	if severity > 0 {
		a.severe += seconds
		if a.severeAt == nil {
			a.severeAt = map[int64]bool{}
		}
		if !a.severeAt[ts] {
			a.severeAt[ts] = true
			a.severeWall += seconds
		}
	}
	a.maxS = math.Max(a.maxS, severity)
}

// addDeviceTime adds the push's device-time per domain (its seconds times the node's
// devices there): the node's devices per domain are the most records any property of
// the domain has (root properties are evaluated on every device of their domain),
// among the keys the push touched. A few domains (node, cpu, core) are counted in a
// slice, more (a hostile push) in a map.
func (v *jobView) addDeviceTime(seconds float64) {
	small := v.domains[:0]
	var many map[string]int
	for _, a := range v.touched {
		if many != nil {
			many[a.domain] = max(many[a.domain], a.n)
			continue
		}
		k := 0
		for k < len(small) && small[k].domain != a.domain {
			k++
		}
		switch {
		case k < len(small):
			small[k].n = max(small[k].n, a.n)
		case len(small) < 8:
			small = append(small, domainCount{a.domain, a.n})
		default:
			many = map[string]int{a.domain: a.n}
			for _, d := range small {
				many[d.domain] = d.n
			}
		}
	}
	v.domains = small
	for _, d := range small {
		if many == nil {
			v.devSecs[d.domain] += float64(d.n) * seconds
		}
	}
	for d, n := range many {
		v.devSecs[d] += float64(n) * seconds
	}
}

type domainCount struct {
	domain string
	n      int
}

// sketchAlpha is the relative accuracy of the sketches a split job's parts carry.
const sketchAlpha = 0.01

// partial is the collector's part of a job, for the job's aggregation point.
func (v *jobView) partial(job uint32, from string) *pb.JobPartial {
	p := &pb.JobPartial{JobId: job, From: from, First: v.first, Last: v.last}
	seen := map[string]bool{}
	for id := range v.pushed {
		n := id.node
		if !seen[n] {
			seen[n] = true
			p.Nodes = append(p.Nodes, n)
		}
	}
	sort.Strings(p.Nodes)
	for ts := range v.samples {
		p.Cycles = append(p.Cycles, ts)
	}
	sort.Slice(p.Cycles, func(i, j int) bool { return p.Cycles[i] < p.Cycles[j] })
	keys := make([]string, 0, len(v.keys))
	for k := range v.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a := v.keys[k]
		b, err := a.sketch.MarshalBinary()
		if err != nil {
			continue
		}
		p.Keys = append(p.Keys, &pb.KeyPartial{Key: k, Domain: a.domain, Sketch: b, SevereSeconds: a.severe,
			SeveritySeconds: a.sevSum, MaxSeverity: a.maxS, BaseSeconds: v.devSecs[a.domain], SevereWallSeconds: a.severeWall})
	}
	nodes := make([]string, 0, len(v.nodeUser))
	for n := range v.nodeUser {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		u := v.nodeUser[n]
		p.NodeUse = append(p.NodeUse, &pb.NodeUse{Node: n, UserPctSeconds: u[0], Seconds: u[1]})
	}
	for _, n := range slices.Sorted(maps.Keys(v.energy)) {
		ne := v.energy[n]
		p.NodeEnergy = append(p.NodeEnergy, &pb.NodeEnergy{Node: n, Ts: ne.ts, Totals: ne.e.Totals, How: ne.e.How})
	}
	return p
}

// MergePartials merges the parts of a job split over several collectors into its
// job-wide report: value quantiles from the merged sketches (within their 1 % relative
// error), severity-time summed, and the imbalance between all its nodes.
func MergePartials(e *properties.Engine, job uint32, parts []*pb.JobPartial) (digest.Report, error) {
	v := newJobView()
	sketches := map[string]*quantile.Sketch{}
	for _, p := range parts {
		for _, n := range p.Nodes {
			v.pushed[push{n, 0}] = true
		}
		for _, ts := range p.Cycles {
			v.samples[ts] = true
		}
		if p.First != 0 && (v.first == 0 || p.First < v.first) {
			v.first = p.First
		}
		v.last = max(v.last, p.Last)
		for _, k := range p.Keys {
			sk, err := quantile.DecodeSketch(k.Sketch)
			if err != nil {
				return digest.Report{}, fmt.Errorf("part of job %d from %s: %s: %w", job, p.From, k.Key, err)
			}
			a := v.keys[k.Key]
			if a == nil {
				a = &keyAgg{domain: k.Domain}
				v.keys[k.Key] = a
				sketches[k.Key] = sk
			} else if err := sketches[k.Key].Merge(sk); err != nil {
				return digest.Report{}, fmt.Errorf("part of job %d from %s: %s: %w", job, p.From, k.Key, err)
			}
			a.severe += k.SevereSeconds
			a.sevSum += k.SeveritySeconds
			a.maxS = math.Max(a.maxS, k.MaxSeverity)
			// The parts hold disjoint nodes over the same time: the union of their severe
			// cycles is at least the longest part's.
			a.severeWall = math.Max(a.severeWall, k.SevereWallSeconds)
		}
		// Device-time per domain adds up over the collectors' disjoint node sets.
		domains := map[string]float64{}
		for _, k := range p.Keys {
			domains[k.Domain] = math.Max(domains[k.Domain], k.BaseSeconds)
		}
		for d, b := range domains {
			v.devSecs[d] += b
		}
		for _, u := range p.NodeUse {
			v.nodeUser[u.Node] = &[2]float64{u.UserPctSeconds, u.Seconds}
		}
		// A part's energy is taken of its own nodes only.
		for _, ne := range p.NodeEnergy {
			if e, ok := sample.CleanEnergy(ne.Totals, ne.How); ok && slices.Contains(p.Nodes, ne.Node) {
				v.noteEnergy(ne.Node, ne.Ts, e)
			}
		}
	}
	for k, a := range v.keys {
		a.sketch = sketches[k]
	}
	rep := v.report(job, e)
	whenAndWhy(&rep, parts)
	return rep, nil
}

// maxNodePhases bounds one node's phases in a part (JSON): at most 6 phases, each with
// its stretches (at most 1024 intervals are clustered).
const maxNodePhases = 256 << 10

// whenAndWhy compares the nodes whose phases came with the parts (a node's own, named
// among the part's nodes, once; the others are left out), and takes the job's
// interference from the node that lost the most time.
func whenAndWhy(rep *digest.Report, parts []*pb.JobPartial) {
	var nodes []phases.NodePhases
	seen := map[string]bool{}
	for _, p := range parts {
		for _, b := range p.NodePhases {
			var np phases.NodePhases
			if len(b) > maxNodePhases || json.Unmarshal(b, &np) != nil || seen[np.Node] || !slices.Contains(p.Nodes, np.Node) {
				continue
			}
			seen[np.Node] = true
			nodes = append(nodes, np)
		}
	}
	rep.Alike = phases.Compare(nodes)
	for _, np := range nodes {
		if in := np.Interference; in != nil && in.Share > 0 && (rep.Interference == nil || in.Share > rep.Interference.Share) {
			rep.Interference, rep.InterferenceNode = in, np.Node
		}
	}
}

// results are the job-wide property results, with the imbalance between nodes.
func (v *jobView) results(e *properties.Engine) []properties.Result {
	keys := make([]string, 0, len(v.keys))
	for k := range v.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	secs := 0.0
	for _, u := range v.nodeUser {
		secs = math.Max(secs, u[1])
	}
	short := e.MinSeconds() > 0 && (secs < e.MinSeconds() || len(v.samples) < 4)
	var out []properties.Result
	for _, k := range keys {
		a := v.keys[k]
		base := v.devSecs[a.domain]
		agg := properties.Aggregate{Values: a.values, SevereSeconds: a.severe,
			SeveritySeconds: a.sevSum, MaxSeverity: a.maxS, BaseSeconds: base, SevereWallSeconds: a.severeWall}
		if len(a.values) == 0 && a.sketch != nil {
			if qs, err := a.sketch.Summary(10); err == nil {
				agg.Summary = &qs
			}
		}
		if r, ok := e.ResultOf(k, agg, short); ok {
			out = append(out, r)
		}
	}
	if len(v.nodeUser) >= 2 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, u := range v.nodeUser {
			m := u[0] / u[1] / 100 // mean share of the node's CPU time in the job's code
			lo, hi = math.Min(lo, m), math.Max(hi, m)
		}
		spread := hi - lo
		if s, ok := e.SeverityOf("inter_node_imbalance", spread); ok {
			agg := properties.Aggregate{Values: []float64{spread}, SeveritySeconds: s * secs, MaxSeverity: s, BaseSeconds: secs}
			if s > 0 {
				agg.SevereSeconds, agg.SevereWallSeconds = secs, secs
			}
			if r, ok := e.ResultOf("inter_node_imbalance", agg, short); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// report renders the job-wide digest report.
func (v *jobView) report(job uint32, e *properties.Engine) digest.Report {
	nodes := make([]string, 0, len(v.nodeUser))
	seen := map[string]bool{}
	for id := range v.pushed {
		n := id.node
		if !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	return digest.Assemble(digest.Input{
		Facts:    digest.Facts{JobID: job, Nodes: nodes, NNodes: len(nodes)},
		Measured: sample.Summary{Started: time.Unix(v.first, 0).UTC(), Last: time.Unix(v.last, 0).UTC(), Seconds: float64(v.last - v.first), Samples: len(v.samples)},
		Results:  v.results(e), MinSeconds: e.MinSeconds(), Energy: v.energies(),
	})
}
