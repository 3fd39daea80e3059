package collectors

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
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
}

type keyAgg struct {
	domain               string
	values               []float64
	severe, sevSum, maxS float64
}

func newJobView() *jobView {
	return &jobView{keys: map[string]*keyAgg{}, devSecs: map[string]float64{}, pushed: map[string]bool{},
		nodeUser: map[string]*[2]float64{}, samples: map[int64]bool{}}
}

// domainOf reads the domain from a device label ("cpu3" → cpu, "core0.2" → core).
func domainOf(device string) string {
	if i := strings.LastIndexByte(device, '/'); i >= 0 {
		device = device[i+1:]
	}
	switch {
	case strings.HasPrefix(device, "cpu"):
		return "cpu"
	case strings.HasPrefix(device, "core"):
		return "core"
	}
	return device
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
			a = &keyAgg{domain: domainOf(r.Device)}
			v.keys[r.Key] = a
		}
		a.values = append(a.values, r.Value)
		a.sevSum += r.Severity * in.Seconds
		if r.Severity > 0 {
			a.severe += in.Seconds
		}
		a.maxS = math.Max(a.maxS, r.Severity)
		perKey[r.Key]++
		if r.Key == "cpu_user_pct" && domainOf(r.Device) == "node" {
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
		if r, ok := e.ResultOf(k, properties.Aggregate{Values: a.values, SevereSeconds: a.severe,
			SeveritySeconds: a.sevSum, MaxSeverity: a.maxS, BaseSeconds: base}, short); ok {
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
				agg.SevereSeconds = secs
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
	sum := measure.Summary{Started: time.Unix(v.first, 0).UTC(), Last: time.Unix(v.last, 0).UTC(),
		Seconds: float64(v.last - v.first), Samples: len(v.samples)}
	return digest.Build(digest.Facts{JobID: job, Nodes: nodes, NNodes: len(nodes)}, v.results(e), sum, e.MinSeconds())
}
