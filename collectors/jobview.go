package collectors

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
)

// jobView is what a collector holding a job's nodes knows of the whole job: every
// record's value per property, severity-time, device-time per domain, and each node's
// CPU use for the imbalance between nodes. A node's repeated push of a cycle is counted
// once.
type jobView struct {
	keys     map[string]*keyAgg
	devSecs  map[string]float64 // domain → Σ devices × interval
	pushed   map[string]bool    // node@ts
	nodeUser map[string]*[2]float64
	first    int64
	last     int64
	samples  map[int64]bool
	// sketchOnly: values go into the sketches only (a node's own part, which is only
	// ever merged: Peers).
	sketchOnly bool
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
}

func newJobView() *jobView {
	return &jobView{keys: map[string]*keyAgg{}, devSecs: map[string]float64{}, pushed: map[string]bool{},
		nodeUser: map[string]*[2]float64{}, samples: map[int64]bool{}}
}

// add counts one node's push of one cycle.
func (v *jobView) add(in *pb.CycleRecords) {
	id := fmt.Sprintf("%s@%d", in.Node, in.Ts)
	if v.pushed[id] || in.Seconds <= 0 {
		return
	}
	v.pushed[id] = true
	if v.first == 0 || in.Ts < v.first {
		v.first = in.Ts
	}
	v.last = max(v.last, in.Ts)
	v.samples[in.Ts] = true
	perKey := map[string]int{} // records per key in this push
	for _, r := range in.Records {
		a := v.keys[r.Key]
		if a == nil {
			sk, _ := quantile.NewSketch(sketchAlpha)
			a = &keyAgg{domain: store.DomainOf(r.Device), sketch: sk}
			v.keys[r.Key] = a
		}
		if !v.sketchOnly {
			a.values = append(a.values, r.Value)
		}
		a.sketch.Add(r.Value)
		a.sevSum += r.Severity * in.Seconds
		if r.Severity > 0 {
			a.severe += in.Seconds
			if a.severeAt == nil {
				a.severeAt = map[int64]bool{}
			}
			if !a.severeAt[in.Ts] {
				a.severeAt[in.Ts] = true
				a.severeWall += in.Seconds
			}
		}
		a.maxS = math.Max(a.maxS, r.Severity)
		perKey[r.Key]++
		if r.Key == "cpu_user_pct" && store.DomainOf(r.Device) == "node" {
			u := v.nodeUser[in.Node]
			if u == nil {
				u = &[2]float64{}
				v.nodeUser[in.Node] = u
			}
			u[0] += r.Value * in.Seconds
			u[1] += in.Seconds
		}
	}
	// The node's devices per domain: the most records any property of the domain has
	// (root properties are evaluated on every device of their domain).
	devs := map[string]int{}
	for k, n := range perKey {
		d := v.keys[k].domain
		devs[d] = max(devs[d], n)
	}
	for d, n := range devs {
		v.devSecs[d] += float64(n) * in.Seconds
	}
}

// sketchAlpha is the relative accuracy of the sketches a split job's parts carry.
const sketchAlpha = 0.01

// partial is the collector's part of a job, for the job's aggregation point.
func (v *jobView) partial(job uint32, from string) *pb.JobPartial {
	p := &pb.JobPartial{JobId: job, From: from, First: v.first, Last: v.last}
	seen := map[string]bool{}
	for id := range v.pushed {
		n, _, _ := strings.Cut(id, "@")
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
			v.pushed[n+"@0"] = true
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
	}
	for k, a := range v.keys {
		a.sketch = sketches[k]
	}
	return v.report(job, e), nil
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
		n, _, _ := strings.Cut(id, "@")
		if !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	return digest.Build(digest.Facts{JobID: job, Nodes: nodes, NNodes: len(nodes),
		Start: time.Unix(v.first, 0).UTC(), End: time.Unix(v.last, 0).UTC(), Seconds: float64(v.last - v.first), Samples: len(v.samples)},
		v.results(e), e.MinSeconds())
}
