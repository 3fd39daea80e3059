package digest

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/internal/testenv"

	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func thr(v float64) *float64 { return &v }

func deciles(lo, mid, hi float64) []float64 {
	d := make([]float64, 11)
	for i := range d {
		switch {
		case i < 5:
			d[i] = lo + (mid-lo)*float64(i)/5
		default:
			d[i] = mid + (hi-mid)*float64(i-5)/5
		}
	}
	return d
}

var (
	smallWrites = properties.Result{Key: "io_write_request_size", ID: "io_write_request_size", Name: "Small writes", Unit: "bytes",
		Domain: properties.Node, Assessed: true, Count: 120, Deciles: deciles(4096, 4096, 4200), Threshold: thr(256 << 10),
		TimeShare: 0.92, MeanSeverity: 0.90, MaxSeverity: 0.99, Finding: true,
		Recommendation: "Data was written in many small pieces: buffer output and write larger blocks (fewer, bigger write calls; avoid flushing after every line)."}
	idle = properties.Result{Key: "idle_cores", ID: "idle_cores", Name: "Allocated CPUs left idle", Unit: "share", Domain: properties.Node,
		Assessed: true, Count: 120, Deciles: deciles(0.5, 0.5, 0.5), Threshold: thr(0.1), TimeShare: 1, MeanSeverity: 1, MaxSeverity: 1, Finding: true,
		Recommendation: "Some allocated CPUs did almost nothing: request fewer CPUs (--cpus-per-task, --ntasks), or start as many threads or tasks as CPUs (e.g. OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK)."}
	system = properties.Result{Key: "cpu_system_pct", ID: "cpu_system_pct", Name: "CPU time in the kernel", Unit: "%", Domain: properties.Node,
		Assessed: true, Count: 120, Deciles: deciles(22, 31, 55), Threshold: thr(20), TimeShare: 0.4, MeanSeverity: 0.2, MaxSeverity: 0.9, Finding: true,
		Recommendation: "Much CPU time went to the kernel: make fewer, larger system calls (buffer small reads and writes), avoid busy polling and frequent process creation."}
	noPMU = properties.Result{Key: "cpi", ID: "cpi", Name: "Cycles per instruction", Unit: "ratio", NotAssessed: "instructions: not available: no PMU for this event (typical in VMs)",
		Recommendation: "x"}
	noPMU2     = properties.Result{Key: "flops_rate", ID: "flops_rate", Name: "Floating-point rate", NotAssessed: "fp_ops: not available: no PMU for this event (typical in VMs)", Recommendation: "x"}
	noPSI      = properties.Result{Key: "io_wait", ID: "io_wait", Name: "Time stalled on I/O (PSI)", NotAssessed: "psi_io_some_seconds: file absent (/sys/fs/cgroup/unified/persyst_node1/job_7/io.pressure)", Recommendation: "x"}
	unusedGPUs = properties.Result{Key: "gpu_unused", ID: "gpu_unused", Name: "Allocated GPUs left idle", Unit: "GPUs", Domain: properties.Node,
		Assessed: true, Count: 60, Deciles: deciles(0.5, 0.5, 0.5), Threshold: thr(0.5), TimeShare: 1, MeanSeverity: 1, MaxSeverity: 1, Finding: true,
		Recommendation: "Some allocated GPUs ran nothing: request only the GPUs the program uses (--gpus or --gres=gpu:N), or make it use them all."}
	idleGPU = properties.Result{Key: "gpu_unused", ID: "gpu_unused", Name: "Allocated GPUs left idle", Unit: "GPUs", Domain: properties.Node,
		Assessed: true, Count: 60, Deciles: deciles(1, 1, 1), Threshold: thr(0.5), TimeShare: 0.53, MeanSeverity: 0.53, MaxSeverity: 1, Finding: true,
		Recommendation: "Some allocated GPUs ran nothing."}
	starved = properties.Result{Key: "cpu_starved", ID: "cpu_starved", Name: "Starved of CPU", Unit: "%", Domain: properties.Node,
		Assessed: true, Count: 16, Deciles: deciles(58, 63, 68), Threshold: thr(20), TimeShare: 0.94, MeanSeverity: 0.7, MaxSeverity: 0.8, Finding: true,
		Recommendation: "The job had work for all its CPUs but often waited for them."}
	ioWait = properties.Result{Key: "io_wait", ID: "io_wait", Name: "Time stalled on I/O (PSI)", Unit: "%", Domain: properties.Node,
		Assessed: true, Count: 16, Deciles: deciles(5, 40, 70), Threshold: thr(10), TimeShare: 0.5, MeanSeverity: 0.4, MaxSeverity: 0.9, Finding: true,
		Recommendation: "Tasks often waited for I/O: read and write in larger blocks, use node-local scratch for temporary files, or overlap I/O with computation."}
	fine = properties.Result{Key: "cpu_user_pct", ID: "cpu_user_pct", Name: "CPU time in your code", Unit: "%", Assessed: true, Count: 10, Deciles: deciles(97, 99, 100)}
)

func covering(f Facts, secs float64, samples int) Input {
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	return Input{Facts: f, Measured: sample.Summary{Started: start, Last: start.Add(time.Duration(secs * float64(time.Second))), Seconds: secs, Samples: samples}}
}

// whole states a job's life the measurement covers (within a cycle at each end).
func whole(in Input) Input {
	in.Facts.JobStart, in.Facts.JobEnd, in.Facts.Tolerance = in.Measured.Started.Add(-time.Second), in.Measured.Last.Add(time.Second), 3*time.Second
	return in
}

// partial: a 3-node job of which the digest covers one node, measured from 10 s after
// the job's start, with a daemon restart, made after the job ended.
func partial(in Input) Input {
	in = whole(in)
	start := in.Measured.Started
	in.Facts.JobStart = start.Add(-10 * time.Second)
	in.Measured.Gaps = []sample.Gap{{From: start.Add(5 * time.Second), To: start.Add(13 * time.Second), Why: "the persyst daemon was not running"}}
	in.Facts.Missing = []MissingNode{{Node: "node2", Why: "no collector tree is configured"}, {Node: "node3", Why: "no collector tree is configured"}}
	in.Facts.Late = true
	return in
}

// withGPUs: the job's n GPUs were measured.
func withGPUs(in Input, n int) Input {
	in.Measured.Totals = map[string]float64{sample.GPUs: float64(n)}
	return in
}

// withGPUModel names the job's GPUs (slices of them MIG instances), as the GPU source does.
func withGPUModel(in Input, model string, slices int) Input {
	in.Measured.Totals[sample.GPUSlices] = float64(slices)
	if in.Measured.Methods == nil {
		in.Measured.Methods = map[string]string{}
	}
	in.Measured.Methods[sample.GPUModelMethod] = model
	return in
}

// withEnergy adds what RAPL (and NVML) counted of the job, how, and the site's CO2 factor.
func withEnergy(in Input, totals map[string]float64, how string, co2 float64) Input {
	if in.Measured.Totals == nil {
		in.Measured.Totals = map[string]float64{}
	}
	for k, v := range totals {
		in.Measured.Totals[k] = v
	}
	in.Measured.Methods = map[string]string{sample.MethodEnergy: how}
	in.CO2PerKWh = co2
	return in
}

const (
	howShared = "RAPL (powercap): the job's share of the node's by its CPU time (DRAM: by its memory), an estimate"
	howAlone  = "RAPL (powercap): the node's, the job had it alone"
)

// ended adds how the job ended.
func ended(in Input, e Ending) Input {
	in.Ending = &e
	return in
}

// suspended: Slurm held the job suspended n times for 15 s, a minute apart.
func suspended(in Input, n int) Input {
	for i := range n {
		from := in.Measured.Started.Add(time.Duration(60*i+30) * time.Second)
		in.Measured.Suspended = append(in.Measured.Suspended, sample.Gap{From: from, To: from.Add(15 * time.Second), Why: "suspended by Slurm"})
	}
	return in
}

// earlyWrites are small writes for the job's first quarter.
var earlyWrites = func() properties.Result {
	r := smallWrites
	r.TimeShare, r.MeanSeverity = 0.25, 0.24
	return r
}()

// withPhases: the job wrote in small pieces for its first 4 minutes (phase 1) and
// computed for the remaining 12 (phase 2); its idle CPUs held in both.
func withPhases(in Input) Input {
	start := in.Measured.Started
	mins := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	in.Phases = []phases.Phase{
		{N: 1, Stretches: []phases.Stretch{{From: mins(0), To: mins(4)}}, Intervals: 4, Seconds: 240, Share: 0.25,
			Traits: phases.Traits{CPUBusy: 0.48, SystemShare: 0.6, WriteBytes: 5 << 20, WriteCalls: 50000},
			Held:   map[string]float64{smallWrites.Key: 240, idle.Key: 240}},
		{N: 2, Stretches: []phases.Stretch{{From: mins(4), To: mins(16)}}, Intervals: 12, Seconds: 720, Share: 0.75,
			Traits: phases.Traits{CPUBusy: 0.5}, Held: map[string]float64{idle.Key: 720, system.Key: 20}},
	}
	in.PhasesNode = "node1"
	return in
}

// interfered: a neighbour took half the job's CPUs for lost·(job) seconds, from 14:02 on.
func interfered(in Input, lost float64) Input {
	from := time.Date(2026, 11, 21, 14, 2, 0, 0, time.UTC)
	in.Interference = &phases.Interference{Seconds: in.Measured.Seconds, Assessed: in.Measured.Seconds, LostSeconds: lost * in.Measured.Seconds,
		Share: lost, Class: phases.Class(lost), Intervals: 8, Causes: []phases.Cause{{Key: phases.CauseCPU, LostSeconds: lost * in.Measured.Seconds}},
		Worst: &phases.Stretch{From: from, To: from.Add(8 * time.Minute)}}
	in.PhasesNode = "node1"
	return in
}

// throughoutInterfered: a neighbour shared the job's CPU from its start to its end.
func throughoutInterfered(in Input, lost float64) Input {
	in = interfered(in, lost)
	in.Interference.Intervals = in.Measured.Samples
	in.Interference.Worst = &phases.Stretch{From: in.Measured.Started, To: in.Measured.Last}
	return in
}

// unlike: of a 4-node job, node4 wrote in small pieces for its first 4 minutes while the
// others computed, and lost the most time to interference (node1 is the batch host).
func unlike(in Input) Input {
	start := in.Measured.Started
	in.InterferenceNode = "node4"
	in.Alike = &phases.Alikeness{Nodes: 4, Score: 0.81, Unlike: []phases.UnlikeNode{{Node: "node4", Alike: 0.75, NCPUs: 2, OthersNCPUs: 2,
		Stretch: phases.Stretch{From: start, To: start.Add(4 * time.Minute)},
		Traits:  phases.Traits{CPUBusy: 0.3, WriteBytes: 5e6, WriteCalls: 50000},
		Others:  phases.Traits{CPUBusy: 0.98}}}}
	return in
}

// withEpisode: 37 of the site's 120 jobs stalled on I/O at once from 12:04 to 12:12,
// this one among them.
func withEpisode(in Input) Input {
	from := in.Measured.Started.Add(4 * time.Minute)
	in.Episodes = []episodes.Episode{{From: from, To: from.Add(8 * time.Minute), Jobs: 120, Stalled: 37, Peak: 0.3}}
	return in
}

// assemble makes the report of in with results, judged from minSeconds on.
func assemble(in Input, results []properties.Result, minSeconds float64) Report {
	in.Results, in.MinSeconds = results, minSeconds
	return Assemble(in)
}

func TestTextGolden(t *testing.T) {
	many := []properties.Result{smallWrites, idle, system}
	for i := 0; i < 4; i++ {
		x := system
		x.Key, x.Name, x.MeanSeverity = x.Key+string(rune('a'+i)), x.Name+" "+string(rune('A'+i)), 0.1-0.01*float64(i)
		many = append(many, x)
	}
	tests := []struct {
		name    string
		facts   Input
		results []properties.Result
		min     float64
	}{
		{"no_issues", covering(Facts{JobID: 1234, Nodes: []string{"node1"}, CPUs: 8}, 7380, 124), []properties.Result{fine}, 300},
		{"no_issues_short", covering(Facts{JobID: 7, Nodes: []string{"node1"}, CPUs: 1}, 3.2, 4), []properties.Result{fine}, 300},
		{"one_finding", covering(Facts{JobID: 1234, Nodes: []string{"node1"}, CPUs: 2}, 3725, 63), []properties.Result{fine, idle, noPMU, noPMU2}, 300},
		{"several_findings", covering(Facts{JobID: 99, Nodes: []string{"node1", "node2"}, NNodes: 4, CPUs: 16}, 86400, 1440),
			[]properties.Result{system, fine, smallWrites, idle, noPMU, noPSI, noPMU2}, 300},
		{"short_job", covering(Facts{JobID: 5, Nodes: []string{"node2"}, CPUs: 1}, 12, 3), []properties.Result{smallWrites, noPMU}, 300},
		{"many_findings", covering(Facts{JobID: 42, Nodes: []string{"n1"}, CPUs: 4}, 600, 10), many, 300},
		{"array_task", whole(covering(Facts{JobID: 417, ArrayJobID: 416, ArrayTaskID: 1, Nodes: []string{"node1"}, CPUs: 2}, 3725, 63)),
			[]properties.Result{fine, idle}, 300},
		{"array_task_0_no_issues", whole(covering(Facts{JobID: 416, ArrayJobID: 416, ArrayTaskID: 0, Nodes: []string{"node1"}, CPUs: 2}, 600, 10)),
			[]properties.Result{fine}, 300},
		{"whole_job_no_issues", whole(covering(Facts{JobID: 8, Nodes: []string{"node1"}, CPUs: 4}, 600, 10)), []properties.Result{fine}, 300},
		{"three_nodes_no_issues", whole(covering(Facts{JobID: 9, Nodes: []string{"node1", "node2", "node3"}, NNodes: 3, CPUs: 6}, 600, 10)),
			[]properties.Result{fine}, 300},
		{"part_no_issues", partial(covering(Facts{JobID: 7, Nodes: []string{"node1"}, NNodes: 3, CPUs: 1}, 25, 27)), []properties.Result{fine}, 300},
		{"part_findings", partial(covering(Facts{JobID: 7, Nodes: []string{"node1"}, NNodes: 3, CPUs: 1}, 25, 27)), []properties.Result{fine, smallWrites}, 300},
		{"oom_killed", ended(whole(covering(Facts{JobID: 12, Nodes: []string{"node1"}, CPUs: 1}, 15, 16)),
			Ending{Exit: status(0, 9), OOMKills: 1, MemPeak: 100 << 20, MemRequested: 100 << 20}), []properties.Result{fine, idle}, 300},
		{"failed_no_findings", ended(whole(covering(Facts{JobID: 13, Nodes: []string{"node1"}, CPUs: 1}, 600, 10)),
			Ending{Exit: status(42, 0)}), []properties.Result{fine}, 300},
		{"memory_near_limit", ended(whole(covering(Facts{JobID: 14, Nodes: []string{"node1"}, CPUs: 2}, 600, 10)),
			Ending{Exit: status(0, 0), AnonPeak: 182 << 20, MemPeak: 190 << 20, MemRequested: 200 << 20}), []properties.Result{fine, idle}, 300},
		{"memory_near_limit_no_findings", ended(whole(covering(Facts{JobID: 15, Nodes: []string{"node1"}, CPUs: 2}, 600, 10)),
			Ending{Exit: status(0, 0), AnonPeak: 182 << 20, MemRequested: 200 << 20}), []properties.Result{fine}, 300},
		{"suspended_no_findings", suspended(whole(covering(Facts{JobID: 16, Nodes: []string{"node1"}, CPUs: 2}, 40, 40)), 1), []properties.Result{fine}, 300},
		{"suspended_findings", suspended(whole(covering(Facts{JobID: 17, Nodes: []string{"node1"}, CPUs: 2}, 600, 600)), 5), []properties.Result{fine, smallWrites}, 300},
		{"gpu_job", withGPUs(whole(covering(Facts{JobID: 18, Nodes: []string{"gpu1"}, CPUs: 16}, 3600, 60)), 4), []properties.Result{fine, unusedGPUs, idle}, 300},
		{"gpu_job_two_nodes", withGPUs(whole(covering(Facts{JobID: 20, Nodes: []string{"gpu1", "gpu2"}, NNodes: 2, CPUs: 32}, 3600, 60)), 4),
			[]properties.Result{fine, unusedGPUs}, 300},
		{"one_gpu_idle", withGPUs(whole(covering(Facts{JobID: 19, Nodes: []string{"gpu1"}, CPUs: 4}, 3600, 60)), 1), []properties.Result{fine, idleGPU}, 300},
		// AMD's GPU named, vendor first; a MIG slice left idle is told of its slice.
		{"amd_gpu_no_issues", withGPUModel(withGPUs(whole(covering(Facts{JobID: 30, Nodes: []string{"mi1"}, CPUs: 8}, 3600, 60)), 1), "AMD Instinct MI250X", 0),
			[]properties.Result{fine}, 300},
		{"mig_slice_idle", withGPUModel(withGPUs(whole(covering(Facts{JobID: 31, Nodes: []string{"gpu1"}, CPUs: 4}, 3600, 60)), 1), "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 1),
			[]properties.Result{fine, idleGPU}, 300},
		{"phases_interference", interfered(withPhases(whole(covering(Facts{JobID: 21, Nodes: []string{"node1"}, CPUs: 2}, 960, 16))), 0.12),
			[]properties.Result{fine, earlyWrites, idle}, 300},
		{"interference_high_no_findings", interfered(whole(covering(Facts{JobID: 22, Nodes: []string{"node1"}, CPUs: 2}, 960, 16)), 0.31),
			[]properties.Result{fine}, 300},
		{"interference_all_through", throughoutInterfered(whole(covering(Facts{JobID: 23, Nodes: []string{"node1"}, CPUs: 1}, 960, 16)), 0.45),
			[]properties.Result{fine}, 300},
		{"nodes_unlike", unlike(interfered(whole(covering(Facts{JobID: 24, Nodes: []string{"node1", "node2", "node3", "node4"}, NNodes: 4, CPUs: 8}, 960, 16)), 0.09)),
			[]properties.Result{fine, earlyWrites}, 300},
		// Two threads, a neighbour's two beside them: some thread waited 63 % of the time,
		// the job lost 37 %; the digest says why the two differ.
		{"starved_interference", throughoutInterfered(whole(covering(Facts{JobID: 26, Nodes: []string{"node1"}, CPUs: 2}, 960, 16)), 0.37),
			[]properties.Result{fine, starved}, 300},
		{"io_episode", withEpisode(whole(covering(Facts{JobID: 25, Nodes: []string{"node1"}, CPUs: 4}, 960, 16))),
			[]properties.Result{fine, ioWait}, 300},
		{"energy_shared", withEnergy(whole(covering(Facts{JobID: 27, Nodes: []string{"node1"}, CPUs: 2}, 3725, 63)),
			map[string]float64{sample.EnergyPkgJoules: 812_000, sample.EnergyRAMJoules: 95_000}, howShared, 0), []properties.Result{fine, idle}, 300},
		{"energy_alone_no_issues", withEnergy(whole(covering(Facts{JobID: 28, Nodes: []string{"node1"}, CPUs: 64}, 86400, 1440)),
			map[string]float64{sample.EnergyPkgJoules: 38_500_000, sample.EnergyRAMJoules: 4_100_000}, howAlone, 380), []properties.Result{fine}, 300},
		{"energy_gpus_two_nodes", withEnergy(withGPUs(whole(covering(Facts{JobID: 29, Nodes: []string{"gpu1", "gpu2"}, NNodes: 2, CPUs: 32}, 3600, 60)), 4),
			map[string]float64{sample.EnergyPsysJoules: 1_900_000, sample.GPUEnergyJoules: 7_200_000}, "RAPL (perf power PMU): the node's, the job had it alone", 0),
			[]properties.Result{fine, unusedGPUs}, 300},
		{"persyst_run", covering(Facts{Command: "./my_program --input data.h5", Nodes: []string{"vm"}, CPUs: 2}, 65, 65), []properties.Result{smallWrites, noPMU}, 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Text(assemble(tc.facts, tc.results, tc.min), TextOptions{})
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			if len(lines) > 30 {
				t.Errorf("%d lines, want at most 30", len(lines))
			}
			for i, l := range lines {
				if len(l) > 80 {
					t.Errorf("line %d has %d columns: %q", i+1, len(l), l)
				}
				if strings.ContainsRune(l, '\x1b') {
					t.Errorf("line %d has an escape sequence", i+1)
				}
			}
			testenv.Golden(t, filepath.Join("testdata", tc.name+".golden"), got, *update, "go test ./digest -run TestText -update")
		})
	}
}

// TestTextCleansText: nothing in a report reaches the text digest as a control or format
// character (terminal escapes, bidirectional overrides), and a finding without values
// does not break it.
func TestTextCleansText(t *testing.T) {
	f := smallWrites
	f.Name, f.Recommendation, f.Deciles = "Small\x1b[2J writes", "buffer\u202eoutput\x07", nil
	r := assemble(covering(Facts{JobID: 9, Command: "prog \x1b]0;owned\x07", Nodes: []string{"n1\x1b[1m", "n2"}, NNodes: 3, CPUs: 2}, 600, 10),
		[]properties.Result{f}, 300)
	r.NotAssessed = []NotAssessed{{Reason: "no\x1bPMU", Properties: []string{"cpi\r"}}}
	for _, o := range []TextOptions{{}, {Width: 40}} {
		got := Text(r, o)
		if strings.ContainsAny(got, "\x1b\x07\r\u202e") {
			t.Errorf("text digest holds control characters: %q", got)
		}
		if !strings.Contains(got, "(no value)") {
			t.Errorf("finding without values: %q", got)
		}
	}
}

// TestTextUnicode: a command line with non-ASCII characters is cut between characters,
// never inside one, and the header rule fills the width in characters; persyst run's
// digest never points at persyst report.
func TestTextUnicode(t *testing.T) {
	many := []properties.Result{smallWrites, idle, system}
	for i := 0; i < 4; i++ {
		x := system
		x.Key, x.Name, x.MeanSeverity = x.Key+string(rune('a'+i)), x.Name+" "+string(rune('A'+i)), 0.1-0.01*float64(i)
		many = append(many, x)
	}
	cmd := "./simulate --titre=" + strings.Repeat("é", 100)
	got := Text(assemble(covering(Facts{Command: cmd, Nodes: []string{"vm"}, CPUs: 2}, 600, 10), many, 300), TextOptions{})
	for i, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if !utf8.ValidString(l) {
			t.Errorf("line %d is not valid UTF-8: %q", i+1, l)
		}
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line %d has %d characters", i+1, n)
		}
		if i == 0 && utf8.RuneCountInString(l) != 80 {
			t.Errorf("the header rule has %d characters, want 80: %q", utf8.RuneCountInString(l), l)
		}
	}
	if strings.Contains(got, "persyst report") || !strings.Contains(got, "more (persyst run --json)") {
		t.Errorf("persyst run's digest:\n%s", got)
	}
}

// TestTextStartupOnly: a job that ended within its start-up was not judged, so its digest
// never says "no issues found"; what happened to it (an OOM kill) is still stated.
func TestTextStartupOnly(t *testing.T) {
	startup := idle
	startup.Assessed, startup.NotAssessed, startup.Finding = false, properties.StartupOnly, false
	for _, tc := range []struct {
		name   string
		ending *Ending
		want   string
	}{
		{"nothing happened", nil, "too short to judge"},
		{"killed at its start", &Ending{OOMKills: 1}, "Nothing else to judge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := covering(Facts{JobID: 3, Nodes: []string{"node1"}, CPUs: 1}, 0.4, 1)
			f.Ending = tc.ending
			r := assemble(f, []properties.Result{startup}, 300)
			got := Text(r, TextOptions{})
			if !r.StartupOnly || !strings.Contains(got, tc.want) || strings.Contains(got, "no issues found") {
				t.Errorf("startup_only %v, text:\n%s\nwant %q, never \"no issues found\"", r.StartupOnly, got, tc.want)
			}
		})
	}
}

// TestTextSampledCounts: counts of system calls taken in samples are estimates, and the
// digest says so; counted every call, it says nothing of how.
func TestTextSampledCounts(t *testing.T) {
	for _, tc := range []struct {
		name, how string
		want      bool
	}{
		{"sampled", "eBPF (raw tracepoint), counted during 12 % of the time and scaled (counting every call would have cost the node's programs more than 0.5 % of a CPU, or those outside the jobs more than 0.062 %)", true},
		{"every call", "eBPF (fentry), every call", false},
		{"perf", "perf tracepoints, every call", false},
		{"not said", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := assemble(covering(Facts{JobID: 3, Nodes: []string{"node1"}, CPUs: 2}, 600, 10), []properties.Result{smallWrites}, 300)
			if tc.how != "" {
				r.Methods = map[string]string{"system calls": tc.how}
			}
			got := Text(r, TextOptions{})
			if has := strings.Contains(got, "counted during 12 %"); has != tc.want {
				t.Errorf("the digest says how (%v), want %v:\n%s", has, tc.want, got)
			}
		})
	}
}

// TestTextKeepsNotes: a digest that would run over 30 lines shows fewer findings (the
// rest counted) before it cuts anything: the note that memory came close to the limit,
// after the findings, stays. (A CI run's digest of a job near its limit, beside a noisy
// neighbour, had three findings and lost the note to the cut.)
func TestTextKeepsNotes(t *testing.T) {
	var fs []properties.Result
	for i := range 5 {
		f := smallWrites
		f.Key, f.Name = fmt.Sprintf("finding_%d", i), fmt.Sprintf("Finding %d", i)
		f.Recommendation = strings.Repeat("A recommendation long enough to take several lines of the digest. ", 3)
		fs = append(fs, f)
	}
	r := assemble(covering(Facts{JobID: 9, Nodes: []string{"n1"}, NNodes: 1, CPUs: 1}, 600, 10), fs, 300)
	r.Notes = []Event{{Key: "memory_near_limit", Text: "Memory came close to the limit: the job used 186.6 MiB, 93% of the 200.0 MiB requested."}}
	got := Text(r, TextOptions{})
	if n := strings.Count(got, "\n"); n > maxLines || !strings.Contains(got, "Note: Memory came close to the limit") ||
		strings.Contains(got, "digest cut") || !strings.Contains(got, "more (persyst report") {
		t.Errorf("a long digest with a note (%d lines):\n%s", n, got)
	}
}
