package properties

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/sample"
)

// TestOneCauseOnce runs the built-in catalog and strategy over a job on 2 CPUs, 10
// cycles of 1 s, and checks which findings remain once causes fold their symptoms:
//   - one busy thread: idle CPUs, and not also the imbalance they cause;
//   - two threads that got 1 CPU between them and waited on run queues for another
//     (PSI some 65 %): starved, neither idle nor unequal;
//   - one thread that waited 0.4 s a second beside a neighbour: idle CPUs first (the job
//     cannot use the second CPU), waiting for a CPU beside it, ranked below;
//   - two balanced threads: nothing;
//   - eight busy threads on the two CPUs (busy, 6 s of run-queue waits a second):
//     oversubscribed, not starved;
//   - threads sleeping on a contended lock (a million futex calls a second, half the
//     CPU time in the kernel): lock contention, which explains the kernel time, the waits
//     and the idle time;
//   - a shell loop starting 500 programs a second, with the small reads and opens that
//     causes: programs started, whatever the symptoms score.
func TestOneCauseOnce(t *testing.T) {
	e, err := Load(Settings{MinSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	run := func(busy0, busy1, psi, wait float64, extra map[string]float64) []string {
		acc := e.NewAccumulator(JobInfo{NCPUs: 2})
		t0 := time.Unix(1_800_000_000, 0)
		for i := 0; i < 10; i++ {
			s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Reason: sample.Cycle, Seconds: 1,
				Job: map[string]float64{sample.CPUUserSeconds: busy0 + busy1, sample.CPUSystemSeconds: 0, sample.PSICPUSomeSeconds: psi,
					"sched_wait_seconds": wait, "sched_busy_thread_seconds": busy0 + busy1 + wait, "context-switches": 500, "syscalls:sys_enter_futex": 100, "sched:sched_process_exec": 0,
					"task:task_newtask": 0},
				CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": busy0 * 1e9}}, {CPU: 1, Values: map[string]float64{"task-clock": busy1 * 1e9}}}}
			for k, v := range extra {
				s.Job[k] = v
			}
			acc.Add(s)
		}
		rs := Fold(acc.Finish(nil, sample.Summary{Seconds: 10, Samples: 10}))
		var keys []string
		for _, r := range Findings(rs) {
			keys = append(keys, r.Key)
		}
		for _, r := range rs {
			if r.Key == "intra_node_imbalance" && !r.Finding && r.Suppressed != "" && !strings.HasPrefix(r.Suppressed, "explained by ") {
				t.Errorf("folded result says %q", r.Suppressed)
			}
		}
		return keys
	}
	for _, tc := range []struct {
		name                   string
		busy0, busy1, ps, wait float64
		extra                  map[string]float64
		want                   []string
	}{
		{"one busy thread", 1, 0, 0, 0, nil, []string{"idle_cores"}},
		// PSI "some" counts the time any thread waited once; run-queue waits add up.
		{"starved", 0.5, 0.5, 0.65, 1.0, nil, []string{"cpu_starved"}},
		{"waiting beside a neighbour", 0.6, 0, 0.4, 0.4, nil, []string{"idle_cores", "cpu_pressure"}},
		// One busy thread on an overloaded node: it and the brief wakers beside it (a
		// runtime's, slurmstepd's) waited a CPU's worth in all, but one thread had work.
		{"one busy thread on a loaded node", 0.8, 0, 0.45, 1.1, map[string]float64{"sched_busy_thread_seconds": 1.0}, []string{"idle_cores", "cpu_pressure"}},
		{"balanced", 1, 1, 0, 0, nil, nil},
		// Two busy threads that others kept off their CPUs for 0.3 s of each second, below
		// the busy-thread rule (1.67 of 1.8): they wanted the CPUs, none left idle.
		{"balanced, others took some of its CPUs", 0.83, 0.63, 0, 0.26, map[string]float64{"sched_busy_thread_seconds": 1.67, sample.NodeCPUsBusySeconds: 1.76}, nil},
		// One CPU busier than the other with nobody else on them: imbalance; the same
		// counts where other work took the rest of the quieter CPU: the job did not leave
		// it unequal (its loss is interference).
		{"imbalanced, nobody else", 1, 0.7, 0, 0, map[string]float64{sample.NodeCPUsBusySeconds: 1.7}, []string{"intra_node_imbalance"}},
		{"unequal where others took a CPU", 1, 0.7, 0, 0, map[string]float64{sample.NodeCPUsBusySeconds: 2.0}, nil},
		{"oversubscribed", 1, 1, 1, 6, nil, []string{"oversubscription"}},
		// Eight busy threads on two CPUs that other work shared: still too many threads.
		{"oversubscribed beside a neighbour", 0.8, 0.8, 1, 6.4, nil, []string{"oversubscription"}},
		// Two busy threads on two CPUs beside a neighbour, with brief wakers whose waits
		// add up to a CPU on the loaded node: starved, not oversubscribed.
		{"starved with wakers", 0.5, 0.5, 0.75, 2.0, map[string]float64{"sched_busy_thread_seconds": 2.0}, []string{"cpu_starved"}},
		// Held to half a CPU by its quota, its threads wait for CPU: throttled, not starved.
		{"throttled by its quota", 0.25, 0.25, 0.9, 1.5, map[string]float64{"cpu_periods": 10, "cpu_throttled_periods": 10}, []string{"cpu_throttled"}},
		{"contended lock", 1, 0.95, 1, 12, map[string]float64{"syscalls:sys_enter_futex": 2e6, sample.CPUSystemSeconds: 1, sample.CPUUserSeconds: 0.95},
			[]string{"lock_contention"}},
		// A shell loop's fork and exec per command: programs started, not a fork storm.
		{"programs started", 0.6, 0.1, 0, 0, map[string]float64{"sched:sched_process_exec": 500, "task:task_newtask": 500, sample.CPUSystemSeconds: 0.5,
			sample.CPUUserSeconds: 0.2, sample.ReadChars: 500 * 4000, sample.ReadSyscalls: 500 * 8, "syscalls:sys_enter_openat": 500 * 5, "context-switches": 6000},
			[]string{"process_creation_rate"}},
		// Processes forked and reaped that start no program (stress-ng --fork, subshells):
		// the kernel time and switches are theirs.
		{"processes forked", 0.9, 0.9, 0, 0, map[string]float64{"task:task_newtask": 4000, sample.CPUSystemSeconds: 1.6, sample.CPUUserSeconds: 0.2,
			"context-switches": 60000},
			[]string{"process_fork_rate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, run(tc.busy0, tc.busy1, tc.ps, tc.wait, tc.extra)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFold: a finding folds the findings it explains, in the order of the scores; a
// folded finding folds nothing, so two findings that name each other never both vanish.
func TestFold(t *testing.T) {
	rs := []Result{
		{Key: "a", Name: "A", Finding: true, Score: 0.9, Folds: []string{"b"}},
		{Key: "b", Name: "B", Finding: true, Score: 0.5, Folds: []string{"a", "c"}},
		{Key: "c", Name: "C", Finding: true, Score: 0.4},
		{Key: "d", Name: "D", Finding: false, Folds: []string{"c"}},
	}
	got := Fold(rs)
	var keys []string
	for _, r := range Findings(got) {
		keys = append(keys, r.Key)
	}
	if diff := cmp.Diff([]string{"a", "c"}, keys); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if got[1].Suppressed != "explained by A" || rs[1].Finding != true {
		t.Errorf("b: %+v (and the input must not change: %+v)", got[1], rs[1])
	}
}

// TestFileOpensCountEveryOpenCall: the open rate counts open(2) and openat(2) (and the
// others) together; without any open tracepoint it is not assessed, with the reason.
func TestFileOpensCountEveryOpenCall(t *testing.T) {
	e, err := Load(Settings{MinSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	rate := func(job map[string]float64) Result {
		acc := e.NewAccumulator(JobInfo{NCPUs: 1})
		t0 := time.Unix(1_800_000_000, 0)
		for i := 0; i < 4; i++ {
			acc.Add(sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Reason: sample.Cycle, Seconds: 1, Job: job})
		}
		for _, r := range acc.Finish(nil, sample.Summary{Seconds: 4, Samples: 4}) {
			if r.Key == "file_open_rate" {
				return r
			}
		}
		t.Fatal("no file_open_rate")
		return Result{}
	}
	r := rate(map[string]float64{"syscalls:sys_enter_open": 3000, "syscalls:sys_enter_openat": 1500})
	if r.Median() != 4500 || !r.Finding {
		t.Errorf("open + openat: median %v, finding %v; want 4500/s, a finding", r.Median(), r.Finding)
	}
	r = rate(map[string]float64{sample.CPUUserSeconds: 1})
	if r.Assessed || !strings.Contains(r.NotAssessed, "no open system call is traced") {
		t.Errorf("without tracepoints: %+v", r)
	}
}

// TestStartupAndSubSecond: the first second of a job's measurement is never judged, and a
// bottleneck that held for less than a second of wall-clock time is not a finding. A job
// on 2 CPUs runs one busy thread throughout (idle_cores, severe in every interval).
func TestStartupAndSubSecond(t *testing.T) {
	e, err := Load(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	one := func(end, seconds float64, reason sample.Reason) sample.Sample {
		return sample.Sample{Time: t0.Add(time.Duration(end * float64(time.Second))), Reason: reason, Seconds: seconds,
			Job: map[string]float64{sample.CPUUserSeconds: seconds},
			CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": seconds * 1e9}}, {CPU: 1, Values: map[string]float64{"task-clock": 0}}}}
	}
	for _, tc := range []struct {
		name        string
		samples     []sample.Sample
		finding     bool
		notAssessed string
		suppressed  string
	}{
		{"ended within its start-up", []sample.Sample{one(0.4, 0.4, sample.End)}, false, StartupOnly, ""},
		{"a start-up read then half a second", []sample.Sample{one(1, 1, sample.Startup), one(1.5, 0.5, sample.End)}, false, "",
			"held for 0.5 s only: an effect shorter than 1 s is not a finding"},
		{"a cycle read within the start-up, then 3 s", []sample.Sample{one(0.3, 0.3, sample.Cycle), one(1, 0.7, sample.Startup), one(2, 1, sample.Cycle),
			one(4, 2, sample.End)}, true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acc := e.NewAccumulator(JobInfo{Started: t0, NCPUs: 2})
			for _, s := range tc.samples {
				acc.Add(s)
			}
			last := tc.samples[len(tc.samples)-1]
			for _, r := range acc.Finish(tc.samples, sample.Summary{Started: t0, Seconds: last.Time.Sub(t0).Seconds(), Samples: len(tc.samples)}) {
				if r.Key != "idle_cores" {
					continue
				}
				got := [3]string{strconv.FormatBool(r.Finding), r.NotAssessed, r.Suppressed}
				want := [3]string{strconv.FormatBool(tc.finding), tc.notAssessed, tc.suppressed}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("idle_cores (finding, not assessed, suppressed) (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestSuspendedNotJudged: intervals Slurm held the job suspended are neither judged nor
// part of the time a finding's share is of: a job keeping both CPUs busy, suspended for
// a third of its life, has no idle-CPU finding, and its judged time is the rest.
func TestSuspendedNotJudged(t *testing.T) {
	e, err := Load(Settings{MinSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		suspended  float64 // sample.SuspendedSeconds of the still intervals
		want       []string
		wantJudged float64
	}{
		{"suspended by Slurm", 1, nil, 10},
		{"idle by itself", 0, []string{"idle_cores"}, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acc := e.NewAccumulator(JobInfo{NCPUs: 2})
			t0 := time.Unix(1_800_000_000, 0)
			for i := range 15 {
				busy := 1.0
				if i >= 5 && i < 10 {
					busy = 0 // stopped
				}
				s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Reason: sample.Cycle, Seconds: 1,
					Job: map[string]float64{sample.CPUUserSeconds: 2 * busy, sample.CPUSystemSeconds: 0},
					CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": busy * 1e9}}, {CPU: 1, Values: map[string]float64{"task-clock": busy * 1e9}}}}
				if busy == 0 {
					s.Job[sample.SuspendedSeconds] = tc.suspended
				}
				acc.Add(s)
			}
			var got []string
			for _, r := range Findings(Fold(acc.Finish(nil, sample.Summary{Seconds: 15, Samples: 15}))) {
				got = append(got, r.Key)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if judged, _ := acc.Judged(); judged != tc.wantJudged {
				t.Errorf("judged %v s, want %v", judged, tc.wantJudged)
			}
		})
	}
}

// TestKernelTimeNeedsItsCalls: lock contention explains a job's kernel time only when
// its futex calls, at the node's cost of a call, come to a quarter of it or more. A Go
// program in a storm of stat calls (70 % of its time in the kernel) whose runtime makes
// 12,000 futex calls a second is told of its kernel time first; a contended lock (two
// million futex calls a second, half the time in the kernel) still folds it.
func TestKernelTimeNeedsItsCalls(t *testing.T) {
	e, err := Load(Settings{MinSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	findings := func(futex, system float64) []string {
		acc := e.NewAccumulator(JobInfo{NCPUs: 1})
		t0 := time.Unix(1_800_000_000, 0)
		totals := map[string]float64{}
		for i := range 10 {
			s := sample.Sample{Time: t0.Add(time.Duration(i+2) * time.Second), Reason: sample.Cycle, Seconds: 1,
				Job: map[string]float64{sample.CPUUserSeconds: 1 - system, sample.CPUSystemSeconds: system, "syscalls:sys_enter_futex": futex,
					"context-switches": 500, "sched:sched_process_exec": 0, sample.ReadSyscalls: 10, sample.ReadChars: 1000, sample.WriteSyscalls: 10, sample.WriteChars: 1000},
				CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": 1e9}}}}
			acc.Add(s)
			for k, v := range s.Job {
				totals[k] += v
			}
		}
		var keys []string
		for _, r := range Findings(Fold(acc.Finish(nil, sample.Summary{Seconds: 10, Samples: 10, Totals: totals}))) {
			keys = append(keys, r.Key)
		}
		return keys
	}
	if got := findings(12000, 0.7); !slices.Contains(got, KernelTime) || !slices.Contains(got, "lock_contention") || got[0] != KernelTime {
		t.Errorf("a storm of other calls beside a runtime's futex calls: findings %v, want the kernel time first, lock contention too", got)
	}
	if got := findings(2e6, 0.5); slices.Contains(got, KernelTime) || len(got) == 0 || got[0] != "lock_contention" {
		t.Errorf("a contended lock: findings %v, want lock contention, the kernel time folded under it", got)
	}
}

// TestStolenCPU: an interval in which the hypervisor stole a job's CPU is not held
// against the job's use of its CPUs: a balanced two-thread job that lost most of one CPU
// to steal for a second of its four gets no finding (its digest says what it lost to
// interference), while a one-thread job whose idle second CPU another process filled,
// nothing stolen, is still told it left a CPU idle. A balanced job whose two busy threads
// lost a fifth of a CPU to other processes for a second, waiting for it (under
// starvation's threshold), left no CPU idle either.
func TestStolenCPU(t *testing.T) {
	e, err := Load(Settings{MinSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	// threads are the seconds of busy threads (ran or waited half the interval; nil:
	// the CPU time, as when nothing waited).
	findingsOf := func(busy [][2]float64, node, steal, threads []float64) []string {
		acc := e.NewAccumulator(JobInfo{NCPUs: 2})
		t0 := time.Unix(1_800_000_000, 0)
		for i, b := range busy {
			th := b[0] + b[1]
			if threads != nil {
				th = threads[i]
			}
			s := sample.Sample{Time: t0.Add(time.Duration(i+2) * time.Second), Reason: sample.Cycle, Seconds: 1,
				Job: map[string]float64{sample.CPUUserSeconds: b[0] + b[1], sample.CPUSystemSeconds: 0, sample.PSICPUSomeSeconds: 0,
					"sched_wait_seconds": 0, "sched_busy_thread_seconds": th, "context-switches": 500, "syscalls:sys_enter_futex": 100,
					"sched:sched_process_exec": 0, sample.NodeCPUsBusySeconds: node[i], sample.NodeCPUsStealSeconds: steal[i]},
				CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": b[0] * 1e9}}, {CPU: 1, Values: map[string]float64{"task-clock": b[1] * 1e9}}}}
			acc.Add(s)
		}
		var keys []string
		for _, r := range Findings(Fold(acc.Finish(nil, sample.Summary{Seconds: float64(len(busy)), Samples: len(busy)}))) {
			keys = append(keys, r.Key)
		}
		return keys
	}
	findings := func(busy [][2]float64, node, steal []float64) []string { return findingsOf(busy, node, steal, nil) }
	taken := findingsOf([][2]float64{{0.95, 0.95}, {0.95, 0.45}, {0.95, 0.45}, {0.95, 0.45}}, []float64{1.95, 1.9, 1.9, 1.9}, []float64{0, 0, 0, 0},
		[]float64{2, 2, 2, 2})
	if len(taken) != 0 {
		t.Errorf("a balanced job whose busy threads waited while others took a CPU: findings %v, want none", taken)
	}
	if nothing := findingsOf([][2]float64{{0.95, 0.95}, {0.95, 0.45}, {0.95, 0.45}, {0.95, 0.45}}, []float64{1.95, 1.9, 1.9, 1.9}, []float64{0, 0, 0, 0},
		[]float64{1.9, 1.4, 1.4, 1.4}); !slices.Contains(nothing, "idle_cores") {
		t.Errorf("the same CPU use with one thread that slept: findings %v, want idle_cores", nothing)
	}
	stolen := findings([][2]float64{{0.95, 0.95}, {0.95, 0.95}, {0.95, 0.95}, {0.36, 0.89}}, []float64{1.95, 1.95, 1.95, 1.98}, []float64{0, 0, 0, 0.62})
	if len(stolen) != 0 {
		t.Errorf("a balanced job that lost a CPU to steal for a second: findings %v, want none", stolen)
	}
	filled := findings([][2]float64{{0.95, 0.02}, {0.95, 0.02}, {0.95, 0.02}, {0.95, 0.02}}, []float64{1.97, 1.97, 1.97, 1.97}, []float64{0, 0, 0, 0})
	if !slices.Contains(filled, "idle_cores") {
		t.Errorf("a job that left a CPU idle, another process on it: findings %v, want idle_cores", filled)
	}
}
