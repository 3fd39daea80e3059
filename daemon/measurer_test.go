package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/kmsg"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

// TestMeasurerCycle runs the measurement loop on a fake clock over a fake node (a cgroup v2
// job directory under a temporary root, no perf): reads happen exactly at multiples of the
// cycle, every running job gets one sample per cycle, a job end takes a final read, and
// the job's summary is available through the measurer afterwards.
func TestMeasurerCycle(t *testing.T) {
	root, setCPU := fakeNode(t, 7)
	usage := 0
	now := time.Date(2026, 11, 21, 12, 0, 7, 500_000_000, time.UTC)
	clock := func() time.Time { return now }
	reg := newReg(t, RegistryConfig{})
	engine := propertiestest.Engine(t)
	var appended []digest.Target
	var texts []string
	dig := DigestConfig{
		Engine: engine,
		Facts:  fakeFacts{7: {JobID: 7, WorkDir: "/home/u", Stdout: "slurm-7.out", MemPerNodeMB: 4096}},
		Append: func(_ context.Context, tg digest.Target, text []byte) error {
			appended, texts = append(appended, tg), append(texts, string(text))
			return nil
		},
	}
	stateDir := t.TempDir()
	m, err := NewMeasurer(MeasureConfig{Root: root, Cycle: 10 * time.Second, StateDir: stateDir, Digest: dig}, reg, "node1", zerolog.Nop(), clock)
	if err != nil {
		t.Fatal(err)
	}
	ev := &wire.Event{JobID: 7, UID: 1000, Persyst: wire.On, StepID: "batch", Time: now}
	j, err := reg.Apply(wire.StepStart, ev, now)
	if err != nil {
		t.Fatal(err)
	}
	if join := prepareNow(m, j); join != "" {
		t.Errorf("Prepare joined %q although persyst's cgroup cannot be created", join)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var waits []time.Time
	wait := func(ctx context.Context, until time.Time) error {
		if len(waits) == 5 {
			cancel()
			return ctx.Err()
		}
		waits = append(waits, until)
		now = until
		usage += 1_000_000 // the job used 1 s of CPU per cycle
		setCPU(usage)
		return nil
	}
	if err := m.Run(ctx, wait); err != nil {
		t.Fatal(err)
	}
	for i, w := range waits {
		if w.UnixNano()%int64(10*time.Second) != 0 {
			t.Errorf("read %d at %v: not a multiple of the cycle", i, w)
		}
		if i > 0 && w.Sub(waits[i-1]) != 10*time.Second {
			t.Errorf("read %d %v after the previous one, want 10s", i, w.Sub(waits[i-1]))
		}
	}
	if len(waits) != 5 || !waits[0].Equal(time.Date(2026, 11, 21, 12, 0, 10, 0, time.UTC)) {
		t.Fatalf("reads at %v, want 5 from 12:00:10", waits)
	}
	samples := m.Samples(7)
	if len(samples) != 5 {
		t.Fatalf("%d samples, want 5", len(samples))
	}
	for i, s := range samples {
		if s.Job[sample.CPUUserSeconds] != 1 {
			t.Errorf("sample %d: user CPU %v s, want 1", i, s.Job[sample.CPUUserSeconds])
		}
	}
	now = now.Add(3 * time.Second)
	usage += 500_000
	setCPU(usage)
	// The batch step ended: the digest is written once, as the job's user, into the
	// output file the job map names, and the report is kept.
	for i := 0; i < 2; i++ {
		if err := m.digest(context.Background(), j, atBatchEnd, nil); err != nil {
			t.Fatalf("Digest: %v", err)
		}
	}
	if len(appended) != 1 || appended[0].Path != "/home/u/slurm-7.out" || appended[0].UID != 1000 {
		t.Fatalf("appended %+v, want once to /home/u/slurm-7.out as uid 1000", appended)
	}
	if !strings.Contains(texts[0], "persyst: job 7") {
		t.Errorf("digest text:\n%s", texts[0])
	}
	rep, err := m.Report(7)
	if err != nil || rep.JobID != 7 || rep.Samples != 5 {
		t.Fatalf("report: %+v %v", rep, err)
	}
	for _, p := range rep.Properties {
		if p.Key == "memory_unused" && !strings.Contains(p.NotAssessed, "mem_peak_bytes") {
			t.Errorf("memory_unused with a 4 GiB request but no memory measured: %q", p.NotAssessed)
		}
	}
	saved := filepath.Join(stateDir, "reports", "7.json")
	if _, err := os.Stat(saved); err != nil {
		t.Errorf("report not saved: %v", err)
	}
	m.end(7)
	s := m.Summary(7)
	if s == nil || !s.Ended || s.Samples != 6 || s.Totals[sample.CPUUserSeconds] != 5.5 || s.CPUs != "2-3" {
		t.Fatalf("summary after the end = %+v; want ended, 6 samples, 5.5 s user CPU, CPUs 2-3", s)
	}
	if why := s.NotMeasured["task-clock"]; why == "" {
		t.Errorf("task-clock has no not-measured reason")
	}
	// Once the registry drops the job, its report goes too.
	m.Forget(func(uint32) bool { return false })
	if _, err := os.Stat(filepath.Join(stateDir, "reports", "7.json")); !os.IsNotExist(err) {
		t.Errorf("report of a forgotten job still saved: %v", err)
	}
}

// fakeNode is a node under a temporary root for job id: a cgroup v2 job directory on
// CPUs 2-3, no perf (persyst's own cgroups cannot be made). setCPU sets the job's CPU use
// in µs.
func fakeNode(t *testing.T, id int) (root string, setCPU func(usec int)) {
	t.Helper()
	root, set := fakeNodeJobs(t, id)
	return root, func(usec int) { set(id, usec) }
}

// fakeNodeJobs is fakeNode for several jobs (each on CPUs 2-3); setCPU sets a job's CPU use.
func fakeNodeJobs(t testing.TB, ids ...int) (root string, setCPU func(id, usec int)) {
	t.Helper()
	root = t.TempDir()
	mnt := "/sys/fs/cgroup"
	jobDir := func(id int) string {
		return filepath.Join(mnt, "system.slice/node1_slurmstepd.scope/job_"+strconv.Itoa(id))
	}
	for _, d := range []string{filepath.Join(root, "proc/self"), filepath.Join(root, "sys/devices/system/cpu")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A cgroup2 mount that is read-only for persyst's own cgroups: perf is not measured.
	write("proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n")
	write("sys/devices/system/cpu/online", "0-3\n")
	cpuStat := func(usec int) string {
		return "usage_usec " + strconv.Itoa(usec) + "\nuser_usec " + strconv.Itoa(usec) + "\nsystem_usec 0\n"
	}
	used := map[int]int{}
	setCPU = func(id, usec int) {
		write(filepath.Join(jobDir(id), "cpu.stat"), cpuStat(usec))
		used[id] = usec
		all := 0
		for _, u := range used {
			all += u
		}
		write(filepath.Join(filepath.Dir(jobDir(id)), "cpu.stat"), cpuStat(all)) // the scope of all jobs
	}
	for _, id := range ids {
		if err := os.MkdirAll(filepath.Join(root, jobDir(id)), 0o755); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(jobDir(id), "cgroup.procs"), "")
		write(filepath.Join(jobDir(id), "cpuset.cpus.effective"), "2-3\n")
		setCPU(id, 0)
	}
	// Make persyst's cgroup parent uncreatable: a file where the directory would go.
	write(filepath.Join(mnt, "persyst_node1"), "")
	return root, setCPU
}

type fakeFacts map[uint32]*jobmap.Job

func (f fakeFacts) Job(_ context.Context, id string) (*jobmap.Job, error) {
	n, _ := strconv.ParseUint(id, 10, 32)
	if j, ok := f[uint32(n)]; ok {
		return j, nil
	}
	return nil, fmt.Errorf("job %s: %w", id, jobmap.ErrNoJob)
}

// countingFacts is a job map whose answers change and which counts its lookups.
type countingFacts struct {
	mu      sync.Mutex
	job     jobmap.Job
	lookups int
	fail    int // the next lookups that time out (a slurmctld too busy to answer)
}

func (f *countingFacts) Job(_ context.Context, id string) (*jobmap.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.fail > 0 {
		f.fail--
		return nil, fmt.Errorf("scontrol show job %s: %w", id, context.DeadlineExceeded)
	}
	j := f.job
	return &j, nil
}

func (f *countingFacts) set(mod func(j *jobmap.Job)) {
	f.mu.Lock()
	mod(&f.job)
	f.mu.Unlock()
}

// The job map is asked at the batch step's start, in the background, so that the digest
// Slurm waits for at the step's end asks nothing: unless the end may be Slurm's doing (a
// failing script, the time limit reached), when the job's state is read as it is then.
// The AdminComment the summary is merged with is always read after the step's end.
func TestDigestPrefetchesFacts(t *testing.T) {
	tests := []struct {
		name        string
		exit        int
		limit       time.Duration
		wantLookups int    // at the digest, after the one at the step's start
		wantPath    string // the output file the digest went into
	}{
		{name: "script exits 0", exit: 0, wantLookups: 0, wantPath: "/w/start.out"},
		{name: "script fails", exit: 256, wantLookups: 1, wantPath: "/w/end.out"},
		{name: "script killed", exit: 9, wantLookups: 1, wantPath: "/w/end.out"},
		{name: "time limit reached", exit: 0, limit: time.Minute, wantLookups: 1, wantPath: "/w/end.out"},
		{name: "time limit far", exit: 0, limit: time.Hour, wantLookups: 0, wantPath: "/w/start.out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, _ := fakeNode(t, 7)
			start := time.Now()
			now := start
			reg := newReg(t, RegistryConfig{})
			engine := propertiestest.Engine(t)
			facts := &countingFacts{job: jobmap.Job{JobID: 7, WorkDir: "/w", Stdout: "start.out", TimeLimit: tt.limit, AdminComment: "site:early"}}
			var paths []string
			var existing []string
			var mu sync.Mutex
			dig := DigestConfig{Engine: engine, Facts: facts,
				Append: func(_ context.Context, tg digest.Target, _ []byte) error {
					paths = append(paths, tg.Path)
					return nil
				},
				Accounting: func(_ context.Context, _ string, _ uint32, ex string, _ digest.Report) (string, error) {
					mu.Lock()
					existing = append(existing, ex)
					mu.Unlock()
					return "written", nil
				},
			}
			m, err := NewMeasurer(MeasureConfig{Root: root, Cycle: 10 * time.Second, StateDir: t.TempDir(), Digest: dig}, reg, "node1", zerolog.Nop(), func() time.Time { return now })
			if err != nil {
				t.Fatal(err)
			}
			j, err := reg.Apply(wire.StepStart, &wire.Event{JobID: 7, UID: 1000, Persyst: wire.On, StepID: "batch", Time: start}, start)
			if err != nil {
				t.Fatal(err)
			}
			prepareNow(m, j)
			done := lookupDone(m, 7)
			if done == nil {
				t.Fatal("no lookup started at the batch step's start")
			}
			<-done
			// What Slurm says changes during the job (a file name cannot, in fact; here it
			// shows which answer the digest used), and a site sets an AdminComment.
			facts.set(func(f *jobmap.Job) { f.Stdout, f.AdminComment = "end.out", "site:late" })
			now = start.Add(2 * time.Minute)
			status := tt.exit
			j, err = reg.Apply(wire.StepEnd, &wire.Event{JobID: 7, UID: 1000, Persyst: wire.On, StepID: "batch", ExitStatus: &status, Time: now}, now)
			if err != nil {
				t.Fatal(err)
			}
			before := facts.lookups
			if err := m.digest(context.Background(), j, atBatchEnd, nil); err != nil {
				t.Fatal(err)
			}
			// The summary's write goes on in the background; wait for it.
			for i := 0; i < 200; i++ {
				mu.Lock()
				n := len(existing)
				mu.Unlock()
				if n > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			facts.mu.Lock()
			lookups := facts.lookups - before
			facts.mu.Unlock()
			wantLookups := tt.wantLookups
			if tt.wantLookups == 0 {
				wantLookups = 1 // the AdminComment, read again for the summary
			}
			if lookups != wantLookups {
				t.Errorf("%d lookups after the step's end, want %d", lookups, wantLookups)
			}
			if diff := cmp.Diff([]string{tt.wantPath}, paths); diff != "" {
				t.Errorf("digest written into (-want +got):\n%s", diff)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff([]string{"site:late"}, existing); diff != "" {
				t.Errorf("summary merged with the AdminComment (-want +got):\n%s", diff)
			}
		})
	}
}

// lookupDone returns what is closed once the job map's lookup of job id at its batch
// step's start is over (nil: none started).
func lookupDone(m *Measurer, id uint32) <-chan struct{} {
	m.lookups.mu.Lock()
	defer m.lookups.mu.Unlock()
	if lk := m.lookups.jobs[id]; lk != nil {
		return lk.looked
	}
	return nil
}

// measured returns job id's pipeline (nil: its meter is not open).
func measured(m *Measurer, id uint32) *pipeline.Job {
	if jm := m.meters.get(id); jm != nil {
		return jm.pipeline()
	}
	return nil
}

// prepareNow is Measurer.Prepare, and then the meter's opening in the background is
// waited for (tests with a fake clock read at times they set).
func prepareNow(m *Measurer, j *Job) string {
	join := m.Prepare(j)
	m.starts.Wait()
	return join
}

// testMeasurer is a measurer of the fake node at root (a 1 s cycle) on the clock now.
func testMeasurer(t *testing.T, root string, now func() time.Time) (*Measurer, *Registry) {
	t.Helper()
	reg := newReg(t, RegistryConfig{})
	m, err := NewMeasurer(MeasureConfig{Root: root, Cycle: time.Second, StateDir: t.TempDir()}, reg, "node1", zerolog.Nop(), now)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// batchStart is the start of job id's batch step on its cores (Slurm's list) at now.
func batchStart(t *testing.T, reg *Registry, id uint32, cores string, now time.Time) *Job {
	t.Helper()
	j, err := reg.Apply(wire.StepStart, &wire.Event{JobID: id, UID: 1000, Persyst: wire.On, StepID: "batch", JobCores: cores, Time: now}, now)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestStartInBackground: Prepare answers without waiting for the job's meter to open
// (Slurm waits for the answer), and a job that ends at once, while its meter may still be
// being opened, still gets its final read: its steps' and its own end wait for the
// opening (without, they find no meter and the job has no summary).
func TestStartInBackground(t *testing.T) {
	for i := range 20 {
		root, _ := fakeNode(t, 7)
		now := time.Date(2026, 11, 21, 12, 0, 7, 0, time.UTC)
		m, reg := testMeasurer(t, root, func() time.Time { return now })
		j := batchStart(t, reg, 7, "", now)
		m.Prepare(j)                                                           // returns before the meter is open
		if err := m.StepEnded(context.Background(), j, "extern"); err != nil { // a read, no digest
			t.Fatal(err)
		}
		m.end(7)
		if s := m.Summary(7); s == nil || !s.Ended || s.Started.IsZero() {
			t.Fatalf("try %d: summary of a job that ended while its meter opened: %+v, want its measurement, ended", i, s)
		}
		m.starts.Wait()
	}
}

// TestMeasurerWaitsForJobCPUset: Slurm creates a job's cpuset with its parent's CPUs and
// narrows it to the job's cores a moment later; a meter opened in between would measure a
// 1-CPU job on the whole node (and call the other CPUs idle). The meter opens once the
// cpuset holds no more cores than the job's (Slurm's job_cores), or after cpusetWait.
func TestMeasurerWaitsForJobCPUset(t *testing.T) {
	for _, tc := range []struct {
		name, cores     string
		early, narrowed string        // the cpuset at the start, and later ("": unchanged)
		later           time.Duration // when the next cycle runs
		wantEarly       bool          // measured before the cpuset is narrowed
		want            []int
		prolog          bool // the job's start (prolog) comes first, without its cores ("2" at its first step)
	}{
		{"narrowed after the start", "2", "0-3", "2", time.Second, false, []int{2}, false},
		{"prolog: cores known at the first step", "", "0-3", "2", time.Second, false, []int{2}, true},
		{"whole node", "0-3", "0-3", "", time.Second, true, []int{0, 1, 2, 3}, false},
		{"cores not known", "", "0-3", "", time.Second, true, []int{0, 1, 2, 3}, false},
		{"never narrowed: measured after cpusetWait", "2", "0-3", "", cpusetWait, false, []int{0, 1, 2, 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := fakeNode(t, 7)
			cpuset := filepath.Join(root, "sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_7/cpuset.cpus.effective")
			set := func(cpus string) {
				if err := os.WriteFile(cpuset, []byte(cpus+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			set(tc.early)
			now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
			m, reg := testMeasurer(t, root, func() time.Time { return now })
			if tc.prolog {
				// The job's start (prolog) says nothing of its cores; its first step does.
				j, err := reg.Apply(wire.JobStart, &wire.Event{JobID: 7, UID: 1000, Persyst: wire.On, Time: now}, now)
				if err != nil {
					t.Fatal(err)
				}
				prepareNow(m, j)
			} else {
				prepareNow(m, batchStart(t, reg, 7, tc.cores, now))
			}
			t.Cleanup(func() { m.end(7) })
			if got := measured(m, 7) != nil; got != tc.wantEarly {
				t.Fatalf("measured at the start, cpuset %s, job cores %q: %v, want %v", tc.early, tc.cores, got, tc.wantEarly)
			}
			if tc.narrowed != "" {
				set(tc.narrowed)
			}
			if tc.prolog {
				batchStart(t, reg, 7, "2", now.Add(tc.later/2))
			}
			now = now.Add(tc.later)
			m.cycle()
			if measured(m, 7) == nil {
				t.Fatal("not measured after the cycle")
			}
			if diff := cmp.Diff(tc.want, measured(m, 7).Meter().Spec().CPUs); diff != "" {
				t.Errorf("CPUs measured (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOOMKillBeforeMeter: a program killed for lack of memory as it starts can be killed
// before its job's meter opens (in the background); the kernel's record of the kill is
// counted for the job once the meter opens, if it is recent and in the job's cgroups.
func TestOOMKillBeforeMeter(t *testing.T) {
	const job7 = "/system.slice/node1_slurmstepd.scope/job_7"
	for _, tc := range []struct {
		name  string
		kills []kmsg.OOMKill
		age   time.Duration // of the kills when the meter opens
		want  int
	}{
		{"in the job's task cgroup", []kmsg.OOMKill{{TaskCgroup: job7 + "/step_batch/user/task_0", PID: 10}}, time.Second, 1},
		{"two, in the job's cgroup", []kmsg.OOMKill{{TaskCgroup: job7, PID: 10}, {TaskCgroup: job7 + "/step_0", PID: 11}}, time.Second, 2},
		{"another job's", []kmsg.OOMKill{{TaskCgroup: job7 + "0/step_batch", PID: 10}}, time.Second, 0},
		{"too old", []kmsg.OOMKill{{TaskCgroup: job7 + "/step_batch", PID: 10}}, unclaimedFor, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := fakeNode(t, 7)
			now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
			m, reg := testMeasurer(t, root, func() time.Time { return now })
			for _, k := range tc.kills {
				m.oom.killed(k)
			}
			now = now.Add(tc.age)
			prepareNow(m, batchStart(t, reg, 7, "", now))
			t.Cleanup(func() { m.end(7) })
			if measured(m, 7) == nil {
				t.Fatal("not measured")
			}
			if got := m.oom.kills(7); got != tc.want {
				t.Errorf("OOM kills counted: %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		root, _ := fakeNode(t, 7)
		m, _ := testMeasurer(t, root, time.Now)
		for i := range 10 * maxUnclaimed {
			m.oom.killed(kmsg.OOMKill{TaskCgroup: "/elsewhere", PID: i})
		}
		if len(m.oom.unclaimed) != maxUnclaimed || m.oom.unclaimed[len(m.oom.unclaimed)-1].kill.PID != 10*maxUnclaimed-1 {
			t.Errorf("%d kills kept, the last %+v; want the %d newest", len(m.oom.unclaimed), m.oom.unclaimed[len(m.oom.unclaimed)-1], maxUnclaimed)
		}
	})
}

// TestOOMKillInSlurmLayout: a kill in the job's cgroup of Slurm's layout counts for the
// job even when its meter does not read that cgroup yet (Slurm creates a job's memory
// cgroup after its other cgroups; the meter finds it at its next cycle, after a program
// killed as it started).
func TestOOMKillInSlurmLayout(t *testing.T) {
	for _, tc := range []struct {
		task string
		want int
	}{
		{"/slurm_node1/uid_1000/job_7/step_batch/task_0", 1},
		{"/slurm_node1/uid_1000/job_7", 1},
		{"/slurm/uid_1000/job_7/step_0/task_1", 1},
		{"/slurm_node1/uid_1001/job_7/step_batch/task_0", 0}, // another user's job 7
		{"/slurm_node2/uid_1000/job_7/step_batch/task_0", 0}, // another node's
		{"/slurm_node1/uid_1000/job_70/step_batch/task_0", 0},
		{"/system.slice/node1_slurmstepd.scope/job_7/step_0/user/task_0", 1},
	} {
		t.Run(tc.task, func(t *testing.T) {
			root, _ := fakeNode(t, 7)
			now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
			m, reg := testMeasurer(t, root, func() time.Time { return now })
			prepareNow(m, batchStart(t, reg, 7, "", now))
			t.Cleanup(func() { m.end(7) })
			m.oom.killed(kmsg.OOMKill{TaskCgroup: tc.task, PID: 10})
			if got := m.oom.kills(7); got != tc.want {
				t.Errorf("OOM kills counted: %d, want %d", got, tc.want)
			}
		})
	}
}

// TestMeasurerWaitsForEmptyCPUset: a new v1 cpuset cgroup lists no CPUs until Slurm
// writes the job's; a meter opened then would measure the job on every CPU of the node.
func TestMeasurerWaitsForEmptyCPUset(t *testing.T) {
	root, _ := fakeNode(t, 7)
	mi := filepath.Join(root, "proc/self/mountinfo")
	f, err := os.OpenFile(mi, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("31 23 0:27 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	job := filepath.Join(root, "sys/fs/cgroup/cpuset/slurm_node1/uid_1000/job_7")
	if err := os.MkdirAll(job, 0o755); err != nil {
		t.Fatal(err)
	}
	set := func(cpus string) {
		if err := os.WriteFile(filepath.Join(job, "cpuset.cpus"), []byte(cpus), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set("\n")
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	m, reg := testMeasurer(t, root, func() time.Time { return now })
	prepareNow(m, batchStart(t, reg, 7, "", now))
	t.Cleanup(func() { m.end(7) })
	if measured(m, 7) != nil {
		t.Fatalf("measured on %v while the job's cpuset listed no CPUs", measured(m, 7).Meter().Spec().CPUs)
	}
	set("1\n")
	now = now.Add(time.Second)
	m.cycle()
	if measured(m, 7) == nil {
		t.Fatal("not measured once the cpuset listed the job's CPUs")
	}
	if diff := cmp.Diff([]int{1}, measured(m, 7).Meter().Spec().CPUs); diff != "" {
		t.Errorf("CPUs measured (-want +got):\n%s", diff)
	}
}

// TestOneLookupPerDigest: a digest asks the job map about its job once. A batch job is
// asked about at its batch step's start, in the background (so that the digest Slurm
// waits for asks nothing), and once after the step's end (TestDigestPrefetchesFacts); a
// job found ended without its end event, once, when the reconciler finds it ended (the
// late digest takes that answer); a job without a batch script, once per report (each
// step's end and the job's end).
func TestOneLookupPerDigest(t *testing.T) {
	setup := func(t *testing.T, state string) (*Measurer, *Registry, *countingFacts, *time.Time, *int) {
		root, _ := fakeNode(t, 7)
		start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
		now := start
		reg := newReg(t, RegistryConfig{})
		engine := propertiestest.Engine(t)
		facts := &countingFacts{job: jobmap.Job{JobID: 7, WorkDir: "/w", Stdout: "out", State: state, BatchHost: "node1", Nodes: []string{"node1"}}}
		written := 0
		dig := DigestConfig{Engine: engine, Facts: facts,
			Append: func(context.Context, digest.Target, []byte) error { written++; return nil }}
		m, err := NewMeasurer(MeasureConfig{Root: root, Cycle: 10 * time.Second, StateDir: t.TempDir(), Digest: dig}, reg, "node1", zerolog.Nop(), func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		return m, reg, facts, &now, &written
	}
	apply := func(t *testing.T, reg *Registry, k wire.Kind, e *wire.Event, now time.Time) *Job {
		t.Helper()
		e.JobID, e.UID, e.Persyst, e.Time = 7, 1000, wire.On, now
		j, err := reg.Apply(k, e, now)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	t.Run("ended unseen: the reconciler's lookup", func(t *testing.T) {
		m, reg, facts, now, written := setup(t, "COMPLETED")
		prepareNow(m, apply(t, reg, wire.StepStart, &wire.Event{StepID: "batch"}, *now))
		looked := lookupDone(m, 7)
		<-looked // the batch step's start
		*now = now.Add(10 * time.Minute)
		before := facts.lookups
		newReconciler(reg, m, facts, "node1", zerolog.Nop(), func() time.Time { return *now }).round(context.Background())
		if j := reg.Job(7); j.Ended == nil {
			t.Fatal("the job was not found ended")
		}
		if got := facts.lookups - before; got != 1 || *written != 1 {
			t.Errorf("%d lookups, %d digests written; want 1 lookup for one late digest", got, *written)
		}
	})
	// A job a previous daemon left running is measured again at once (its cgroups are
	// there), before the reconciler asks about it; the digest at its batch step's end
	// takes the reconciler's answer instead of asking beside it (under a slow slurmctld,
	// two lookups at once made the digest's miss its deadline and the digest was lost).
	t.Run("restored after a restart: the reconciler's lookup", func(t *testing.T) {
		m, reg, facts, now, written := setup(t, "RUNNING")
		j := apply(t, reg, wire.StepStart, &wire.Event{StepID: "batch"}, *now)
		if !m.Restore(j, m.slurm.lookOnce()) {
			t.Fatal("a running job whose cgroups are there was not restored")
		}
		m.starts.Wait()
		if st, _ := m.meters.get(7).now(); st != measuring || facts.lookups != 0 {
			t.Fatalf("after Restore: meter %v, %d lookups; want measuring before any lookup", st, facts.lookups)
		}
		newReconciler(reg, m, facts, "node1", zerolog.Nop(), func() time.Time { return *now }).round(context.Background())
		m.Prepare(j) // what the reconciler's first round is followed by
		*now = now.Add(time.Minute)
		status := 0
		j = apply(t, reg, wire.StepEnd, &wire.Event{StepID: "batch", ExitStatus: &status}, *now)
		if err := m.digest(context.Background(), j, atBatchEnd, nil); err != nil {
			t.Fatal(err)
		}
		if facts.lookups != 1 || *written != 1 {
			t.Errorf("%d lookups, %d digests written; want the reconciler's one lookup for one digest", facts.lookups, *written)
		}
	})
	// The job map does not answer at the batch step's end (a slurmctld too busy): Slurm
	// is not kept waiting, and the digest is written once it answers.
	t.Run("no answer at the end: written when the job map answers", func(t *testing.T) {
		m, reg, facts, now, _ := setup(t, "RUNNING")
		var mu sync.Mutex
		var paths []string
		m.dig.appendText = func(_ context.Context, tg digest.Target, _ []byte) error {
			mu.Lock()
			paths = append(paths, tg.Path)
			mu.Unlock()
			return nil
		}
		prepareNow(m, apply(t, reg, wire.StepStart, &wire.Event{StepID: "batch"}, *now))
		looked := lookupDone(m, 7)
		<-looked
		facts.set(func(f *jobmap.Job) { f.State = "COMPLETED" })
		facts.mu.Lock()
		facts.fail = 2 // the lookup at the end (exit 1: the state is read then), and the first retry
		facts.mu.Unlock()
		status := 256 // (the clock stays: the meter's start-up read may still read it)
		j := apply(t, reg, wire.StepEnd, &wire.Event{StepID: "batch", ExitStatus: &status}, *now)
		if err := m.digest(context.Background(), j, atBatchEnd, nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			n := len(paths)
			mu.Unlock()
			if n > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{"/w/out"}, paths); diff != "" {
			t.Fatalf("digests written (-want +got):\n%s", diff)
		}
		rep, err := m.Report(7)
		if err != nil || rep.EndState == nil || rep.EndState.State != "COMPLETED" {
			t.Errorf("report after the job map answered: %+v, %v", rep, err)
		}
	})
	t.Run("no batch script: one lookup per report", func(t *testing.T) {
		m, reg, facts, now, _ := setup(t, "RUNNING")
		prepareNow(m, apply(t, reg, wire.StepStart, &wire.Event{StepID: "0"}, *now))
		for i, step := range []string{"0", "1"} {
			if i > 0 {
				prepareNow(m, apply(t, reg, wire.StepStart, &wire.Event{StepID: step}, *now))
			}
			*now = now.Add(time.Minute)
			j := apply(t, reg, wire.StepEnd, &wire.Event{StepID: step}, *now)
			if err := m.StepEnded(context.Background(), j, step); err != nil {
				t.Fatal(err)
			}
		}
		facts.set(func(f *jobmap.Job) { f.State = "COMPLETED" })
		j := apply(t, reg, wire.JobEnd, &wire.Event{}, *now)
		if err := m.End(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		if facts.lookups != 3 {
			t.Errorf("%d lookups for 3 reports (two steps' ends, the job's end), want 3", facts.lookups)
		}
	})
}
