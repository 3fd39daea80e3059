package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

// restartNode is a fake node (fakeNode) with a state directory that outlives daemons:
// daemon() starts a daemon's registry and measurer over it, cycles() runs n cycles of
// 10 s with the job using 1 s of CPU in each.
type restartNode struct {
	t        *testing.T
	root     string
	state    string
	setCPU   func(int)
	usage    int
	now      time.Time
	facts    fakeFacts
	appended []string
}

func newRestartNode(t *testing.T) *restartNode {
	root, setCPU := fakeNode(t, 7)
	return &restartNode{t: t, root: root, state: t.TempDir(), setCPU: setCPU, now: time.Date(2026, 11, 21, 12, 0, 7, 500_000_000, time.UTC),
		facts: fakeFacts{7: {JobID: 7, State: "RUNNING", Nodes: []string{"node1"}, WorkDir: "/home/u", Stdout: "slurm-7.out"}}}
}

func (n *restartNode) daemon() (*Registry, *Measurer) {
	t := n.t
	reg, err := OpenRegistry(RegistryConfig{Node: "node1", Dir: filepath.Join(n.state, "jobs")}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	engine := propertiestest.Engine(t)
	dig := DigestConfig{Engine: engine, Facts: n.facts, Append: func(_ context.Context, _ digest.Target, text []byte) error {
		n.appended = append(n.appended, string(text))
		return nil
	}}
	m, err := NewMeasurer(MeasureConfig{Root: n.root, Cycle: 10 * time.Second, StateDir: n.state, Digest: dig}, reg, "node1", zerolog.Nop(),
		func() time.Time { return n.now })
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// startJob starts a daemon and job 7's batch step under it.
func (n *restartNode) startJob() *Measurer {
	reg, m := n.daemon()
	j, err := reg.Apply(wire.StepStart, &wire.Event{JobID: 7, UID: 1000, Persyst: wire.On, StepID: "batch", Time: n.now}, n.now)
	if err != nil {
		n.t.Fatal(err)
	}
	prepareNow(m, j)
	// The lookup at the batch step's start runs in the background: done before a test
	// changes what the job map says.
	looked := lookupDone(m, 7)
	if looked != nil {
		<-looked
	}
	return m
}

func (n *restartNode) cycles(m *Measurer, k int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := 0
	wait := func(ctx context.Context, until time.Time) error {
		if done == k {
			cancel()
			return ctx.Err()
		}
		done++
		n.now = until
		n.usage += 1_000_000
		n.setCPU(n.usage)
		return nil
	}
	if err := m.Run(ctx, wait); err != nil {
		n.t.Fatal(err)
	}
}

// TestMeasurerRestart: a daemon that stops in the middle of a job (killed: nothing is
// closed) loses none of what it measured. The next daemon restores the samples kept on
// disk and re-evaluates them, so the job's digest covers it from its start, and states the
// stretch no daemon measured.
func TestMeasurerRestart(t *testing.T) {
	n := newRestartNode(t)
	first := n.startJob()
	n.cycles(first, 3) // 12:00:10, :20, :30
	n.now = n.now.Add(25 * time.Second)
	n.usage += 20_000_000 // the job used 20 s of CPU while no daemon ran
	n.setCPU(n.usage)

	reg, m := n.daemon()
	j := reg.Job(7)
	prepareNow(m, j)
	n.cycles(m, 2) // 12:01:00, :01:10
	if err := m.digest(context.Background(), j, atBatchEnd, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := m.Report(7)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 21, 12, 0, 7, 500_000_000, time.UTC)
	if rep.Samples != 5 || !rep.Start.Equal(start) {
		t.Errorf("report: %d samples from %v, want 5 from the job's start %v", rep.Samples, rep.Start, start)
	}
	c := rep.Coverage
	restart := time.Date(2026, 11, 21, 12, 0, 55, 0, time.UTC)
	if c == nil || len(c.Gaps) != 1 || !c.Gaps[0].From.Equal(start.Add(22500*time.Millisecond)) || !c.Gaps[0].To.Equal(restart) ||
		c.Gaps[0].Why != "the persyst daemon was not running" {
		t.Fatalf("coverage %+v; want one gap 12:00:30-12:00:55, the daemon not running", c)
	}
	if c.Elapsed != 62.5 || c.Measured != 37.5 {
		t.Errorf("coverage: measured %v of %v s, want 37.5 of 62.5", c.Measured, c.Elapsed)
	}
	// The CPU time of both daemons' intervals, not the 20 s between them.
	if s := m.Summary(7); s.Totals[sample.CPUUserSeconds] != 5 {
		t.Errorf("CPU time %v s, want 5 (3 before the restart, 2 after)", s.Totals[sample.CPUUserSeconds])
	}
	if len(n.appended) != 1 || !strings.Contains(strings.Join(strings.Fields(n.appended[0]), " "), "not measured: 12:00:30-12:00:55 (the persyst daemon was not running)") {
		t.Errorf("digest:\n%s", strings.Join(n.appended, "\n"))
	}
	m.end(7)
	if _, err := os.Stat(filepath.Join(n.state, "samples", "7.jsonl")); !os.IsNotExist(err) {
		t.Errorf("samples of an ended job still on disk: %v", err)
	}
}

// TestLateDigest: the job ends while its batch host's daemon is down. The next daemon
// finds it ended (Slurm says so) at once, ends it without measuring it again, and writes
// its digest late from the samples the earlier daemon kept, saying so.
func TestLateDigest(t *testing.T) {
	n := newRestartNode(t)
	first := n.startJob()
	n.cycles(first, 2)
	n.now = n.now.Add(40 * time.Second)
	n.facts[7] = &jobmap.Job{JobID: 7, State: "COMPLETED", Nodes: []string{"node1"}, WorkDir: "/home/u", Stdout: "slurm-7.out",
		End: n.now.Add(-10 * time.Second)}

	reg, m := n.daemon()
	prepared := false
	rc := newReconciler(reg, m, n.facts, "node1", zerolog.Nop(), func() time.Time { return n.now })
	ctx, cancel := context.WithCancel(context.Background())
	rc.run(ctx, func() { prepared = true; cancel() })
	if !prepared {
		t.Fatal("the reconciler's first round did not hand over")
	}
	if j := reg.Job(7); j.Ended == nil || j.EndReason != "Slurm says the job is COMPLETED" {
		t.Fatalf("job after the first round: %+v", j)
	}
	if len(n.appended) != 1 || !strings.Contains(n.appended[0], "Made after the job ended") || !strings.Contains(n.appended[0], "persyst: job 7") {
		t.Fatalf("late digest:\n%s", strings.Join(n.appended, "\n"))
	}
	rep, err := m.Report(7)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Samples != 2 || rep.Coverage == nil || !rep.Coverage.Late {
		t.Errorf("late report: %d samples, coverage %+v; want 2 samples, late", rep.Samples, rep.Coverage)
	}
	// From the last read (12:00:20) to the job's end in Slurm (12:00:50).
	if g := rep.Coverage.Gaps; len(g) != 1 || g[0].Why != "the persyst daemon was not running" || g[0].Seconds() != 30 {
		t.Errorf("late report gaps %+v, want 30 s after the last read", g)
	}
	if _, err := os.Stat(filepath.Join(n.state, "samples", "7.jsonl")); !os.IsNotExist(err) {
		t.Errorf("samples of an ended job still on disk: %v", err)
	}
}

// TestLateDigestBatchUnseen: the daemon saw the job start (its extern step) but was
// down when the batch script started and ended. The job map says this node was the
// batch host: the late digest is made here all the same; on another node, none.
func TestLateDigestBatchUnseen(t *testing.T) {
	for _, tc := range []struct {
		batchHost string
		want      int
	}{{"node1", 1}, {"node2", 0}} {
		t.Run("batch host "+tc.batchHost, func(t *testing.T) {
			n := newRestartNode(t)
			reg, first := n.daemon()
			j, err := reg.Apply(wire.StepStart, &wire.Event{JobID: 7, UID: 1000, Persyst: wire.On, StepID: "extern", Time: n.now}, n.now)
			if err != nil {
				t.Fatal(err)
			}
			prepareNow(first, j)
			n.cycles(first, 2)
			n.now = n.now.Add(40 * time.Second)
			n.facts[7] = &jobmap.Job{JobID: 7, State: "COMPLETED", Nodes: []string{"node1", "node2"}, BatchHost: tc.batchHost,
				WorkDir: "/home/u", Stdout: "slurm-7.out", End: n.now.Add(-10 * time.Second)}
			reg, m := n.daemon()
			rc := newReconciler(reg, m, n.facts, "node1", zerolog.Nop(), func() time.Time { return n.now })
			ctx, cancel := context.WithCancel(context.Background())
			rc.run(ctx, func() { cancel() })
			if j := reg.Job(7); j.Ended == nil {
				t.Fatalf("job after the first round: %+v", j)
			}
			if len(n.appended) != tc.want {
				t.Fatalf("%d late digests, want %d:\n%s", len(n.appended), tc.want, strings.Join(n.appended, "\n"))
			}
			if tc.want == 1 && !strings.Contains(n.appended[0], "Made after the job ended") {
				t.Errorf("late digest:\n%s", n.appended[0])
			}
		})
	}
}
