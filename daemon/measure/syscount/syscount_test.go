package syscount

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

const (
	childEnv = "PERSYST_SYSCOUNT_CHILD" // the number of openat+close pairs to make
	ioEnv    = "PERSYST_SYSCOUNT_IO"    // the number of file and pipe writes and reads
	stormEnv = "PERSYST_SYSCOUNT_STORM" // how long to make openat+close pairs
)

func TestMain(m *testing.M) {
	if n := os.Getenv(childEnv); n != "" {
		os.Exit(child(n))
	}
	if d := os.Getenv(stormEnv); d != "" {
		os.Exit(storm(d))
	}
	if n := os.Getenv(ioEnv); n != "" {
		os.Exit(childIO(n))
	}
	os.Exit(m.Run())
}

// childIO writes n records of ioRecord bytes to a file and reads them back with pread,
// then passes n records through a pipe and a socket, and writes n to /dev/null: each
// target's calls are its own.
func childIO(arg string) int {
	n, _ := strconv.Atoi(arg)
	f, err := os.CreateTemp("", "persyst-syscount-")
	if err != nil {
		return 2
	}
	defer os.Remove(f.Name())
	fd := int(f.Fd())
	buf := make([]byte, ioRecord)
	for range n {
		if _, err := unix.Write(fd, buf); err != nil {
			return 3
		}
	}
	for i := range n {
		if _, err := unix.Pread(fd, buf, int64(i*ioRecord)); err != nil {
			return 4
		}
	}
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		return 5
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return 8
	}
	null, err := unix.Open("/dev/null", unix.O_WRONLY, 0)
	if err != nil {
		return 9
	}
	for range n {
		if _, err := unix.Write(p[1], buf); err != nil {
			return 6
		}
		if _, err := unix.Read(p[0], buf); err != nil {
			return 7
		}
		if _, err := unix.Write(sp[0], buf); err != nil {
			return 10
		}
		if _, err := unix.Read(sp[1], buf); err != nil {
			return 11
		}
		if _, err := unix.Write(null, buf); err != nil {
			return 12
		}
	}
	return 0
}

const ioRecord = 100

func child(arg string) int {
	n, _ := strconv.Atoi(arg)
	for range n {
		fd, err := unix.Openat(unix.AT_FDCWD, "/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			return 2
		}
		unix.Close(fd)
	}
	return 0
}

// storm makes openat+close pairs for the duration arg and prints how many.
func storm(arg string) int {
	d, err := time.ParseDuration(arg)
	if err != nil {
		return 2
	}
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 100 {
			fd, err := unix.Openat(unix.AT_FDCWD, "/dev/null", unix.O_RDONLY, 0)
			if err != nil {
				return 3
			}
			unix.Close(fd)
		}
		n += 100
	}
	fmt.Println(n)
	return 0
}

var testEvents = []Event{
	{Name: "syscalls:sys_enter_openat", Syscall: "openat"},
	{Name: "syscalls:sys_enter_close", Syscall: "close"},
	{Name: "syscalls:sys_enter_futex", Syscall: "futex"},
	{Name: "syscalls:sys_enter_nosuchcall", Syscall: "nosuchcall"},
}

// unifiedDir makes a fresh cgroup directory with a child on the cgroup v2 hierarchy and
// returns both and the hierarchy's mount.
func unifiedDir(t testing.TB) (mount, job, leaf string) {
	t.Helper()
	testenv.Root(t, "creates cgroups and loads BPF programs")
	mounts, err := jobcgroup.Mounts(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.IsV2 {
			mount = m.Path
		}
	}
	if mount == "" {
		testenv.Unavailable(t, "no cgroup v2 hierarchy mounted")
	}
	job = filepath.Join(mount, "persyst-syscount-test-"+strconv.Itoa(os.Getpid()))
	leaf = filepath.Join(job, "step_0")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(leaf); os.Remove(job) })
	return mount, job, leaf
}

// cgroupOf is a cgroup directory's id and its level below the hierarchy's mount.
func cgroupOf(t *testing.T, mount, dir string) (id uint64, level int) {
	t.Helper()
	id, err := CgroupID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if level, err = Level(mount, dir); err != nil {
		t.Fatal(err)
	}
	return id, level
}

// readSum reads cgroup id's counts, summed over the CPUs.
func readSum(t *testing.T, c *Counter, id uint64) Values {
	t.Helper()
	vals, err := c.Read(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sum Values
	for _, v := range vals {
		for i := range sum {
			sum[i] += v.Whole[i] + v.Sampled[i]
		}
	}
	return sum
}

// runIn runs this test binary making n openat+close pairs in cgroup dir.
func runIn(t *testing.T, dir string, n int) {
	t.Helper()
	runChild(t, dir, childEnv+"="+strconv.Itoa(n))
}

// runChild runs this test binary in cgroup dir with env added.
func runChild(t *testing.T, dir string, env ...string) {
	t.Helper()
	cmd := childIn(t, dir, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
}

// stormIn runs this test binary making openat+close pairs for d in cgroup dir, and
// returns how many it made: a storm as long on an emulated node as here.
func stormIn(t *testing.T, dir string, d time.Duration) int {
	t.Helper()
	cmd := childIn(t, dir, stormEnv+"="+d.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("storm: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("storm: %v", err)
	}
	return n
}

// childIn is this test binary with env added, to be started in cgroup dir.
func childIn(t *testing.T, dir string, env ...string) *exec.Cmd {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &unix.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return cmd
}

func TestCountsPerCgroup(t *testing.T) {
	mount, job, leaf := unifiedDir(t)
	c, missing, err := New(Options{Events: testEvents})
	if err != nil {
		testenv.Unavailable(t, "BPF counting not available: "+err.Error())
	}
	defer c.Close()
	if _, ok := missing["syscalls:sys_enter_nosuchcall"]; !ok || len(missing) != 1 {
		t.Errorf("missing = %v, want only nosuchcall", missing)
	}
	if diff := cmp.Diff(testEvents[:3], c.Events()); diff != "" {
		t.Errorf("Events() -want +got:\n%s", diff)
	}
	id, err := CgroupID(job)
	if err != nil {
		t.Fatal(err)
	}
	level, err := Level(mount, job)
	if err != nil || level != 1 {
		t.Fatalf("Level(%s, %s) = %d, %v; want 1", mount, job, level, err)
	}
	if c.Attached() {
		t.Error("attached before a cgroup is watched")
	}
	if err := c.Watch(id, level); err != nil {
		t.Fatal(err)
	}
	if !c.Attached() {
		t.Error("not attached while a cgroup is watched")
	}
	const n = 5000
	runIn(t, leaf, n)    // counted: a descendant of the watched cgroup
	runIn(t, mount, 777) // not counted: outside it
	sum := readSum(t, c, id)
	// The child's runtime opens and closes a few files of its own as it starts.
	for i, name := range []string{"openat", "close"} {
		if sum[i] < n || sum[i] > n+200 {
			t.Errorf("%s counted %d times, want %d to %d", name, sum[i], n, n+200)
		}
	}
	if err := c.Unwatch(id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(id, nil); err == nil {
		t.Error("Read after Unwatch: no error")
	}
	if c.Attached() {
		t.Error("still attached with no cgroup watched")
	}
}

// eachMode runs f as a subtest, named by the mode, on a Counter made with o in each way
// of counting this kernel allows: fentry where its programs load (the virtual node's
// kernels: scripts/vm.sh runs these tests there), and the raw tracepoint.
func eachMode(t *testing.T, o Options, f func(t *testing.T, c *Counter)) {
	t.Helper()
	tried := map[Mode]bool{}
	for _, noFentry := range []bool{false, true} {
		o.NoFentry = noFentry
		c, _, err := New(o)
		if err != nil {
			testenv.Unavailable(t, "BPF counting not available: "+err.Error())
		}
		if tried[c.Mode()] { // fentry refused: the first was the raw tracepoint too
			c.Close()
			continue
		}
		tried[c.Mode()] = true
		t.Run(string(c.Mode()), func(t *testing.T) {
			defer c.Close()
			f(t, c)
		})
	}
}

// TestFilesApart: reads and writes are counted with their bytes by what they went to (a
// regular file, a pipe, a socket, a character device), in each mode the kernel allows.
func TestFilesApart(t *testing.T) {
	mount, job, leaf := unifiedDir(t)
	eachMode(t, Options{Events: testEvents}, func(t *testing.T, c *Counter) {
		if ok, err := c.Files(); !ok {
			t.Fatalf("%s: files not told apart: %v", c.Mode(), err)
		}
		id, level := cgroupOf(t, mount, job)
		if err := c.Watch(id, level); err != nil {
			t.Fatal(err)
		}
		const n = 3000
		runChild(t, leaf, ioEnv+"="+strconv.Itoa(n))
		sum := readSum(t, c, id)
		t.Logf("%s: file reads %d calls %d bytes, writes %d calls %d bytes", c.Mode(),
			sum[FileReadCalls], sum[FileReadBytes], sum[FileWriteCalls], sum[FileWriteBytes])
		// The child's runtime reads a few files of its own as it starts; the pipe's
		// n writes and n reads would double the counts.
		for _, x := range []struct {
			name        string
			slot        int
			least, most uint64
		}{
			{"file write calls", FileWriteCalls, n, n + 50},
			{"file write bytes", FileWriteBytes, n * ioRecord, n*ioRecord + 50*4096},
			{"file read calls", FileReadCalls, n, n + 50},
			{"file read bytes", FileReadBytes, n * ioRecord, n*ioRecord + 50*4096},
			{"pipe write calls", IOSlot(Pipe, WriteCalls), n, n + 10},
			{"pipe read bytes", IOSlot(Pipe, ReadBytes), n * ioRecord, n*ioRecord + 10*4096},
			{"socket write calls", IOSlot(Socket, WriteCalls), n, n + 10},
			{"socket read calls", IOSlot(Socket, ReadCalls), n, n + 10},
			{"device write calls", IOSlot(CharDevice, WriteCalls), n, n + 10},
			{"device write bytes", IOSlot(CharDevice, WriteBytes), n * ioRecord, n*ioRecord + 10*4096},
		} {
			if got := sum[x.slot]; got < x.least || got > x.most {
				t.Errorf("%s: %s = %d, want %d to %d", c.Mode(), x.name, got, x.least, x.most)
			}
		}
		if err := c.Unwatch(id); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLinger: with a linger the programs stay attached after the last cgroup is
// unwatched, a cgroup watched meanwhile finds them attached, and they are detached once
// the linger is over with none watched.
func TestLinger(t *testing.T) {
	mount, job, _ := unifiedDir(t)
	const linger = 300 * time.Millisecond
	c, _, err := New(Options{Events: testEvents, Linger: linger})
	if err != nil {
		testenv.Unavailable(t, "BPF counting not available: "+err.Error())
	}
	defer c.Close()
	id, level := cgroupOf(t, mount, job)
	cycle := func() {
		t.Helper()
		if err := c.Watch(id, level); err != nil {
			t.Fatal(err)
		}
		if err := c.Unwatch(id); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	if !c.Attached() {
		t.Fatal("detached at once with a linger")
	}
	time.Sleep(linger / 2)
	cycle() // a job that follows: the linger starts again
	time.Sleep(linger / 2)
	if !c.Attached() {
		t.Error("detached before its linger after the second job")
	}
	deadline := time.Now().Add(10 * linger)
	for c.Attached() && time.Now().Before(deadline) {
		time.Sleep(linger / 10)
	}
	if c.Attached() {
		t.Errorf("still attached %s after the linger of %s", 10*linger, linger)
	}
}

func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		mount, dir string
		want       int
		err        bool
	}{
		{"/sys/fs/cgroup", "/sys/fs/cgroup", 0, false},
		{"/sys/fs/cgroup", "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5", 3, false},
		{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified/persyst_n1/job_5", 2, false},
		{"/sys/fs/cgroup", "/sys/fs/other", 0, true},
	} {
		got, err := Level(tc.mount, tc.dir)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("Level(%q, %q) = %d, %v; want %d, error %v", tc.mount, tc.dir, got, err, tc.want, tc.err)
		}
	}
}

func TestShareFor(t *testing.T) {
	s := Sampling{Budget: 0.005, Outside: 0.005 / 8}.withDefaults()
	for _, tc := range []struct {
		name    string
		load    float64 // of one CPU, the node's calls attached
		outside float64 // of them, the calls counted for no job
		credit  time.Duration
		want    float64
	}{
		{"idle node", 0.0001, 0.0001, 0, 1},
		{"at the budget", 0.005, 0, -time.Millisecond, 1},
		{"twice the budget, credit left", 0.01, 0, time.Millisecond, 1},
		{"twice the budget, credit spent", 0.01, 0, 0, 0.5},
		{"a storm", 0.17, 0.001, -time.Millisecond, 1.0 / 64},
		{"a storm on a slower node", 0.01 * 16, 0, 0, 1.0 / 32},
		{"beyond the floor", 0.5, 0, 0, 1.0 / 64},
		{"cost not measurable", 0, 0, 0, 1},
		{"others' calls at their bound", 0.005 / 8, 0.005 / 8, 0, 1},
		{"others' calls twice their bound: a node's daemons", 0.005 / 4, 0.005 / 4, time.Millisecond, 1},
		{"others' calls five times their bound, credit left", 0.005 * 5 / 8, 0.005 * 5 / 8, time.Millisecond, 1.0 / 8},
		{"a storm outside the jobs", 0.16, 0.16, time.Millisecond, 1.0 / 256},
		{"a storm outside the jobs, beyond the floor", 0.5, 0.5, 0, 1.0 / 256},
		{"a job's storm beside others' calls", 0.16, 0.01, 0, 1.0 / 32},
		{"others' calls cut more than the budget does", 0.16, 0.03, 0, 1.0 / 64},
	} {
		if got := shareFor(tc.load, tc.outside, tc.credit, Sampling{}.withDefaults()); got != 1 {
			t.Errorf("%s without a budget: shareFor = %g, want 1 (every call)", tc.name, got)
		}
		if got := shareFor(tc.load, tc.outside, tc.credit, s); got != tc.want {
			t.Errorf("%s: shareFor(%g, %g, %v) = %g, want %g", tc.name, tc.load, tc.outside, tc.credit, got, tc.want)
		}
	}
	if got := shareFor(0.16, 0.16, 0, Sampling{Budget: 0.005}.withDefaults()); got != 1.0/32 {
		t.Errorf("a storm outside the jobs without an outside bound: shareFor = %g, want 1/32", got)
	}
	if s.Burst != 5*time.Millisecond {
		t.Errorf("default burst at a 0.5 %% budget = %v, want 5ms", s.Burst)
	}
}

// TestBetweenWindows: between sampled windows the raw tracepoint is detached, and gated
// fentry programs stay attached with their gate closed. In each mode the kernel allows.
func TestBetweenWindows(t *testing.T) {
	testenv.Root(t, "loads BPF programs")
	o := Options{Events: testEvents, Sampling: Sampling{Period: 100 * time.Millisecond, Budget: 1e-12, MinShare: 0.25}}
	eachMode(t, o, func(t *testing.T, c *Counter) {
		watchFresh(t, c)
		knownCost(t, c, 5*time.Second)
		toWindows(t, c, 20000)
		c.mu.Lock()
		wantLinked := c.progs.gated
		c.mu.Unlock()
		t.Logf("%s: a call costs %v more counted", c.Mode(), c.Cost())
		var off, linked int
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
			timeCalls(200, 1) // calls counted in the windows keep the rate known
			c.mu.Lock()
			if !c.progs.counting() {
				off++
				if c.progs.linked() {
					linked++
				}
			}
			c.mu.Unlock()
		}
		if off == 0 {
			t.Fatal("counting all the time in a second of windows of a quarter")
		}
		if got := linked == off; got != wantLinked || (linked != 0 && linked != off) {
			t.Errorf("attached in %d of %d looks between windows, want %v in all", linked, off, wantLinked)
		}
	})
}

// TestBusyCheck: a busy node is looked at when its credit would run out, so that the
// credit bounds what the calls cost before the windows.
func TestBusyCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		load   float64
		credit time.Duration
		want   time.Duration
	}{
		{"within budget", 0.004, 5 * time.Millisecond, checkQuiet},
		{"credit spent", 0.15, 0, checkBusy},
		{"credit in debt", 0.15, -time.Millisecond, checkBusy},
		{"storm: the credit runs out first", 0.505, 5 * time.Millisecond, 10 * time.Millisecond},
		{"credit runs out in 5 ms", 0.505, 2500 * time.Microsecond, 5 * time.Millisecond},
		{"storm ramping up: checkCredit first", 0.155, 5 * time.Millisecond, checkCredit},
		{"load just over budget: checkCredit first", 0.006, 5 * time.Millisecond, checkCredit},
		{"little credit left: checkMin", 0.505, 100 * time.Microsecond, checkMin},
	} {
		if got := busyCheck(tc.load, tc.credit, 0.005); got != tc.want {
			t.Errorf("%s: busyCheck(%g, %v) = %v, want %v", tc.name, tc.load, tc.credit, got, tc.want)
		}
	}
}

// TestUntilWindow: sampled windows lie in the middle of each Period of the wall clock,
// so that reads at whole seconds fall between them.
func TestUntilWindow(t *testing.T) {
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		now  time.Duration // after base
		want time.Duration
	}{
		{0, 492187500 * time.Nanosecond},                                            // the window of 1/64 s centred on .5
		{600 * time.Millisecond, 1492187500*time.Nanosecond - 600*time.Millisecond}, // the next second's
		{492187500 * time.Nanosecond, time.Second},                                  // just begun: the next one
	} {
		if got := untilWindow(base.Add(tc.now), time.Second, 1.0/64); got != tc.want {
			t.Errorf("at +%v: untilWindow = %v, want %v", tc.now, got, tc.want)
		}
	}
}

// sampledCounter is a Counter on the raw tracepoint with sampling s, closed at the
// test's end, watching a fresh cgroup (id) whose child leaf the test runs calls in.
func sampledCounter(t *testing.T, s Sampling) (c *Counter, id uint64, leaf string) {
	t.Helper()
	testenv.Root(t, "loads BPF programs")
	c, _, err := New(Options{Events: testEvents, NoFentry: true, Sampling: s})
	if err != nil {
		testenv.Unavailable(t, "BPF counting not available: "+err.Error())
	}
	t.Cleanup(func() { c.Close() })
	id, leaf = watchFresh(t, c)
	return c, id, leaf
}

// watchFresh has c watch a fresh cgroup (id) whose child leaf the test runs calls in.
func watchFresh(t *testing.T, c *Counter) (id uint64, leaf string) {
	t.Helper()
	mount, job, leaf := unifiedDir(t)
	id, level := cgroupOf(t, mount, job)
	if err := c.Watch(id, level); err != nil {
		t.Fatal(err)
	}
	return id, leaf
}

// TestSampledEstimate: counting forced to sample (a budget nothing fits in) counts a
// steady storm in a share of the time, and the counts scaled by the time counted
// estimate the calls made (within 20 %, over 3 s of windows). The virtual node does not run it (scripts/vm.sh
// says why). Between the windows the raw tracepoint is detached; fentry programs
// stay attached with their gate closed (programs).
func TestSampledEstimate(t *testing.T) {
	testenv.Root(t, "loads BPF programs")
	eachMode(t, Options{Events: testEvents, Sampling: Sampling{Period: 100 * time.Millisecond, Budget: 1e-12, MinShare: 0.25}},
		func(t *testing.T, c *Counter) {
			id, leaf := watchFresh(t, c)
			knownCost(t, c, 5*time.Second)
			t0, a0 := c.AttachedTime()
			u0 := usage(t, leaf)
			// What the programs were between the windows, looked at every millisecond.
			var detached, paused bool
			stop, looked := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(looked)
				for !stopped(stop) {
					c.mu.Lock()
					detached = detached || !c.progs.linked()
					paused = paused || !c.progs.counting()
					c.mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			}()
			// 3 s: the windows' share of the storm varies with what else the machine
			// runs (the unit tests' other packages, side by side); 2 s once came to 23 %
			// over.
			n := stormIn(t, leaf, 3*time.Second)
			close(stop)
			<-looked
			t1, a1 := c.AttachedTime()
			if share := c.Share(); share != 0.25 {
				t.Errorf("share while sampling = %g, want 0.25", share)
			}
			if gated := c.Mode() == Fentry; !paused || detached == gated {
				t.Errorf("%s: between windows detached %v, not counting %v; want not counting, and detached %v",
					c.Mode(), detached, paused, !gated)
			}
			vals, err := c.Read(id, nil)
			if err != nil {
				t.Fatal(err)
			}
			wall, d := t1.Sub(t0), a1.Sub(a0)
			if d.Total() >= wall*9/10 || d.Sampled < MinSampled {
				t.Fatalf("attached %+v of %v: not sampled", d, wall)
			}
			var whole, sampled, calls float64
			for _, v := range vals {
				whole += float64(v.Whole[0])
				sampled += float64(v.Sampled[0])
				calls += float64(v.Sampled[0] + v.Sampled[1]) // openat and close: the storm's calls
			}
			busy := (usage(t, leaf) - u0).Seconds() * d.Sampled.Seconds() / wall.Seconds()
			share, per, ok := Unseen(wall, d, calls, busy, c.Cost())
			if !ok {
				t.Fatalf("Unseen(%v, %+v) found no windows to estimate from", wall, d)
			}
			est := whole + sampled*(1+per)
			t.Logf("attached %+v of %v, openat %.0f counted whole and %.0f in windows, cost %v a call, %.2f not attached, each sampled call for %.2f more: estimate %.0f of %d",
				d, wall, whole, sampled, c.Cost(), share, per, est, n)
			if est < 0.8*float64(n) || est > 1.2*float64(n) {
				t.Errorf("estimate %.0f openat calls, want %d ± 20 %%", est, n)
			}
		})
}

// TestBurstCountedWhole: calls made before the sampler turns to windows are every call
// of their time and are not scaled with the windows' (a burst of opens at a job's start,
// then a quiet job sampled, read ten times too many before). The burst fits in the
// credit; the test's own calls then spend it.
func TestBurstCountedWhole(t *testing.T) {
	const n = 3000 // 6,000 calls: about 0.3 ms of the 2 ms credit
	// The credit is the node's: other processes' calls (other tests', in parallel) spend
	// it too. A burst counted whole needs a quiet moment: tries for up to 20 s.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		c, id, leaf := sampledCounter(t, Sampling{Period: 100 * time.Millisecond, Budget: 1e-12, MinShare: 0.25, Burst: 2 * time.Millisecond})
		// Where the calibration drowned in noise (a busy machine), the sampler probes
		// for the cost, detached, as soon as calls come: the burst's calls of a probe's
		// time would not be counted. It is learnt first, at the Periods' ends.
		knownCost(t, c, 5*time.Second)
		t0, a0 := c.AttachedTime()
		runIn(t, leaf, n)
		if c.Share() < 1 {
			// The credit was spent before the burst's end (a busy node).
			if time.Now().After(end) {
				t.Fatalf("the sampler turned to windows before %d opens were made, in every try for 20 s", n)
			}
			c.Close()
			continue
		}
		toWindows(t, c, 100000) // this process's calls (outside the cgroup) spend the credit
		time.Sleep(time.Second) // windows of a quiet cgroup
		t1, a1 := c.AttachedTime()
		vals, err := c.Read(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		wall, d := t1.Sub(t0), a1.Sub(a0)
		var whole, sampled float64
		for _, v := range vals {
			whole += float64(v.Whole[0])
			sampled += float64(v.Sampled[0])
		}
		share, per, ok := Unseen(wall, d, sampled, 0.001, c.Cost())
		est := whole + sampled*(1+per)
		t.Logf("attached %+v of %v; %.0f openat counted whole, %.0f in windows; %.2f not attached: estimate %.0f", d, wall, whole, sampled, share, est)
		if d.Sampled < MinSampled || share < 0.3 || !ok {
			t.Fatalf("attached %+v of %v: the sampler did not turn to windows", d, wall)
		}
		// The child's Go runtime opens a few files of its own.
		if est < n || est > n*1.01 {
			t.Errorf("estimate %.0f openat calls, want %d (+1 %%)", est, n)
		}
		return
	}
}

// TestJobsCallsApart: with a budget the programs count the watched cgroups' counted
// calls apart from the node's (allJobs): a job's opens and closes there, this process's
// calls not.
func TestJobsCallsApart(t *testing.T) {
	c, _, leaf := sampledCounter(t, Sampling{Period: 100 * time.Millisecond, Budget: 0.9})
	// While a call's cost is not known (the calibration drowned in a busy machine's
	// noise), the sampler detaches for probes, and the calls meanwhile are not counted
	// (a CI run counted 19,442 of 20,000): the count is judged once the cost is known.
	knownCost(t, c, 5*time.Second)
	read := func() (node, jobs uint64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return callsAt(c.all, allNode, c.calls), callsAt(c.all, allJobs, c.calls)
	}
	const n = 3000
	n0, j0 := read()
	runIn(t, leaf, n)
	n1, j1 := read()
	timeCalls(20000, 1)
	n2, j2 := read()
	t.Logf("the job's %d pairs: %d of the node's %d calls; this process's 20,000: %d of %d", n, j1-j0, n1-n0, j2-j1, n2-n1)
	if got := j1 - j0; got < 2*n || got > n1-n0 {
		t.Errorf("a job's %d openat+close pairs counted as %d of the watched cgroups' calls, of the node's %d; want %d to %d",
			n, got, n1-n0, 2*n, n1-n0)
	}
	if got := j2 - j1; got >= 1000 {
		t.Errorf("20,000 calls of this process, outside the watched cgroup, counted %d as the jobs'; want under 1,000 (others' only)", got)
	}
	if got := n2 - n1; got < 20000 {
		t.Errorf("20,000 calls of this process: %d of the node's counted, want at least 20,000", got)
	}
}

// TestOutsideStormSampled: a storm outside every watched cgroup (this process's calls)
// is cut to windows where the budget would count it whole, with credit left: calls
// counted for no job may cost Outside alone.
func TestOutsideStormSampled(t *testing.T) {
	c, _, _ := sampledCounter(t, Sampling{Period: 100 * time.Millisecond, Budget: 0.9, Outside: 0.001, MinShare: 0.25})
	knownCost(t, c, 5*time.Second)
	toWindows(t, c, 20000)
	t.Logf("share %g, cost %v a call", c.Share(), c.Cost())
}

// toWindows drives this process's calls (batches of batch) until c's sampler turns to
// windows, failing after 5 s.
func toWindows(t *testing.T, c *Counter, batch int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); c.Share() == 1; {
		if time.Now().After(deadline) {
			t.Fatal("the sampler did not turn to windows in 5 s of this process's calls")
		}
		timeCalls(batch, 1)
	}
}

// knownCost waits up to d for c's cost per call: calibrated at the Watch, or where noise
// drowned that (a busy machine), probed by the sampler at the end of each Period.
func knownCost(t *testing.T, c *Counter, d time.Duration) {
	t.Helper()
	for wait := time.Now().Add(d); c.Cost() <= 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(wait) {
			testenv.Unavailable(t, fmt.Sprintf("the raw tracepoint's cost per call was not measurable here in %v", d))
		}
	}
}

// TestFirstWindowAtOnce: at the turn to windows the program stays attached for a window
// before it is first detached, so that the time until the next window (in the middle of a
// Period) is estimated from the calls of that moment.
func TestFirstWindowAtOnce(t *testing.T) {
	c, _, _ := sampledCounter(t, Sampling{Period: time.Second, Budget: 1e-12, MinShare: 1.0 / 16})
	knownCost(t, c, 5*time.Second)
	_, a0 := c.AttachedTime()
	toWindows(t, c, 20000)
	linked := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.progs.counting()
	}
	for deadline := time.Now().Add(2 * time.Second); linked(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still attached 2 s after the turn to windows of 1/16 s")
		}
	}
	_, a1 := c.AttachedTime()
	want := time.Second / 16
	if got := a1.Sampled - a0.Sampled; got < want*9/10 {
		t.Errorf("attached %v in windows before the first detach, want a window (%v)", got, want)
	}
}

// TestNoticeWakesSampler: with the ring buffer, a quiet node's sampler sleeps until a
// CPU has made noticeEvery calls, and a storm then turns it to windows at once.
func TestNoticeWakesSampler(t *testing.T) {
	c, _, leaf := sampledCounter(t, Sampling{Period: 100 * time.Millisecond, Budget: 1e-12, MinShare: 0.25})
	if c.notices == nil {
		testenv.Unavailable(t, "no BPF ring buffer in this kernel")
	}
	knownCost(t, c, 5*time.Second)
	// 20,000 calls in the cgroup: a notice well before the sampler's old first look.
	start := time.Now()
	runIn(t, leaf, 10000)
	for c.Share() == 1 {
		if time.Since(start) > checkQuiet/2 {
			t.Fatalf("still attached throughout %v after a storm began", time.Since(start))
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("windows %v after the storm began", time.Since(start))
}

// usage is cgroup v2 dir's CPU time (cpu.stat's usage_usec, there without the cpu
// controller too).
func usage(t *testing.T, dir string) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return time.Duration(us) * time.Microsecond
		}
	}
	t.Fatalf("no usage_usec in %s/cpu.stat", dir)
	return 0
}

// TestCostProbedWhenUnknown: where the calibration at the Watch gave nothing (noise on a
// busy node), the sampler detaches for a probe at the end of each Period until it knows
// what a call costs, since without it no budget is kept.
func TestCostProbedWhenUnknown(t *testing.T) {
	c, _, _ := sampledCounter(t, Sampling{Period: 50 * time.Millisecond, Budget: 0.005})
	c.mu.Lock()
	c.cm.cost, c.cm.ring = 0, costs{} // as if the calibration drowned in noise
	c.mu.Unlock()
	_, a0 := c.AttachedTime()
	deadline := time.Now().Add(5 * time.Second)
	for c.Cost() <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("the cost per call stayed unknown for 5 s of 50 ms periods")
		}
		time.Sleep(5 * time.Millisecond)
	}
	linked := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.progs.counting()
	}
	for deadline := time.Now().Add(time.Second); !linked(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the programs stayed detached for 1 s after the probe")
		}
	}
	if _, a1 := c.AttachedTime(); a1.Total() <= a0.Total() {
		t.Errorf("attached time did not grow across the probe: %v then %v", a0, a1)
	}
}

// TestStormProbedAtOnceWhenCostUnknown: where the cost is not known, a storm is not
// counted whole until the probe at the end of a long Period (the storm would pay its
// cost throughout): the sampler probes as soon as the calls come, and turns to windows.
func TestStormProbedAtOnceWhenCostUnknown(t *testing.T) {
	c, _, leaf := sampledCounter(t, Sampling{Period: 10 * time.Second, Budget: 1e-12, MinShare: 0.25})
	c.mu.Lock()
	c.cm.cost, c.cm.ring = 0, costs{} // as if the calibration drowned in noise
	c.mu.Unlock()
	storm := childIn(t, leaf, childEnv+"=2000000") // about 2 s here
	done := make(chan struct{})
	start := time.Now()
	if err := storm.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { storm.Wait(); close(done) }()
	defer func() { <-done }()
	for c.Cost() <= 0 || c.Share() == 1 {
		select {
		case <-done:
			t.Fatalf("a storm of %v ran with the cost unknown (%v) or counted whole (share %g) throughout, with a Period of 10 s",
				time.Since(start), c.Cost(), c.Share())
		case <-time.After(time.Millisecond):
		}
	}
	t.Logf("cost %v known and share %g %v after the storm began", c.Cost(), c.Share(), time.Since(start))
}

// TestProbeKey: the sampler's own calls are timed as counted ones, looked up under this
// process's cgroup at the first watched level: its ancestor there, or 0 above it.
func TestProbeKey(t *testing.T) {
	mount, job, leaf := unifiedDir(t)
	jobID, _ := CgroupID(job)
	leafID, _ := CgroupID(leaf)
	for _, tc := range []struct {
		name  string
		self  string
		level uint32
		want  uint64
	}{
		{"self not known", "", 1, 0},
		{"at the root, jobs below", mount, 1, 0},
		{"deeper than the jobs' level", leaf, 1, jobID},
		{"at the jobs' level", leaf, 2, leafID},
		{"above the jobs' level", job, 2, 0},
	} {
		m := &costMeter{mount: mount, self: tc.self}
		got, ok := m.key([]uint32{tc.level})
		if !ok || got != tc.want {
			t.Errorf("%s: key = %d, %v; want %d", tc.name, got, ok, tc.want)
		}
	}
	if _, ok := (&costMeter{mount: mount, self: "/elsewhere"}).key([]uint32{1}); ok {
		t.Error("self outside the mount: a key")
	}
	if _, ok := (&costMeter{}).key(nil); ok {
		t.Error("no level watched: a key")
	}
}

// TestUnseenCPU: the calls of the CPU time not counted, from the windows' calls per
// CPU-second, less what counting them cost.
func TestUnseenCPU(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		d       CPUSplit
		sampled float64
		cost    time.Duration
		want    float64
		ok      bool
	}{
		{"a quarter counted", CPUSplit{Sampled: 250 * ms, Off: 750 * ms}, 1000, 0, 3, true},
		{"counting cost a tenth of the windows", CPUSplit{Sampled: 250 * ms, Off: 750 * ms}, 1000, 25 * time.Microsecond, 750.0 / 225, true},
		{"a cost measured high: at most a third", CPUSplit{Sampled: 250 * ms, Off: 750 * ms}, 1000, ms, 4.5, true},
		{"nothing uncounted", CPUSplit{Sampled: 250 * ms}, 1000, 0, 0, true},
		{"too little CPU time in the windows", CPUSplit{Sampled: MinSampledCPU - 1, Off: time.Second}, 10, 0, 0, false},
	} {
		got, ok := UnseenCPU(tc.d, tc.sampled, tc.cost)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: UnseenCPU(%+v, %g, %v) = %g, %v; want %g, %v", tc.name, tc.d, tc.sampled, tc.cost, got, ok, tc.want, tc.ok)
		}
	}
}

// TestCPUSplit: a watched cgroup's CPU time is split at the sampler's turns by how its
// calls were counted: a steady storm sampled has the share of its CPU time in windows
// that the windows have of the time (a quarter of each Period here, more where the
// sampler wakes late, as under emulation), and no more CPU time is split than it took.
func TestCPUSplit(t *testing.T) {
	testenv.Root(t, "loads BPF programs")
	eachMode(t, Options{Events: testEvents, Sampling: Sampling{Period: 100 * time.Millisecond, Budget: 1e-12, MinShare: 0.25}},
		func(t *testing.T, c *Counter) {
			id, leaf := watchFresh(t, c)
			job := filepath.Dir(leaf)
			if err := c.Usage(id, job); err != nil {
				t.Fatal(err)
			}
			if err := c.Usage(id, job); err == nil {
				t.Error("a second Usage of the same cgroup: no error")
			}
			knownCost(t, c, 5*time.Second)
			s0, ok := c.CPUTime(id)
			if !ok {
				t.Fatal("no CPU time split after Usage")
			}
			u0 := usage(t, job)
			t0, a0 := c.AttachedTime()
			stormIn(t, leaf, 2*time.Second)
			s1, _ := c.CPUTime(id)
			t1, a1 := c.AttachedTime()
			total := usage(t, job) - u0
			d, a := s1.Sub(s0), a1.Sub(a0)
			share := d.Sampled.Seconds() / (d.Sampled + d.Off).Seconds()
			inTime := a.Sampled.Seconds() / (t1.Sub(t0) - a.Whole).Seconds()
			t.Logf("storm: %v of CPU, %v in windows, %v not counted: %.2f in windows, %.2f of the time", total, d.Sampled, d.Off, share, inTime)
			if d.Sampled+d.Off > total+time.Millisecond || d.Sampled+d.Off < total/2 {
				t.Errorf("split %v + %v of the storm's %v of CPU time: want most of it, no more", d.Sampled, d.Off, total)
			}
			if math.Abs(share-inTime) > 0.15 || share <= 0 || share >= 1 {
				t.Errorf("%.2f of the CPU time in windows of %.2f of the time", share, inTime)
			}
			if err := c.Unwatch(id); err != nil {
				t.Fatal(err)
			}
			if _, ok := c.CPUTime(id); ok {
				t.Error("CPU time still split after Unwatch")
			}
		})
}

// TestWantsProbe: every pause is probed until the cost is known from costSamples probes,
// then one in probeEvery.
func TestWantsProbe(t *testing.T) {
	var m costMeter
	for i := range 3 {
		if !m.wantsProbe() {
			t.Fatalf("pause %d not probed with the cost unknown", i)
		}
	}
	m.cost = 50 * time.Nanosecond
	for range costSamples - 1 {
		m.ring.add(300*time.Nanosecond, 250*time.Nanosecond)
	}
	if !m.wantsProbe() {
		t.Fatalf("pause not probed with %d probes of %d", m.ring.n, costSamples)
	}
	m.ring.add(300*time.Nanosecond, 250*time.Nanosecond)
	probed := 0
	for range 4 * probeEvery {
		if m.wantsProbe() {
			probed++
		}
	}
	if probed != 4 {
		t.Errorf("%d of %d pauses probed with the cost known, want 4", probed, 4*probeEvery)
	}
}

// TestEarlyProbesBounded: pairs left out (the counted side no slower) count against the
// early probes, so a node whose timings say nothing does not probe a storm at every
// notice.
func TestEarlyProbesBounded(t *testing.T) {
	var m costMeter
	for i := range earlyProbes {
		if !m.wantsEarlyProbe() {
			t.Fatalf("no early probe after %d left out, want %d", i, earlyProbes)
		}
		m.ring.add(300*time.Nanosecond, 320*time.Nanosecond)
	}
	if m.wantsEarlyProbe() {
		t.Errorf("early probe wanted after %d tries (%d kept)", m.ring.tried, m.ring.n)
	}
	if m.ring.n != 0 || m.ring.cost() != 0 {
		t.Errorf("pairs kept %d, cost %v: want none, 0", m.ring.n, m.ring.cost())
	}
}

// TestCostsCost: the cost is the fastest call timed counted less the fastest not, over
// the last costSamples timings; a probe's own difference, high or low, does not carry.
func TestCostsCost(t *testing.T) {
	ns := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x))
		}
		return d
	}
	for _, tc := range []struct {
		name    string
		on, off []time.Duration
		want    time.Duration
	}{
		{"none", nil, nil, 0},
		{"one", ns(300), ns(250), 50},
		{"slower counted than not: left out", ns(364), ns(394), 0},
		// A calibration whose uncounted calls were slowed (a job's first processes
		// starting) and whose counted ones were not, then a storm's probes: kept, its
		// counted timing stood below every uncounted one of the storm, and the cost at 0
		// let the storm be counted whole.
		{"a disturbed calibration, then a storm's probes", ns(250, 305, 340, 301), ns(330, 256, 262, 258), 45},
		// The timings of a storm at 60 s (docs/performance.md): the calibration, then
		// the probes; their differences' median was 90 ns.
		{"a storm's", ns(340, 433, 305, 347, 540, 304, 313), ns(250, 250, 269, 270, 260, 253, 252), 54},
		// Only the last costSamples count: the early fast timings have left the ring.
		{"the last costSamples", append(ns(100, 100), slices.Repeat(ns(400), costSamples)...),
			append(ns(50, 50), slices.Repeat(ns(300), costSamples)...), 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c costs
			for i := range tc.on {
				c.add(tc.on[i], tc.off[i])
			}
			if got := c.cost(); got != tc.want {
				t.Errorf("cost: -want +got\n-%v\n+%v", tc.want, got)
			}
		})
	}
}
