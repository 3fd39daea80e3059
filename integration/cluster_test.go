// Package integration holds the tests that run persyst against a real Slurm cluster started
// on this machine by scripts/cluster.sh (slurmctld, slurmd per network namespace, munged,
// one persyst daemon per node). They need root, Debian's Slurm packages and a built tree;
// `make test` provides all three and sets PERSYST_INTEGRATION=1.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/persyst/persyst/slurmver"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/nvml/nvmltest"
)

// jobUser is the unprivileged user jobs run as (root submits with --uid).
const jobUser = 65534

var repoRoot = func() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}()

// skipReason says why the integration tests cannot run here ("" when they can).
func skipReason() string {
	switch {
	case os.Getenv("PERSYST_INTEGRATION") != "1":
		return "PERSYST_INTEGRATION=1 not set (make test sets it; these tests start a real Slurm cluster)"
	case os.Geteuid() != 0:
		return "not root (starting slurmd in network namespaces needs root)"
	}
	for _, c := range []string{"sbatch", "slurmd", "slurmctld", "munged"} {
		if _, err := exec.LookPath(c); err != nil {
			return c + " not installed (run scripts/deps.sh)"
		}
	}
	for _, f := range []string{"build/persyst", "build/spank_persyst.so"} {
		if _, err := os.Stat(filepath.Join(repoRoot, f)); err != nil {
			return f + " not built (run make build)"
		}
	}
	return ""
}

func TestMain(m *testing.M) {
	if sock := os.Getenv("PERSYST_IT_FORGE"); sock != "" {
		os.Exit(forgeEvent(sock))
	}
	if spec := os.Getenv("PERSYST_IT_FLOOD"); spec != "" {
		os.Exit(floodSocket(spec))
	}
	if spec := os.Getenv("PERSYST_IT_INTRUDER"); spec != "" {
		os.Exit(intrude(spec))
	}
	if r := skipReason(); r != "" && testenv.InCI() {
		fmt.Fprintf(os.Stderr, "integration tests must run in CI but cannot: %s\n", r)
		os.Exit(1)
	}
	if msg := staleBuild(); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
	os.Exit(nvmltest.Main(m))
}

// artifacts returns build/test-artifacts, created if need be: what a test leaves there
// (screenshots, a failed case's result) outlives the run (make fresh-check keeps it).
func artifacts() (string, error) {
	dir := filepath.Join(repoRoot, "build", "test-artifacts")
	return dir, os.MkdirAll(dir, 0o755)
}

// staleBuild says what is wrong when the binaries the tests run from build/ are older
// than their sources (go test does not rebuild them, make test does): a pass would be the
// old code's. "" when they are current, not built, or PERSYST_BIN names others.
func staleBuild() string {
	if os.Getenv("PERSYST_BIN") != "" {
		return ""
	}
	goSrc := func(name string) bool { return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") }
	cSrc := func(name string) bool { return strings.HasSuffix(name, ".c") || strings.HasSuffix(name, ".h") }
	for _, b := range []struct {
		bin, dir string
		src      func(string) bool
	}{
		{"build/persyst", "", goSrc},
		{"build/persyst-workload", "", goSrc},
		{"build/spank_persyst.so", "spank", cSrc},
	} {
		st, err := os.Stat(filepath.Join(repoRoot, b.bin))
		if err != nil {
			continue
		}
		if newer := newerSource(filepath.Join(repoRoot, b.dir), b.src, st.ModTime()); newer != "" {
			return fmt.Sprintf("integration tests: %s is newer than %s (make build, or make test, which builds it)", newer, b.bin)
		}
	}
	return ""
}

// newerSource returns a source file under root changed after t ("" if none).
func newerSource(root string, src func(string) bool, t time.Time) string {
	var newer string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if newer != "" {
			return filepath.SkipAll
		}
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "build" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if st, err := d.Info(); src(name) && err == nil && st.ModTime().After(t) {
			newer = path
		}
		return nil
	})
	return newer
}

// forgeEvent is run as a child process under an unprivileged uid: it tries to send a
// lifecycle event to the daemon and prints the outcome.
func forgeEvent(sock string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := wire.Call(ctx, sock, &wire.Request{Kind: wire.JobStart, Event: &wire.Event{
		JobID: 999999, UID: 0, Persyst: wire.On, Time: time.Now()}})
	if err != nil {
		fmt.Println("refused:", err)
		return 3
	}
	fmt.Println("accepted")
	return 0
}

// instancePool holds the clusters that may run at once (scripts/cluster.sh's
// PERSYST_CLUSTER_INSTANCE: each its own directory, network, node names and ports). A
// test that judges no CPU time calls sideBySide before startCluster and runs beside the
// others; the tests that do run first, alone (Go runs the sequential tests before the
// parallel ones). There are more instances than tests running at once (sideBySide's
// turns, and Go's -parallel): a test whose own subtests run in parallel gives up its
// turn to them while it holds its cluster, and a test waiting for an instance holds a
// turn; with as many instances as turns, the two would wait for each other for ever.
// Four more than -parallel (at most ten, as many as cluster.sh has) leave room for every
// such test (TestCoverage).
var instancePool = sync.OnceValue(func() chan int {
	n := 2
	if f := flag.Lookup("test.parallel"); f != nil { // set once the tests run
		if v, err := strconv.Atoi(f.Value.String()); err == nil {
			n = v
		}
	}
	n = min(max(n, 1)+4, 10)
	ch := make(chan int, n)
	for i := range n {
		ch <- i
	}
	return ch
})

// sideBySide marks a test that judges no CPU time (no finding, no bound, that another
// test's load could change): it runs after the tests that do, beside other such tests,
// each on a cluster of its own, as `defer sideBySide(t)()`: it waits for a turn, and
// gives it back when the test's function returns (a test's parallel subtests take turns
// of their own).
func sideBySide(t *testing.T) (done func()) {
	t.Helper()
	t.Parallel()
	return sideTurns().take(t.Name())
}

// sideSeconds are about how long each side-by-side test takes on this machine's two
// cores beside the others (bookworm's root, ci33): the turns go to the longest first, so
// that the phase does not end with one long test alone (in ci31 TestCoverage began last
// and ran 157 s after the others were done). A scheduling hint, not a bound: a test not
// listed counts as a minute. TestEndStates mostly waits (for Slurm's time limit, a
// minute to 90 s): it goes first, so that its waiting overlaps the others' work (last, it
// left the machine idle for a minute at the end of each root's run).
var sideSeconds = map[string]float64{
	"TestAdminView": 180, "TestCoverage": 150, "TestTreeAgents": 140, "TestTreeLoads": 135, "TestSiteClusters": 125,
	"TestGPUJobs": 120, "TestSiteTools": 100, "TestFoundation": 95, "TestTreeTLS": 80, "TestClusterUpFailure": 72,
	"TestJobmap": 70, "TestPluginNotLoaded": 57, "TestEnergy": 40, "TestRealProgramsBeside": 57, "TestNotices": 56, "TestEndStates": 200, "TestRequeues": 35,
	"TestRunExitAndSignals": 7, "TestPackage": 7, "TestServicesNotifySystemd": 7, "TestWebSocketActivation": 2,
}

// turns lets PERSYST_IT_PARALLEL side-by-side tests (default 6) run at once, the longest
// waiting first. Go's own -parallel is set above it (scripts/test.sh) so that every such
// test reaches take at once; the first turns are given a moment after the first test
// asks, when all have.
type turns struct {
	mu      sync.Mutex
	free    int
	opened  bool
	waiting []*turn
}

type turn struct {
	name  string
	secs  float64
	ready chan struct{}
}

var sideTurns = sync.OnceValue(func() *turns {
	n := 6
	if v, err := strconv.Atoi(os.Getenv("PERSYST_IT_PARALLEL")); err == nil && v > 0 {
		n = v
	}
	return &turns{free: n}
})

// gather is how long the first turns wait for the other tests to ask: they are let go
// at the same instant, when the tests that run alone are done.
const gather = 300 * time.Millisecond

func (s *turns) take(name string) (done func()) {
	secs, ok := sideSeconds[name]
	if !ok {
		secs = sideSeconds[strings.SplitN(name, "/", 2)[0]] / 4 // a subtest of a listed test
		if secs == 0 {
			secs = 60
		}
	}
	tn := &turn{name: name, secs: secs, ready: make(chan struct{})}
	s.mu.Lock()
	if !s.opened && len(s.waiting) == 0 {
		time.AfterFunc(gather, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.opened = true
			s.dispatch()
		})
	}
	s.waiting = append(s.waiting, tn)
	if s.opened {
		s.dispatch()
	}
	s.mu.Unlock()
	<-tn.ready
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.free++
		s.dispatch()
	}
}

// dispatch gives the free turns to the longest waiting tests (s.mu held).
func (s *turns) dispatch() {
	for s.free > 0 && len(s.waiting) > 0 {
		best := 0
		for i, w := range s.waiting {
			if w.secs > s.waiting[best].secs || w.secs == s.waiting[best].secs && w.name < s.waiting[best].name {
				best = i
			}
		}
		close(s.waiting[best].ready)
		s.waiting = append(s.waiting[:best], s.waiting[best+1:]...)
		s.free--
	}
}

// instanceLetter is what cluster.sh puts before instance i's node names and namespaces
// ("" for instance 0, then b, c, ...).
func instanceLetter(i int) string {
	if i == 0 {
		return ""
	}
	return string(rune('a' + i))
}

// instanceDir is where cluster.sh keeps instance i's cluster.
func instanceDir(i int) string {
	if i == 0 {
		return filepath.Join(repoRoot, "build/cluster")
	}
	return filepath.Join(repoRoot, "build", "cluster-"+strconv.Itoa(i))
}

// cluster is a running test cluster.
type cluster struct {
	instance int      // cluster.sh's PERSYST_CLUSTER_INSTANCE
	dir      string   // build/cluster, or build/cluster-I for instance I
	env      []string // environment for Slurm commands
	nodes    []string
	work     string // world-writable job working directory
}

// startCluster brings up a fresh cluster of n nodes; it is torn down when the test ends
// unless the test tears it down itself.
func startCluster(t *testing.T, n int, extraEnv ...string) *cluster {
	t.Helper()
	if r := skipReason(); r != "" {
		t.Skip("integration test skipped: " + r)
	}
	inst := <-instancePool()
	t.Cleanup(func() { instancePool() <- inst }) // after the cluster is down (cleanups run last first)
	instance := "PERSYST_CLUSTER_INSTANCE=" + strconv.Itoa(inst)
	cmd := exec.Command(filepath.Join(repoRoot, "scripts/cluster.sh"), "up", strconv.Itoa(n))
	// Slurm accounting (slurmdbd and MariaDB) costs 2-3 s per cluster: only the tests that
	// read it ask for it (ACCOUNTING=1).
	cmd.Env = append(append(os.Environ(), "ACCOUNTING=0", instance), extraEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cluster up: %v\n%s", err, out)
	}
	c := &cluster{instance: inst, dir: instanceDir(inst)}
	t.Cleanup(func() {
		down := exec.Command(filepath.Join(repoRoot, "scripts/cluster.sh"), "down")
		down.Env = append(os.Environ(), instance)
		if out, err := down.CombinedOutput(); err != nil {
			t.Errorf("cluster down: %v\n%s", err, out)
		}
	})
	f, err := os.Open(filepath.Join(c.dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c.env = os.Environ()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kv := strings.TrimPrefix(sc.Text(), "export ")
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Trim(v, `"`)
		c.env = append(c.env, k+"="+v)
		if k == "PERSYST_NODES" {
			c.nodes = strings.Fields(v)
		}
	}
	if len(c.nodes) != n {
		t.Fatalf("env lists nodes %v, want %d", c.nodes, n)
	}
	c.work, err = os.MkdirTemp("", "persyst-it-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(c.work, 0o1777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(c.work) })
	return c
}

// run runs a command with the cluster's environment (plus extra) and returns its output.
func (c *cluster) run(t *testing.T, extra []string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(append([]string{}, c.env...), extra...)
	cmd.Dir = c.work
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// sbatch submits a job as the unprivileged job user and returns its id.
func (c *cluster) sbatch(t *testing.T, extra []string, args ...string) uint32 {
	t.Helper()
	base := []string{"--parsable", "--uid", strconv.Itoa(jobUser), "--gid", strconv.Itoa(jobUser), "-D", c.work}
	out, errOut, err := c.run(t, extra, "sbatch", append(base, args...)...)
	if err != nil {
		t.Fatalf("sbatch %v: %v\n%s%s", args, err, out, errOut)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(strings.Split(strings.TrimSpace(out), ";")[0]), 10, 32)
	if err != nil {
		t.Fatalf("sbatch %v: cannot parse job id from %q", args, out)
	}
	return uint32(id)
}

var fieldRE = regexp.MustCompile(`(\w+)=(\S*)`)

// jobInfo returns scontrol's fields of a job.
func (c *cluster) jobInfo(t *testing.T, id uint32) map[string]string {
	t.Helper()
	return c.jobInfoID(t, strconv.FormatUint(uint64(id), 10))
}

// jobInfoID returns scontrol's fields of a job given as "123" or "120_3" (for an array,
// "120" shows every task; the fields are then those of the last one).
func (c *cluster) jobInfoID(t *testing.T, id string) map[string]string {
	t.Helper()
	out, errOut, err := c.run(t, nil, "scontrol", "show", "job", "-o", id)
	if err != nil {
		t.Fatalf("scontrol show job %s: %v %s", id, err, errOut)
	}
	m := map[string]string{}
	for _, kv := range fieldRE.FindAllStringSubmatch(out, -1) {
		m[kv[1]] = kv[2]
	}
	return m
}

// poll calls done until it returns true or the deadline has passed, and says which:
// first within milliseconds, then with pauses growing by half to half a second. Each
// call may run a Slurm command (an exec, a munge credential, an RPC): with a dozen
// tests side by side, polling every 50 ms was a fifth of the machine's CPU.
func poll(deadline time.Time, done func() bool) bool {
	for wait := 10 * time.Millisecond; ; wait = min(wait*3/2, 500*time.Millisecond) {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}

// active reports whether a job state is one of Slurm's active ones ("" while scontrol
// does not know the job yet).
func active(state string) bool {
	switch state {
	case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "":
		return true
	}
	return false
}

// waitDone polls until the job has left Slurm's active states and returns its state.
func (c *cluster) waitDone(t *testing.T, id uint32, timeout time.Duration) string {
	t.Helper()
	var st string
	if !poll(time.Now().Add(timeout), func() bool { st = c.jobInfo(t, id)["JobState"]; return !active(st) }) {
		t.Fatalf("job %d still %s after %v", id, st, timeout)
	}
	return st
}

func (c *cluster) socket(node string) string {
	return filepath.Join(c.dir, "run", node, "persyst.sock")
}

// jobs asks node's daemon for its registry.
func (c *cluster) jobs(t *testing.T, node string) []*daemon.Job {
	t.Helper()
	st := c.statuses(t, node)
	out := make([]*daemon.Job, len(st))
	for i, j := range st {
		out[i] = j.Job
	}
	return out
}

// statuses asks node's daemon for its jobs with their measurements.
func (c *cluster) statuses(t *testing.T, node string) []daemon.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, jobs, err := daemon.ListJobs(ctx, c.socket(node))
	if err != nil {
		t.Fatalf("list jobs on %s: %v", node, err)
	}
	if n != node {
		t.Fatalf("daemon at %s says it is node %q", c.socket(node), n)
	}
	return jobs
}

// waitJob polls node's daemon until ok(job) holds for job id, and returns the job.
func (c *cluster) waitJob(t *testing.T, node string, id uint32, what string, ok func(*daemon.Job) bool) *daemon.Job {
	t.Helper()
	var last *daemon.Job
	if poll(time.Now().Add(30*time.Second), func() bool {
		last = nil
		for _, j := range c.jobs(t, node) {
			if j.JobID == id {
				last = j
			}
		}
		return last != nil && ok(last)
	}) {
		return last
	}
	t.Fatalf("node %s: job %d never became %s; last seen: %+v", node, id, what, last)
	return nil
}

func (c *cluster) jobOn(t *testing.T, node string, id uint32) *daemon.Job {
	t.Helper()
	for _, j := range c.jobs(t, node) {
		if j.JobID == id {
			return j
		}
	}
	return nil
}

func (c *cluster) harness(t *testing.T, args ...string) {
	t.Helper()
	out, errOut, err := c.run(t, nil, filepath.Join(repoRoot, "scripts/cluster.sh"), args...)
	if err != nil {
		t.Fatalf("cluster.sh %v: %v\n%s%s", args, err, out, errOut)
	}
}

func (c *cluster) daemonPID(t *testing.T, node string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "run", "persyst-"+node+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func (c *cluster) readLog(t *testing.T, name string) string {
	t.Helper()
	var all []byte
	for _, p := range []string{name + ".log", name + ".out"} {
		b, _ := os.ReadFile(filepath.Join(c.dir, "log", p))
		all = append(all, b...)
	}
	return string(all)
}

func stepIDs(j *daemon.Job) []string {
	var ids []string
	for _, s := range j.Steps {
		ids = append(ids, s.ID)
	}
	return ids
}

// asUser returns SysProcAttr running a child as the unprivileged job user.
func asUser() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: jobUser, Gid: jobUser}}
}

// slurmVersion is the cluster's Slurm release, major.minor ("22.05", "24.11", "26.05"):
// the matrix runs every test against each (make fresh-check SUITE=...).
func (c *cluster) slurmVersion(t *testing.T) string {
	t.Helper()
	out, _, err := c.run(t, nil, "scontrol", "--version")
	if err != nil {
		t.Fatalf("scontrol --version: %v %q", err, out)
	}
	rel, err := slurmver.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	return rel.Series()
}
