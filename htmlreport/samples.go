package htmlreport

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
	"github.com/persyst/persyst/sample"
)

// NodeSamples are one node's samples of a job.
type NodeSamples struct {
	Node    string
	Samples []sample.Sample
}

// SamplesInput is a job's report and its nodes' samples.
type SamplesInput struct {
	Report digest.Report
	Nodes  []NodeSamples
	// MemRequest is the memory the job was given per node, in bytes (0: none).
	MemRequest float64
	// Lanes say when each finding held (Lanes makes them); nil: none shaded.
	Lanes []Lane
}

// metric is a value of an interval, per node.
type metric struct {
	id, title, unit string
	value           func(s sample.Sample) (float64, bool)
}

func rate(name string) func(sample.Sample) (float64, bool) {
	return func(s sample.Sample) (float64, bool) { return s.Rate(name) }
}

func ratio(num, den string) func(sample.Sample) (float64, bool) {
	return func(s sample.Sample) (float64, bool) {
		n, ok1 := s.Job[num]
		d, ok2 := s.Job[den]
		if !ok1 || !ok2 || d <= 0 || s.Seconds <= 0 {
			return 0, false
		}
		return n / d, true
	}
}

// metrics are the charts drawn from samples, in order.
var metrics = []metric{
	{"cpu", "CPUs busy", "CPUs", sample.Sample.CPUsBusy},
	{"memory", "Memory in use", "bytes", func(s sample.Sample) (float64, bool) { v, ok := s.Job["mem_bytes"]; return v, ok && s.Seconds > 0 }},
	{"read", "Read rate", "B/s", rate("read_chars")},
	{"write", "Write rate", "B/s", rate("write_chars")},
	{"read_size", "Read request size", "bytes", ratio("read_chars", "read_syscalls")},
	{"write_size", "Write request size", "bytes", ratio("write_chars", "write_syscalls")},
	{"opens", "File opens", "/s", sample.Sample.FileOpens},
	{"ctxsw", "Context switches", "/s", rate("context-switches")},
	// Where the node's energy counters were read (docs/metrics.md, Energy).
	{"power", "Power of the processors and memory (RAPL)", "W", cpuPower},
	{"node_power", "Power of the whole node (its own meter, BMC)", "W", rate(sample.EnergyNodeJoules)},
	// A GPU job's: drawn only where GPUs were measured.
	{"gpu", "GPUs busy", "GPUs", rate(sample.GPUBusySeconds)},
	{"gpu_sm", "GPU SMs busy (in GPUs)", "GPUs", rate(sample.GPUSMActiveSeconds)},
	{"gpu_memory", "GPU memory in use", "bytes", func(s sample.Sample) (float64, bool) {
		v, ok := s.Job[sample.GPUMemPeakBytes]
		return v, ok && s.Seconds > 0
	}},
	{"gpu_power", "Power of the GPUs", "W", rate(sample.GPUEnergyJoules)},
}

// cpuPower is the job's power from RAPL in an interval: its packages' and DRAM's, else
// the platform's (which holds them).
func cpuPower(s sample.Sample) (float64, bool) {
	if p, ok := s.Rate(sample.EnergyPkgJoules); ok {
		d, _ := s.Rate(sample.EnergyRAMJoules)
		return p + d, true
	}
	return s.Rate(sample.EnergyPsysJoules)
}

// gpuRef is the reference line of a GPU chart: the job's GPUs on a node, or their
// memory (the most of any node).
func gpuRef(id string, nodes []NodeSamples) (float64, string) {
	name, metric := "", ""
	switch id {
	case "gpu", "gpu_sm":
		name, metric = "GPUs per node", sample.GPUs
	case "gpu_memory":
		name, metric = "GPU memory per node", sample.GPUMemTotalBytes
	default:
		return 0, ""
	}
	top := 0.0
	for _, n := range nodes {
		for _, s := range n.Samples {
			top = max(top, s.Job[metric])
		}
	}
	return top, name
}

// FromSamples builds a job's view from its nodes' samples.
func FromSamples(in SamplesInput) View {
	v := View{Report: in.Report.Clean(), Source: "the node daemons' samples", Lanes: in.Lanes}
	nodes := slices.Clone(in.Nodes)
	sort.SliceStable(nodes, func(a, b int) bool { return nodes[a].Node < nodes[b].Node })
	for _, n := range nodes {
		for _, s := range n.Samples {
			if s.Seconds <= 0 {
				continue
			}
			from := s.From()
			if v.Start.IsZero() || from.Before(v.Start) {
				v.Start = from
			}
			if s.Time.After(v.End) {
				v.End = s.Time
			}
		}
	}
	if v.Start.IsZero() {
		v.Notes = append(v.Notes, "No samples: nothing to draw over time.")
		return v
	}
	for _, m := range metrics {
		c := Chart{ID: m.id, Title: m.title, Unit: m.unit, Shade: v.Lanes}
		perNode := make([]Line, 0, len(nodes))
		for _, n := range nodes {
			l := Line{Name: n.Node}
			for _, s := range n.Samples {
				if s.Seconds <= 0 {
					continue
				}
				if x, ok := m.value(s); ok && !math.IsNaN(x) && !math.IsInf(x, 0) {
					l.Points = append(l.Points, Point{s.Time, x})
				}
			}
			if len(l.Points) > 0 {
				perNode = append(perNode, l)
			}
		}
		if len(perNode) == 0 {
			continue // not measured on any node
		}
		if len(perNode) <= MaxNodeLines {
			for _, l := range perNode {
				c.Lines = append(c.Lines, thin(l))
			}
		} else {
			med, band := acrossNodes(perNode)
			c.Lines, c.Bands = []Line{thin(med)}, []Band{thinBand(band)}
			c.Note = fmt.Sprintf("%d nodes: their median, and the range from the lowest to the highest.", len(perNode))
		}
		if m.id == "memory" && in.MemRequest > 0 {
			r := in.MemRequest
			c.Ref, c.RefName = &r, "requested per node"
		}
		if ref, name := gpuRef(m.id, nodes); ref > 0 {
			c.Ref, c.RefName = &ref, name
		}
		v.Charts = append(v.Charts, c)
	}
	g := cpuUse(nodes)
	v.Heat = heatFromSamples(nodes, g, &v)
	if len(nodes) > 1 {
		v.NodeTable = nodeTable(nodes, g)
	}
	return v
}

// thin averages a line's points in groups so that it has at most MaxPoints.
func thin(l Line) Line {
	n := len(l.Points)
	if n <= MaxPoints {
		return l
	}
	k := (n + MaxPoints - 1) / MaxPoints
	out := Line{Name: l.Name}
	for i := 0; i < n; i += k {
		j := min(i+k, n)
		sum := 0.0
		for _, p := range l.Points[i:j] {
			sum += p.V
		}
		out.Points = append(out.Points, Point{l.Points[j-1].T, sum / float64(j-i)})
	}
	return out
}

func thinBand(b Band) Band {
	lo, hi := thin(Line{Points: b.Lo}), thin(Line{Points: b.Hi})
	return Band{Name: b.Name, Lo: lo.Points, Hi: hi.Points}
}

// acrossNodes is the median of the nodes' values at each time, and their range.
func acrossNodes(lines []Line) (Line, Band) {
	at := map[int64][]float64{}
	for _, l := range lines {
		for _, p := range l.Points {
			at[p.T.Unix()] = append(at[p.T.Unix()], p.V)
		}
	}
	ts := make([]int64, 0, len(at))
	for t := range at {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	med := Line{Name: "median"}
	band := Band{Name: "range"}
	for _, t := range ts {
		vs := at[t]
		slices.Sort(vs)
		tt := time.Unix(t, 0).UTC()
		med.Points = append(med.Points, Point{tt, quantile.SortedAt(vs, 0.5)})
		band.Lo = append(band.Lo, Point{tt, vs[0]})
		band.Hi = append(band.Hi, Point{tt, vs[len(vs)-1]})
	}
	return med, band
}

// nodeTable is each node's 10th percentile, median and 90th percentile of the key
// metrics over the job's intervals (CPU use over its CPUs and intervals).
func nodeTable(nodes []NodeSamples, g *cpuGrid) *Table {
	cols := []metric{
		{"cpu", "CPU use per CPU", "share", nil},
		metrics[1], metrics[2], metrics[3], metrics[6],
	}
	t := &Table{}
	for _, c := range cols {
		t.Columns = append(t.Columns, c.title)
	}
	for ni, n := range nodes {
		row := TableRow{Node: n.Node}
		for _, c := range cols {
			var vs []float64
			if c.value == nil { // per CPU, from the grid
				from, to := g.nodeRows(ni)
				for _, x := range g.grid[from*len(g.ts) : to*len(g.ts)] {
					if !math.IsNaN(float64(x)) {
						vs = append(vs, float64(x))
					}
				}
			}
			for _, s := range n.Samples {
				if s.Seconds <= 0 || c.value == nil {
					continue
				}
				if x, ok := c.value(s); ok {
					vs = append(vs, x)
				}
			}
			if len(vs) == 0 {
				row.Cells = append(row.Cells, "")
				continue
			}
			slices.Sort(vs)
			f := func(p float64) string { return digest.FormatValue(quantile.SortedAt(vs, p), c.unit) }
			row.Cells = append(row.Cells, f(0.1)+" / "+f(0.5)+" / "+f(0.9))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// laneColors are the findings' colours, in the digest's order.
var laneColors = []string{"#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f"}

// Lanes says when each finding of the report held, from the property records each
// interval of each node yields (re-evaluated with engine, as the daemon did).
func Lanes(engine *properties.Engine, r digest.Report, nodes []NodeSamples) []Lane {
	want := map[string]int{}
	var lanes []Lane
	for i, f := range r.Findings {
		if i == len(laneColors) {
			break
		}
		want[f.Key] = len(lanes)
		lanes = append(lanes, Lane{Key: f.Key, Name: f.Name, Color: laneColors[i]})
	}
	if engine == nil || len(lanes) == 0 {
		return lanes
	}
	for _, n := range nodes {
		if len(n.Samples) == 0 {
			continue
		}
		ncpus := 0
		for _, s := range n.Samples {
			ncpus = max(ncpus, len(s.CPU))
		}
		first := n.Samples[0].From()
		acc := engine.NewAccumulator(properties.JobInfo{Started: first, NCPUs: max(ncpus, 1)})
		for _, s := range n.Samples {
			held := map[int]bool{}
			for _, rec := range acc.Add(s) {
				if i, ok := want[rec.Key]; ok && rec.Severity > 0 {
					held[i] = true
				}
			}
			from := s.From()
			for i := range held {
				lanes[i].Spans = append(lanes[i].Spans, Span{from, s.Time})
			}
		}
	}
	for i := range lanes {
		lanes[i].Spans = mergeSpans(lanes[i].Spans)
	}
	return lanes
}

// mergeSpans sorts spans and joins those that touch or overlap.
func mergeSpans(spans []Span) []Span {
	sort.Slice(spans, func(a, b int) bool { return spans[a].From.Before(spans[b].From) })
	var out []Span
	for _, s := range spans {
		if n := len(out); n > 0 && !s.From.After(out[n-1].To.Add(time.Second)) {
			if s.To.After(out[n-1].To) {
				out[n-1].To = s.To
			}
			continue
		}
		out = append(out, s)
	}
	return out
}
