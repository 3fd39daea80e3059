package procio

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
	"golang.org/x/sys/unix"
)

// The test binary doubles as the workload of the real-kernel tests: TestMain runs a helper
// mode instead of the tests when helperEnv is set. Helpers do their I/O with raw system
// calls on blocking descriptors (no os.File on pipes, so no netpoller, no goroutines), so
// that every write(2) they make is one the test knows of.
const helperEnv = "PERSYST_PROCIO_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "parent":
		helperParent()
	case "child":
		helperChild()
	case "sleep":
		helperSleep()
	case "eacces":
		helperEACCES()
	case "writer":
		writeChunks(os.Getenv("PERSYST_PROCIO_FILE"), envInt("PERSYST_PROCIO_N1"))
	case "reaper":
		helperReaper()
	default:
		os.Exit(3)
	}
	os.Exit(0)
}

const (
	chunk    = 4096 // bytes per write(2)
	kids     = 3
	parentN1 = 7 // chunks the parent writes after reaping its children
	parentN2 = 5 // chunks it writes before exiting
)

// kidN1 and kidN2 are the chunks child i writes in its two batches.
func kidN1(i int) int { return 10 + i }
func kidN2(i int) int { return 20 + 3*i }

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "procio helper: "+format+"\n", args...)
	os.Exit(2)
}

func writeAll(fd int, b []byte) {
	n, err := unix.Write(fd, b)
	if err != nil || n != len(b) {
		die("write fd %d: %d, %v", fd, n, err)
	}
}

// readLine reads up to '\n' one byte per read(2) (so no input is buffered away).
func readLine(fd int) string {
	var b []byte
	var c [1]byte
	for {
		n, err := unix.Read(fd, c[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			die("read fd %d: %d, %v", fd, n, err)
		}
		if c[0] == '\n' {
			return string(b)
		}
		b = append(b, c[0])
	}
}

func expectLine(fd int, want string) {
	if got := readLine(fd); got != want {
		die("read %q, want %q", got, want)
	}
}

// writeChunks appends n chunks to path, one write(2) each.
func writeChunks(path string, n int) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
	if err != nil {
		die("open %s: %v", path, err)
	}
	buf := make([]byte, chunk)
	for range n {
		writeAll(fd, buf)
	}
	unix.Close(fd)
}

func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		die("%s: %v", name, err)
	}
	return n
}

// helperParent starts kids children, prints "pids P1 P2 ...", and then follows the test's
// commands on stdin:
//
//	"a": tell each child "a" (it writes its first batch and answers "a"), wait for the
//	     answers, answer "a";
//	"b": tell each child "b" (it writes its second batch and exits), reap them all, write
//	     parentN1 chunks, answer "b";
//	"c": write parentN2 chunks and exit.
func helperParent() {
	_ = unix.SetNonblock(0, false)
	dir := os.Getenv("PERSYST_PROCIO_DIR")
	self, err := os.Executable()
	if err != nil {
		die("%v", err)
	}
	type kid struct {
		cmd     *exec.Cmd
		in, out int // our ends of its stdin and stdout
	}
	var ks []kid
	line := "pids"
	for i := range kids {
		var in, out [2]int
		if err := unix.Pipe2(in[:], unix.O_CLOEXEC); err != nil {
			die("%v", err)
		}
		if err := unix.Pipe2(out[:], unix.O_CLOEXEC); err != nil {
			die("%v", err)
		}
		cin, cout := os.NewFile(uintptr(in[0]), "kid-stdin"), os.NewFile(uintptr(out[1]), "kid-stdout")
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), helperEnv+"=child",
			"PERSYST_PROCIO_FILE="+filepath.Join(dir, "kid"+strconv.Itoa(i)),
			"PERSYST_PROCIO_N1="+strconv.Itoa(kidN1(i)), "PERSYST_PROCIO_N2="+strconv.Itoa(kidN2(i)))
		cmd.Stdin, cmd.Stdout, cmd.Stderr = cin, cout, os.Stderr
		if err := cmd.Start(); err != nil {
			die("%v", err)
		}
		cin.Close()
		cout.Close()
		ks = append(ks, kid{cmd, in[1], out[0]})
		line += " " + strconv.Itoa(cmd.Process.Pid)
	}
	writeAll(1, []byte(line+"\n"))

	expectLine(0, "a")
	for _, k := range ks {
		writeAll(k.in, []byte("a\n"))
	}
	for _, k := range ks {
		expectLine(k.out, "a")
	}
	writeAll(1, []byte("a\n"))

	expectLine(0, "b")
	for _, k := range ks {
		writeAll(k.in, []byte("b\n"))
	}
	for _, k := range ks {
		if err := k.cmd.Wait(); err != nil {
			die("child: %v", err)
		}
	}
	mine := filepath.Join(dir, "parent")
	writeChunks(mine, parentN1)
	writeAll(1, []byte("b\n"))

	expectLine(0, "c")
	writeChunks(mine, parentN2)
}

func helperChild() {
	_ = unix.SetNonblock(0, false)
	file := os.Getenv("PERSYST_PROCIO_FILE")
	n1, n2 := envInt("PERSYST_PROCIO_N1"), envInt("PERSYST_PROCIO_N2")
	expectLine(0, "a")
	writeChunks(file, n1)
	writeAll(1, []byte("a\n"))
	expectLine(0, "b")
	writeChunks(file, n2)
}

// helperSleep waits for its stdin to close.
func helperSleep() {
	_ = unix.SetNonblock(0, false)
	var b [1]byte
	for {
		n, err := unix.Read(0, b[:])
		if err == unix.EINTR {
			continue
		}
		if n <= 0 {
			return
		}
	}
}

// helperEACCES, run as an unprivileged user, reads the process PERSYST_PROCIO_PID and
// prints the error and the number of processes read.
func helperEACCES() {
	pid := envInt("PERSYST_PROCIO_PID")
	_, n, err := NewTracker(hostfs.New("/"), TrackerOptions{}).Update([]int{pid})
	fmt.Printf("%d %v %v\n", n, errors.Is(err, unix.EACCES), err)
}

// helperReaper starts a "writer" child, waits for it to exit and prints the growth of its
// own WChar and SyscW over that time. With PERSYST_PROCIO_IGNORE set it first sets SIGCHLD
// to SIG_IGN, so the kernel reaps the child itself.
func helperReaper() {
	if os.Getenv("PERSYST_PROCIO_IGNORE") != "" {
		signal.Ignore(syscall.SIGCHLD)
	}
	self, err := os.Executable()
	if err != nil {
		die("%v", err)
	}
	before := selfIO()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=writer")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		die("%v", err)
	}
	if os.Getenv("PERSYST_PROCIO_IGNORE") != "" {
		// wait(2) blocks until every child is gone, then fails with ECHILD.
		for {
			_, err := unix.Wait4(-1, nil, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != unix.ECHILD {
				die("wait4: %v, want ECHILD", err)
			}
			break
		}
	} else if err := cmd.Wait(); err != nil {
		die("%v", err)
	}
	d := selfIO().Sub(before)
	fmt.Printf("%d %d\n", d.WChar, d.SyscW)
}

func selfIO() IO {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		die("%v", err)
	}
	v, err := parseIOBytes(b)
	if err != nil {
		die("%v", err)
	}
	return v
}

// TestKernelReapAccounting checks what the Tracker's exit accounting relies on: a parent
// that waits for its child gets the child's totals added to its own /proc/PID/io; one that
// ignores SIGCHLD (the kernel reaps the child) gets nothing.
func TestKernelReapAccounting(t *testing.T) {
	if err := CheckAccounting(hostfs.New("/")); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const n = 9
	for _, tc := range []struct {
		name, ignore, want string
	}{
		{"waited", "", fmt.Sprintf("%d %d\n", n*chunk, n)},
		{"SIGCHLD ignored", "1", "0 0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(self)
			cmd.Env = append(os.Environ(), helperEnv+"=reaper", "PERSYST_PROCIO_IGNORE="+tc.ignore,
				"PERSYST_PROCIO_FILE="+filepath.Join(t.TempDir(), "out"), "PERSYST_PROCIO_N1="+strconv.Itoa(n))
			cmd.Stderr = os.Stderr
			got, err := cmd.Output()
			if err != nil {
				t.Fatalf("helper: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("parent's wchar, syscw grew by %q, want %q", got, tc.want)
			}
		})
	}
}

// wantIO is the expected total of the write counters.
type wantIO struct{ wchar, syscw uint64 }

// checkTotal compares a Tracker total with the expected write counters. The helpers write
// nothing the test does not know of, so the counters should be exact, and were in every
// run so far (also with -race and GOMAXPROCS=1): the Go runtime of the helpers writes
// nothing by itself (it reads about 2.3 KB at start-up, which is why RChar is not
// checked). The tolerance (1% of WChar, ±2 write calls) is for a runtime that wakes its
// netpoller, an 8-byte write(2) to an eventfd, which these helpers never start.
func checkTotal(t *testing.T, stage string, got IO, want wantIO) {
	t.Helper()
	dw, ds := int64(got.WChar)-int64(want.wchar), int64(got.SyscW)-int64(want.syscw)
	t.Logf("%s: wchar %d (want %d, %+d), syscw %d (want %d, %+d), rchar %d, syscr %d",
		stage, got.WChar, want.wchar, dw, got.SyscW, want.syscw, ds, got.RChar, got.SyscR)
	if abs(dw)*100 > int64(want.wchar) {
		t.Errorf("%s: wchar %d, want %d ±1%%", stage, got.WChar, want.wchar)
	}
	if abs(ds) > 2 {
		t.Errorf("%s: syscw %d, want %d ±2", stage, got.SyscW, want.syscw)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestRealKernel runs a process tree (a parent, kids children that write in two batches
// and are reaped by the parent, the parent writing before it exits), reads it with a
// Tracker at each stage, and checks the totals: first reads count whole, children's
// deltas, children gone and absorbed by their parent without double counting, the
// parent's final totals read while it is a zombie, and nothing lost or added after it is
// reaped.
func TestRealKernel(t *testing.T) {
	fsys := hostfs.New("/")
	if err := CheckAccounting(fsys); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=parent", "PERSYST_PROCIO_DIR="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	out := bufio.NewReader(stdout)
	recv := func(want string) string {
		t.Helper()
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading from the parent: %v", err)
		}
		if !strings.HasPrefix(l, want) {
			t.Fatalf("parent said %q, want %q", l, want)
		}
		return l
	}
	send := func(s string) {
		t.Helper()
		if _, err := stdin.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
	}

	line := recv("pids ")
	parent := cmd.Process.Pid
	all := []int{parent}
	for _, f := range strings.Fields(line)[1:] {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, pid)
	}
	if len(all) != 1+kids {
		t.Fatalf("parent said %q", line)
	}
	tr := NewTracker(fsys, TrackerOptions{})
	update := func(stage string, pids []int, wantN int, want wantIO) {
		t.Helper()
		got, n, err := tr.Update(pids)
		if err != nil {
			t.Errorf("%s: %v", stage, err)
		}
		if n != wantN {
			t.Errorf("%s: read %d processes, want %d", stage, n, wantN)
		}
		checkTotal(t, stage, got, want)
	}

	// The parent has written the pids line; the children wait for "a".
	want := wantIO{uint64(len(line)), 1}
	update("started", all, 1+kids, want)

	send("a")
	recv("a")
	for i := range kids {
		want.wchar += uint64(kidN1(i)*chunk + 2) // batch and "a\n"
		want.syscw += uint64(kidN1(i) + 1)
	}
	want.wchar += 2*kids + 2 // "a\n" to each child and to us
	want.syscw += kids + 1
	update("children wrote", all, 1+kids, want)

	send("b")
	recv("b")
	for i := range kids {
		want.wchar += uint64(kidN2(i) * chunk)
		want.syscw += uint64(kidN2(i))
	}
	want.wchar += 2*kids + parentN1*chunk + 2 // "b\n" to each child, batch, "b\n"
	want.syscw += kids + parentN1 + 1
	// Only the parent is listed: the children are gone, absorbed by the parent.
	update("children reaped", all[:1], 1, want)

	send("c")
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, parent, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("waitid: %v", err)
		}
		break
	}
	want.wchar += parentN2 * chunk
	want.syscw += parentN2
	// Not listed (a zombie leaves cgroup.procs), but tracked, and readable until reaped.
	update("parent zombie", nil, 1, want)

	reaped = true
	if err := cmd.Wait(); err != nil {
		t.Fatalf("parent: %v", err)
	}
	update("parent reaped", nil, 0, want)

	var files uint64
	for _, name := range []string{"parent", "kid0", "kid1", "kid2"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files += uint64(st.Size())
	}
	protocol := want.wchar - files
	t.Logf("files %d bytes, protocol %d bytes", files, protocol)
}

// TestRealKernelPermission reads a root process as an unprivileged user: the error names
// the io file and wraps EACCES.
func TestRealKernelPermission(t *testing.T) {
	testenv.Root(t, "runs a helper as another user")
	if err := CheckAccounting(hostfs.New("/")); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private; copy it where nobody can run it.
	dir, err := os.MkdirTemp("", "persyst-procio-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "procio.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=eacces", "PERSYST_PROCIO_PID="+strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	want := fmt.Sprintf("0 true procio: /proc/%d/io: permission denied\n", os.Getpid())
	if string(got) != want {
		t.Errorf("helper said %q, want %q", got, want)
	}
}

// TestKernelStartTicks checks the clock Ticks assumes: a process started between two
// readings of CLOCK_BOOTTIME has a starttime between their Ticks.
func TestKernelStartTicks(t *testing.T) {
	up := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	for range 20 {
		before := up()
		cmd := exec.Command("sleep", "5")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		after := up()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		st, err := parseStatBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := Ticks(before), Ticks(after); st.StartTime < lo || st.StartTime > hi {
			t.Fatalf("a process started %v..%v after boot has starttime %d, want %d..%d", before, after, st.StartTime, lo, hi)
		}
	}
}
