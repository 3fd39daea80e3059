package perfcg

// Tests against the real kernel: they need root (or CAP_PERFMON + write access to the
// cgroup2 hierarchy) and a cgroup2 mount; otherwise they skip, saying why. The child
// process is this test binary re-executed with childEnv set (see TestMain).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/perfevents"
)

const (
	childEnv = "PERSYST_PERFCG_CHILD" // "spin" or "openclose"
	// TestOpenCloseTracepoint mounts a private tracefs under a temp dir (unmounted at
	// the end) when none is mounted at the usual places; noMountTracefsEnv=1 forbids it.
	noMountTracefsEnv = "PERSYST_PERFCG_NO_MOUNT_TRACEFS"
	spinFor           = time.Second
	openCloses        = 10000
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child runs in the re-executed binary: pin every thread to CPU 0, say "ready", wait
// for "go" on stdin (the parent has moved us into the cgroup by then), do the work.
func child(mode string) int {
	var set unix.CPUSet
	set.Set(0)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		// Threads created later inherit the affinity of their (pinned) creator.
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			fmt.Fprintln(os.Stderr, "child: sched_setaffinity:", err)
			return 2
		}
	}
	fmt.Println("ready")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "go" {
		fmt.Fprintf(os.Stderr, "child: want go, got %q, %v\n", line, err)
		return 2
	}
	switch mode {
	case "spin":
		// Spin for spinFor of this thread's CPU time, not wall time: the test must hold
		// on a loaded machine too.
		runtime.LockOSThread()
		x := uint64(1)
		for start := threadCPU(); threadCPU()-start < spinFor; {
			for i := 0; i < 1000; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		runtime.KeepAlive(x)
	case "openclose":
		for i := 0; i < openCloses; i++ {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				fmt.Fprintln(os.Stderr, "child: open:", err)
				return 2
			}
			unix.Close(fd)
		}
	default:
		fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
		return 2
	}
	return 0
}

// requirePerf skips unless perf events can be opened in cgroup mode and a cgroup2
// hierarchy is writable; it returns the cgroup2 mount point.
func requirePerf(tb testing.TB) string {
	tb.Helper()
	testenv.Root(tb, "creates a cgroup2 directory and moves a process into it")
	mounts, err := jobcgroup.Mounts(hostfs.New("/"))
	if err != nil {
		testenv.Unavailable(tb, fmt.Sprintf("cannot read the mount table: %v", err))
	}
	for _, m := range mounts {
		if m.IsV2 {
			return m.Path
		}
	}
	testenv.Unavailable(tb, "no cgroup2 hierarchy mounted")
	return ""
}

// testCgroup creates <cgroup2>/persyst-perf-<pid>[-suffix] and removes it at cleanup,
// moving any process left in it back to the hierarchy root first.
func testCgroup(tb testing.TB, suffix string) string {
	tb.Helper()
	mnt := requirePerf(tb)
	dir := filepath.Join(mnt, fmt.Sprintf("persyst-perf-%d%s", os.Getpid(), suffix))
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatalf("create test cgroup: %v", err)
	}
	tb.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				if err := os.WriteFile(filepath.Join(mnt, "cgroup.procs"), []byte(pid), 0); err != nil {
					tb.Errorf("cleanup: move pid %s out of %s: %v", pid, dir, err)
				}
			}
		}
		var err error
		for i := 0; i < 50; i++ {
			if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		tb.Errorf("cleanup: rmdir %s: %v", dir, err)
	})
	// The kernel may refuse cgroup-mode events outright (not in CI, where they work).
	g, err := Open(dir, []int{0}, perfevents.SoftwareEvents()[:1])
	if err != nil {
		testenv.Unavailable(tb, fmt.Sprintf("perf cgroup mode: %v", err))
	}
	defer g.Close()
	if err := g.Unavailable()["task-clock"]; err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			p, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
			testenv.Unavailable(tb, fmt.Sprintf("perf_event_open forbidden (kernel.perf_event_paranoid=%s): %v", strings.TrimSpace(string(p)), err))
		}
		testenv.Unavailable(tb, fmt.Sprintf("task-clock in cgroup mode not available: %v", err))
	}
	return dir
}

// childProc is a started, not yet released, child.
type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  bool
}

// startChild starts the helper in mode, waits until it is ready, and moves it into
// cgroupDir. The child is killed and reaped at cleanup if still running.
func startChild(tb testing.TB, mode, cgroupDir string) *childProc {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "GOMAXPROCS=1", "GOGC=off")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start child: %v", err)
	}
	c := &childProc{cmd: cmd, stdin: stdin}
	tb.Cleanup(func() {
		if !c.done {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		tb.Fatalf("child not ready: %q, %v", line, err)
	}
	if err := os.WriteFile(filepath.Join(cgroupDir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		tb.Fatalf("move child %d into %s: %v", cmd.Process.Pid, cgroupDir, err)
	}
	return c
}

// run releases the child and waits for it to exit.
func (c *childProc) run(tb testing.TB) {
	tb.Helper()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		tb.Fatalf("release child: %v", err)
	}
	err := c.cmd.Wait()
	c.done = true
	if err != nil {
		tb.Fatalf("child: %v", err)
	}
}

func within(got, want uint64, frac float64) bool {
	d := float64(got) - float64(want)
	return d <= frac*float64(want) && -d <= frac*float64(want)
}

func TestSpinTaskClock(t *testing.T) {
	cg := testCgroup(t, "-spin")
	c := startChild(t, "spin", cg)
	tc := perfevents.SoftwareEvents()[0]
	grouped := []perfevents.Event{tc, perfevents.SoftwareEvents()[1]}
	for i := range grouped {
		grouped[i].Group = "sw"
	}
	g, err := Open(cg, []int{0, 1}, append([]perfevents.Event{tc}, grouped...))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if u := g.Unavailable(); len(u) != 0 {
		t.Fatalf("unavailable: %v", u)
	}
	c.run(t)
	counts, err := g.Read()
	if err != nil {
		t.Fatal(err)
	}
	for i, cpu := range counts.CPUs {
		single, grp, cs := counts.PerCPU[i][0], counts.PerCPU[i][1], counts.PerCPU[i][2]
		t.Logf("CPU %d: task-clock %v (enabled %v running %v), grouped task-clock %v, context-switches %d",
			cpu, time.Duration(single.Scaled), time.Duration(single.Enabled), time.Duration(single.Running),
			time.Duration(grp.Scaled), cs.Scaled)
		for j, x := range counts.PerCPU[i] {
			if !x.Available || x.LowCoverage {
				t.Errorf("CPU %d %s: available %v, low coverage %v (software events are never multiplexed)", cpu, counts.Events[j].Name, x.Available, x.LowCoverage)
			}
		}
		if !within(grp.Scaled, single.Scaled, 0.01) {
			t.Errorf("CPU %d: grouped task-clock %d vs single %d: differ by more than 1%%", cpu, grp.Scaled, single.Scaled)
		}
	}
	// The child spun for spinFor of one thread's CPU time; its runtime's other threads
	// add a little, more on a loaded machine. So task-clock is at least the spin and at
	// most the child's whole CPU time (wait4's rusage).
	ps := c.cmd.ProcessState
	total := ps.UserTime() + ps.SystemTime()
	// rusage is tick-sampled (no VIRT_CPU_ACCOUNTING here) and undercounts a process that
	// switches often: CI saw task-clock 1.064 s against rusage 1.026 s with 4,000 context
	// switches. Counting anything but the child would be far above 10 %.
	if got := time.Duration(counts.PerCPU[0][0].Scaled); got < spinFor*98/100 || got > total*110/100+20*time.Millisecond {
		t.Errorf("CPU 0 task-clock = %v, want between the spin (%v) and the child's CPU time (%v)", got, spinFor, total)
	}
	if got := counts.PerCPU[1][0].Scaled; got > uint64(spinFor/20) {
		t.Errorf("CPU 1 task-clock = %v, want ≈ 0 (child pinned to CPU 0)", time.Duration(got))
	}
}

// tracingFS returns an FS whose tracefs holds the syscall tracepoints, mounting a
// private tracefs unless noMountTracefsEnv forbids it; ok is false if there is none.
func tracingFS(t *testing.T) (hostfs.FS, bool) {
	fs := hostfs.New("/")
	if _, err := TracingDir(fs); err == nil {
		return fs, true
	}
	if os.Getenv(noMountTracefsEnv) == "1" || os.Geteuid() != 0 {
		return fs, false
	}
	root := t.TempDir()
	mp := filepath.Join(root, "sys/kernel/tracing")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("nodev", mp, "tracefs", 0, ""); err != nil {
		t.Logf("mount tracefs at %s: %v", mp, err)
		return fs, false
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mp, 0); err != nil {
			t.Errorf("unmount %s: %v", mp, err)
		}
	})
	return hostfs.New(root), true
}

func TestOpenCloseTracepoint(t *testing.T) {
	cg := testCgroup(t, "-open")
	fs, _ := tracingFS(t)
	probed, err := Probe(fs, cg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	openat, _ := probed.Lookup("syscalls:sys_enter_openat")
	closeEv, _ := probed.Lookup("syscalls:sys_enter_close")
	if !openat.Available {
		msg := fmt.Sprintf("syscalls:sys_enter_openat not available, open count not checked: %v (the test mounts a private tracefs as root unless %s=1)", openat.Err, noMountTracefsEnv)
		testenv.Unavailable(t, msg)
	}
	events := []perfevents.Event{openat.Event}
	if closeEv.Available {
		events = append(events, closeEv.Event)
	}
	c := startChild(t, "openclose", cg)
	g, err := Open(cg, []int{0, 1}, events)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	c.run(t)
	counts, err := g.Read()
	if err != nil {
		t.Fatal(err)
	}
	for j, e := range counts.Events {
		s := counts.Sum(j)
		t.Logf("%s: %d on the cgroup (CPU 0 %d, CPU 1 %d)", e.Name, s.Scaled, counts.PerCPU[0][j].Scaled, counts.PerCPU[1][j].Scaled)
		if !s.Available {
			t.Errorf("%s: not available: %v", e.Name, s.Err)
			continue
		}
		if !within(s.Scaled, openCloses, 0.01) {
			t.Errorf("%s = %d, want %d ± 1%%", e.Name, s.Scaled, openCloses)
		}
	}
	if !closeEv.Available {
		t.Logf("syscalls:sys_enter_close not available, close count not checked: %v", closeEv.Err)
	}
}

func TestHardwareNotAvailable(t *testing.T) {
	cg := testCgroup(t, "-hw")
	probed, err := Probe(hostfs.New("/"), cg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range probed {
		state := "available"
		if !st.Available {
			state = "not available: " + st.Err.Error()
		}
		t.Logf("%-28s %-10s %s", st.Event.Name, st.Event.Kind, state)
	}
	if st, _ := probed.Lookup("cycles"); st.Available {
		t.Skip("this machine has a PMU: cycles is available")
	}
	for _, e := range perfevents.HardwareEvents() {
		st, ok := probed.Lookup(e.Name)
		if !ok || st.Available || !errors.Is(st.Err, ErrNotAvailable) || !errors.Is(st.Err, unix.ENOENT) {
			t.Errorf("probe %s: available %v, err %v; want not available with ENOENT", e.Name, st.Available, st.Err)
		}
	}
	for _, e := range perfevents.SoftwareEvents() {
		if st, _ := probed.Lookup(e.Name); !st.Available {
			t.Errorf("probe %s: not available: %v", e.Name, st.Err)
		}
	}

	events := append(perfevents.SoftwareEvents()[:1:1], perfevents.WithIPC(perfevents.HardwareEvents())...)
	g, err := Open(cg, []int{0, 1}, events)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	counts, err := g.Read()
	if err != nil {
		t.Fatal(err)
	}
	unavail := g.Unavailable()
	for j, e := range counts.Events {
		for i, cpu := range counts.CPUs {
			x := counts.PerCPU[i][j]
			if e.Kind == perfevents.Hardware && (x.Available || !errors.Is(x.Err, unix.ENOENT)) {
				t.Errorf("CPU %d %s/%s: available %v, err %v; want not available with ENOENT", cpu, e.Group, e.Name, x.Available, x.Err)
			}
			if e.Kind == perfevents.Software && !x.Available {
				t.Errorf("CPU %d %s: not available: %v", cpu, e.Name, x.Err)
			}
		}
		if e.Kind == perfevents.Hardware {
			if s := counts.Sum(j); s.Available {
				t.Errorf("Sum(%s) is available (a 0 would be reported)", e.Name)
			}
			if unavail[e.Name] == nil {
				t.Errorf("Unavailable() lacks %s", e.Name)
			}
		}
	}
}

func benchGroup(b *testing.B, group string) {
	cg := testCgroup(b, "-bench"+group)
	events := perfevents.SoftwareEvents()
	for i := range events {
		events[i].Group = group
	}
	g, err := Open(cg, []int{0, 1}, events)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	if u := g.Unavailable(); len(u) != 0 {
		b.Fatalf("unavailable: %v", u)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Read(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead: one Read of all 6 software events × 2 CPUs, one fd read each (12 reads).
func BenchmarkRead(b *testing.B) { benchGroup(b, "") }

// BenchmarkReadGrouped: the same events as one perf group per CPU (2 reads).
func BenchmarkReadGrouped(b *testing.B) { benchGroup(b, "sw") }

func TestUnresolvedTracepointAndClose(t *testing.T) {
	cg := testCgroup(t, "-misc")
	g, err := Open(cg, []int{0, 1}, []perfevents.Event{perfevents.SoftwareEvents()[0], tp("syscalls:sys_enter_openat")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.Read()
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sum(1); s.Available || !errors.Is(s.Err, ErrNotAvailable) {
		t.Errorf("unresolved tracepoint: %+v, want not available", s)
	}
	if s := c.Sum(0); !s.Available {
		t.Errorf("task-clock: not available: %v", s.Err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := g.Read(); err == nil {
		t.Error("Read after Close: want error")
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// TestSoftwareGroup: in cgroup mode the ungrouped software events and tracepoints of a
// CPU are read as one group; an event that cannot be opened, even the first, leaves the
// others counted (the next one leads the group).
func TestSoftwareGroup(t *testing.T) {
	cg := testCgroup(t, "-swgroup")
	bogus := tp("syscalls:sys_enter_openat")
	bogus.Config = 1 << 40 // resolved, but no such tracepoint: the open fails
	sw := perfevents.SoftwareEvents()
	events := []perfevents.Event{bogus, sw[0], sw[1]}
	g, err := Open(cg, []int{0, 1}, events)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	type result struct {
		Counters, Reads int
		Available       []bool
	}
	c, err := g.Read()
	if err != nil {
		t.Fatal(err)
	}
	got := result{Counters: g.Counters(), Reads: len(g.units)}
	for j := range events {
		got.Available = append(got.Available, c.Sum(j).Available)
	}
	want := result{Counters: 4, Reads: 2, Available: []bool{false, true, true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
