package measure

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// TestSchedstat follows the run-queue wait of a job's threads across reads on a fixture
// /proc: a thread that exits keeps what it counted, a new one counts from its start.
func TestSchedstat(t *testing.T) {
	f := newFakeJob(t)
	f.write(t, "cgroup.procs", "100\n")
	task := func(tid, content string) {
		d := filepath.Join(f.root, "proc/100/task", tid)
		if content == "" {
			if err := os.RemoveAll(d); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "schedstat"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	task("100", "5000 1000000000 10\n")
	task("101", "5000 2000000000 5\n")
	now := time.Unix(1_800_000_000, 0)
	env := &Env{Host: hostfs.New(f.root), Log: zerolog.Nop(), Now: func() time.Time { return now },
		Enable: map[string]bool{"procio": false, "cgroup": false}}
	m, err := Open(env, Spec{Name: "job 1", CPUs: []int{0}, ProcCgroup: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	task("100", "9000 3000000000 20\n")
	task("101", "")                  // exited, with 2 s waited and 5 slices counted before
	task("102", "100 500000000 1\n") // new
	now = now.Add(time.Minute)
	s, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	// Waited: thread 100 2 s more, thread 102 0.5 s; thread 101 nothing new.
	if got := s.Job[SchedWaitSeconds]; got != 2.5 {
		t.Errorf("%s = %v, want 2.5", SchedWaitSeconds, got)
	}
	if got := s.Job[SchedTimeslices]; got != 11 {
		t.Errorf("%s = %v, want 11", SchedTimeslices, got)
	}
	// No thread was runnable half of the minute: no busy thread.
	if got := s.Job[SchedBusyThreadSeconds]; got != 0 {
		t.Errorf("%s = %v, want 0", SchedBusyThreadSeconds, got)
	}
	// A thread that ran 40 s and waited 10 s of the next minute has work; one that woke
	// briefly and waited 20 s in all (a loaded node) does not; a thread born in the
	// minute that ran 25 s and waited 10 s does.
	task("100", "40000009000 13000000000 90\n")
	task("102", "1000000100 20500000000 900\n")
	task("103", "25000000000 10000000000 30\n")
	now = now.Add(time.Minute)
	if s, err = m.Read(sample.Cycle); err != nil {
		t.Fatal(err)
	}
	if got := s.Job[SchedBusyThreadSeconds]; got != 85 {
		t.Errorf("%s = %v, want 85 (50 s of thread 100, 35 s of thread 103)", SchedBusyThreadSeconds, got)
	}
	task("102", "100 bad 1\n")
	now = now.Add(time.Minute)
	if _, err := m.Read(sample.Cycle); err == nil || !strings.Contains(err.Error(), "proc/100/task/102/schedstat") {
		t.Errorf("malformed schedstat: error %v, want it to name the file", err)
	}

	// A kernel without per-thread schedstat: not measured, with the reason.
	g := newFakeJob(t)
	g.write(t, "cgroup.procs", "7\n")
	if err := os.MkdirAll(filepath.Join(g.root, "proc/7/task/7"), 0o755); err != nil {
		t.Fatal(err)
	}
	env.Host = hostfs.New(g.root)
	m, err = Open(env, Spec{Name: "job 2", CPUs: []int{0}, ProcCgroup: g.dir})
	if err != nil {
		t.Fatal(err)
	}
	if why := m.Summary().NotMeasured[SchedWaitSeconds]; !strings.Contains(why, "CONFIG_SCHED_INFO") {
		t.Errorf("NotMeasured[%s] = %q, want the kernel option named", SchedWaitSeconds, why)
	}
}

// TestSchedstatThisProcess reads the kernel's schedstat of this test's own threads.
func TestSchedstatThisProcess(t *testing.T) {
	now := time.Now()
	env := &Env{Host: hostfs.New("/"), Log: zerolog.Nop(), Now: func() time.Time { return now },
		Enable: map[string]bool{"procio": false, "cgroup": false, "perf": false, "netdev": false, "infiniband": false, "rapl": false}}
	self := os.Getpid()
	m, err := Open(env, Spec{Name: "self", CPUs: []int{0}, ExtraPIDs: func() []int { return []int{self} }})
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		runtime.Gosched()
	}
	now = now.Add(time.Second)
	s, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	if why, ok := m.Summary().NotMeasured[SchedTimeslices]; ok {
		t.Fatalf("schedstat not measured here: %s", why)
	}
	if s.Job[SchedTimeslices] < 1 || s.Job[SchedWaitSeconds] < 0 {
		t.Errorf("schedstat of this process over 50 ms of yielding: %v slices, %v s waited", s.Job[SchedTimeslices], s.Job[SchedWaitSeconds])
	}
}
