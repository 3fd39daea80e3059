package htmlreport

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

var update = flag.Bool("update", false, "rewrite the golden pages in testdata")

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// job is a recorded-looking job: nodes × cpus, n intervals of 10 s; CPU c of each node is
// busy (c+1)/cpus of the time, node k's memory grows, the last node idles in the second
// half.
func job(nodes, cpus, n int) SamplesInput { return jobWith(nodes, cpus, n, false) }

// jobWith is job, its CPU use jittered when noisy.
func jobWith(nodes, cpus, n int, noisy bool) SamplesInput {
	r := digest.Report{JobID: 42, NNodes: nodes, CPUs: nodes * cpus, Seconds: float64(10 * n), Samples: n,
		Findings: []properties.Result{{Key: "idle_cores", ID: "idle_cores", Name: "Allocated CPUs left idle", Unit: "share", Assessed: true,
			Deciles: []float64{0, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1}, Threshold: ptr(0.25), TimeShare: 0.5, MeanSeverity: 0.4, MaxSeverity: 1,
			Finding: true, Recommendation: "Request fewer CPUs <or> start more threads."}},
		Events: []digest.Event{{Key: "failed", Text: "The job failed: its batch script ended with exit code 3."}},
		Notes:  []digest.Event{{Key: "memory_near_limit", Text: "Memory came close to the limit."}}}
	in := SamplesInput{Report: r, MemRequest: 1 << 30}
	for k := range nodes {
		ns := NodeSamples{Node: fmt.Sprintf("node%d", k+1)}
		r.Nodes = append(r.Nodes, ns.Node)
		ns.Samples = append(ns.Samples, sample.Sample{Time: t0, Reason: sample.Start})
		for i := 1; i <= n; i++ {
			s := sample.Sample{Time: t0.Add(time.Duration(i) * 10 * time.Second), Reason: sample.Cycle, Seconds: 10, Job: map[string]float64{}}
			busy := 0.0
			for c := range cpus {
				f := float64(c+1) / float64(cpus)
				if noisy {
					// A deterministic jitter, so that the heat map compresses as a real one.
					f *= 0.5 + 0.5*float64((i*7919+c*104729+k*1299709)%1000)/1000
				}
				if k == nodes-1 && i > n/2 {
					f = 0
				}
				busy += f * 10 * 1e9
				s.CPU = append(s.CPU, sample.CPUValues{CPU: c, Values: map[string]float64{"task-clock": f * 10 * 1e9}})
			}
			s.Job["task-clock"] = busy
			s.Job["mem_bytes"] = float64(i) * (64 << 20)
			s.Job["read_chars"], s.Job["read_syscalls"] = 4096*float64(i), float64(i)
			s.Job["syscalls:sys_enter_openat"] = 100
			ns.Samples = append(ns.Samples, s)
		}
		in.Nodes = append(in.Nodes, ns)
	}
	in.Report.Nodes = r.Nodes
	in.Lanes = []Lane{{Key: "idle_cores", Name: "Allocated CPUs left idle", Color: laneColors[0],
		Spans: []Span{{t0.Add(time.Duration(n/2) * 10 * time.Second), t0.Add(time.Duration(n) * 10 * time.Second)}}}}
	return in
}

func render(t testing.TB, v View) string {
	var b bytes.Buffer
	if err := Render(&b, v, Options{Version: "test"}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./htmlreport -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// TestGoldenPages: the pages for a 2-node job from its samples and from a collector's
// cycles, byte for byte (go test ./htmlreport -update rewrites them).
func TestGoldenPages(t *testing.T) {
	golden(t, "two_nodes_samples.golden.html", render(t, FromSamples(job(2, 2, 6))))
	in := job(2, 2, 6)
	cy := CyclesInput{Report: in.Report, Source: "collector database col1.db", Cycles: map[string][]Cycle{}}
	for i := 1; i <= 6; i++ {
		share := 0.0
		if i > 3 {
			share = 0.5
		}
		cy.Cycles["idle_cores"] = append(cy.Cycles["idle_cores"], Cycle{Time: t0.Add(time.Duration(i) * 10 * time.Second),
			Quantiles: []float64{0, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1}, Share: share})
	}
	golden(t, "two_nodes_cycles.golden.html", render(t, FromCycles(cy)))
}

var (
	attrRE = regexp.MustCompile(`id="heatmap" data-cpus="(\d+)" data-rows="(\d+)"`)
	tagRE  = regexp.MustCompile(`<(script|link|iframe|object)\b|src="http|url\(http`)
)

// TestStructure: what a reader needs is there, and the page loads nothing.
func TestStructure(t *testing.T) {
	in := job(3, 4, 20)
	in.Nodes[0].Node = `<b>node1</b>` // a node name is text, never markup
	page := render(t, FromSamples(in))
	for _, want := range []string{`id="findings"`, `data-key="idle_cores"`, `id="chart-cpu"`, `id="chart-memory"`, `id="chart-read"`,
		`id="chart-read_size"`, `id="chart-opens"`, `id="timeline"`, `id="nodes"`, `class="shade" data-finding="idle_cores"`,
		`data-event="failed"`, "&lt;b&gt;node1&lt;/b&gt;", "Request fewer CPUs &lt;or&gt; start more threads.", "dashed red: requested per node"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if m := attrRE.FindStringSubmatch(page); m == nil || m[1] != "12" || m[2] != "12" {
		t.Errorf("heat map: %v, want 12 CPUs in 12 rows", m)
	}
	if m := tagRE.FindString(page); m != "" {
		t.Errorf("the page loads something: %q", m)
	}
	if strings.Contains(page, "<b>node1</b>") {
		t.Error("a node name went into the page as markup")
	}
	// Not measured is not drawn: no context switches in these samples.
	if strings.Contains(page, `id="chart-ctxsw"`) {
		t.Error("a chart of context switches, which were not measured")
	}
}

func TestManyCPUsAreAggregated(t *testing.T) {
	in := job(40, 48, 3) // 1920 CPUs
	v := FromSamples(in)
	if v.Heat == nil || v.Heat.CPUs != 1920 || v.Heat.PerRow != 2 || v.Heat.Rows != 960 {
		t.Fatalf("heat map %+v, want 1920 CPUs in 960 rows of 2", v.Heat)
	}
	if !strings.Contains(strings.Join(v.Notes, " "), "each row is the mean of 2 CPUs") {
		t.Errorf("notes do not say the rows are aggregated: %q", v.Notes)
	}
	cpu := v.Charts[0]
	if len(cpu.Lines) != 1 || len(cpu.Bands) != 1 || !strings.Contains(cpu.Note, "40 nodes") {
		t.Errorf("40 nodes: want a median line and a range, got %d lines, %d bands, %q", len(cpu.Lines), len(cpu.Bands), cpu.Note)
	}
}

func TestNoPerCPUValues(t *testing.T) {
	in := job(1, 2, 4)
	for i := range in.Nodes[0].Samples {
		in.Nodes[0].Samples[i].CPU = nil
	}
	v := FromSamples(in)
	if v.Heat != nil || !strings.Contains(strings.Join(v.Notes, " "), "No heat map") {
		t.Errorf("without per-CPU values: heat %v, notes %q", v.Heat, v.Notes)
	}
}

// TestLanesFromTheEngine: the stretches a finding held are where the real engine finds
// it severe (one node idles in the second half of the job).
func TestLanesFromTheEngine(t *testing.T) {
	engine := propertiestest.Engine(t)
	in := job(2, 2, 8)
	lanes := Lanes(engine, in.Report, in.Nodes)
	if len(lanes) != 1 || lanes[0].Key != "idle_cores" || len(lanes[0].Spans) == 0 {
		t.Fatalf("lanes %+v", lanes)
	}
	end := lanes[0].Spans[len(lanes[0].Spans)-1].To
	if !end.Equal(t0.Add(80 * time.Second)) {
		t.Errorf("idle_cores held until %v, want the job's end", end)
	}
}

// BenchmarkRender64x48x24h: the report of a 64-node × 48-CPU job of 24 h at a 60 s cycle
// (1,440 intervals per node), from its samples (synthetic values, real sizes).
func BenchmarkRender64x48x24h(b *testing.B) {
	in := jobWith(64, 48, 1440, true)
	size := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		size = len(render(b, FromSamples(in)))
	}
	b.ReportMetric(float64(size)/(1<<20), "MiB/page")
}

func TestNiceAxisTop(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want float64
	}{
		{0.37, "CPUs", 0.4},
		{3.1, "CPUs", 4},
		{47, "/s", 50},
		{1.1e9, "bytes", 2 << 30},     // 1.02 GiB: 2 GiB, so the quarters are 512 MiB
		{13 << 30, "bytes", 20 << 30}, // 13 GiB: 20 GiB (ticks of 5 GiB)
		{300 << 10, "B/s", 400 << 10},
	}
	for _, tc := range tests {
		if got := niceCeilIn(tc.v, tc.unit); got != tc.want {
			t.Errorf("niceCeilIn(%g, %s) = %g, want %g", tc.v, tc.unit, got, tc.want)
		}
	}
}

// TestGPUCharts: a GPU job's page draws its GPUs' use and memory against what it holds;
// a job without GPUs has no GPU chart (TestStructure's).
func TestGPUCharts(t *testing.T) {
	in := job(1, 4, 10)
	for i := range in.Nodes[0].Samples {
		s := &in.Nodes[0].Samples[i]
		if s.Seconds <= 0 {
			continue
		}
		s.Job[sample.GPUs], s.Job[sample.GPUMemTotalBytes] = 4, 4*80<<30
		s.Job[sample.GPUBusySeconds], s.Job[sample.GPUSMActiveSeconds] = 2*s.Seconds, 1.9*s.Seconds
		s.Job[sample.GPUMemPeakBytes] = 120 << 30
		for g := range 4 {
			busy := 0.0
			if g < 2 {
				busy = s.Seconds
			}
			s.GPU = append(s.GPU, sample.GPUValues{GPU: g, Values: map[string]float64{sample.GPUValueBusySeconds: busy}})
		}
	}
	v := FromSamples(in)
	if v.Heat == nil || v.Heat.CPUs != 4 || v.Heat.GPUs != 4 || v.Heat.Rows != 8 {
		t.Fatalf("heat map %+v, want 4 CPUs and 4 GPUs in 8 rows", v.Heat)
	}
	if d := cmp.Diff([]RowLabel{{0, "node1"}, {4, "node1 GPUs"}}, v.Heat.RowLabels); d != "" {
		t.Errorf("row labels (-want +got):\n%s", d)
	}
	page := render(t, v)
	for _, want := range []string{`id="chart-gpu"`, `id="chart-gpu_sm"`, `id="chart-gpu_memory"`, "dashed red: GPUs per node", "dashed red: GPU memory per node",
		`data-gpus="4"`, "and 4 GPUs (the time a kernel ran"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if page := render(t, FromSamples(job(1, 4, 10))); strings.Contains(page, `id="chart-gpu`) {
		t.Error("a GPU chart for a job without GPUs")
	}
}

// TestPowerCharts: the power of the processors and memory (RAPL) and of the whole node
// (its own meter) are charted where they were measured, and only there.
func TestPowerCharts(t *testing.T) {
	in := job(1, 2, 10)
	for i := range in.Nodes[0].Samples {
		s := &in.Nodes[0].Samples[i]
		if s.Seconds > 0 {
			s.Job[sample.EnergyPkgJoules], s.Job[sample.EnergyRAMJoules] = 100*s.Seconds, 10*s.Seconds
			s.Job[sample.EnergyNodeJoules] = 300 * s.Seconds
		}
	}
	page := render(t, FromSamples(in))
	for _, want := range []string{`id="chart-power"`, `id="chart-node_power"`, "Power of the whole node (its own meter, BMC)"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if page := render(t, FromSamples(job(1, 2, 10))); strings.Contains(page, `id="chart-node_power"`) || strings.Contains(page, `id="chart-power"`) {
		t.Error("a power chart for a job whose energy was not measured")
	}
}

// TestPhases: a job's phases are numbered grey bands on every chart, with the phases
// and the interference stated above the findings and each finding's phases under it.
func TestPhases(t *testing.T) {
	in := job(1, 4, 20)
	mid := t0.Add(100 * time.Second)
	in.Report.Phases = []phases.Phase{
		{N: 1, Stretches: []phases.Stretch{{From: t0, To: mid}}, Intervals: 10, Seconds: 100, Share: 0.5, Traits: phases.Traits{CPUBusy: 0.6}},
		{N: 2, Stretches: []phases.Stretch{{From: mid, To: t0.Add(200 * time.Second)}}, Intervals: 10, Seconds: 100, Share: 0.5, Traits: phases.Traits{CPUBusy: 0.3}},
	}
	in.Report.PhasesNode = "node1"
	in.Report.Start = t0
	in.Report.Findings[0].Phases = []int{2}
	in.Report.Interference = &phases.Interference{Seconds: 200, Assessed: 200, LostSeconds: 40, Share: 0.2, Class: "high", Intervals: 5,
		Causes: []phases.Cause{{Key: phases.CauseCPU, LostSeconds: 40}}, Worst: &phases.Stretch{From: mid, To: mid.Add(50 * time.Second)}}
	page := render(t, FromSamples(in))
	for _, want := range []string{`class="phase" data-phase="1"`, `class="phase" data-phase="2"`, "grey bands, numbered: the job's phases on node1",
		`<p class="note when">  1. 0:00-1:40 (50%): CPUs 60% busy.</p>`, `<p class="note when">  2. 1:40-3:20 (50%): CPUs 30% busy.</p>`,
		"In phase 2 (1:40-3:20, 50% of the job).",
		"About 20% of the job&#39;s time was lost to other work on node1 (high interference), mostly 10:01:40-10:02:30."} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(page, `class="phase" data-phase="1"`); n < 3 {
		t.Errorf("phase 1 is drawn on %d charts, want every chart", n)
	}
}
