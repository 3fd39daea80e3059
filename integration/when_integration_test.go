package integration

// When and why, on the real cluster: a job that first writes in tiny pieces and then
// computes has two phases, its small-writes finding in the first; a CPU-bound job that a
// neighbour job starts competing with half-way is told the time it lost, with the
// interference's class and the stretch; the same job alone is told nothing of the kind;
// of a 3-node job whose third node writes in tiny pieces for its first 8 s while the
// others compute (all for about 20 s: the nodes share this machine's CPUs, so the time
// a computation takes varies by node), that node is named as unlike the rest.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/sample"
)

func TestWhenAndWhy(t *testing.T) {
	c := startCluster(t, 3)
	_, load := binaries(t)
	work := filepath.Join(c.work, "when")
	// The jobs run as the cluster's job user: their output files are theirs.
	if err := os.MkdirAll(work, 0o755); err != nil || os.Chmod(work, 0o1777) != nil {
		t.Fatal(err)
	}
	out := func(t *testing.T, id uint32) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(work, "when-"+strconv.FormatUint(uint64(id), 10)+".out"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	submit := func(t *testing.T, node string, extra ...string) uint32 {
		args := append([]string{"-w", node, "-o", filepath.Join(work, "when-%j.out")}, extra...)
		return c.sbatch(t, nil, args...)
	}

	t.Run("small writes, then computing: two phases", func(t *testing.T) {
		quiet(t)
		id := submit(t, c.nodes[0], "-c", "1", "--wrap",
			load+" write -file "+filepath.Join(work, "tiny.dat")+" -bytes 8388608 -size 64 -min-seconds 8 && "+load+" spin -seconds 12")
		c.waitDone(t, id, 2*time.Minute)
		r := c.jobReport(t, id)
		logPhases(t, r)
		if len(r.Phases) != 2 {
			c.debugJob(t, id)
			t.Fatalf("job %d: %d phases, want 2", id, len(r.Phases))
		}
		// The first phase is the writing: it ends about 8 s after the job's start.
		if end := r.Phases[0].Stretches[0].To.Sub(r.Start); end < 6*time.Second || end > 11*time.Second {
			t.Errorf("job %d: phase 1 ends %v after the start, want about 8 s", id, end)
		}
		var in []int
		found := false
		for _, f := range r.Findings {
			if f.Key == "io_write_request_size" {
				in, found = f.Phases, true
			}
		}
		if !found || len(in) != 1 || in[0] != 1 {
			t.Errorf("job %d: small writes found %v, in phases %v: want a finding held in phase 1", id, found, in)
		}
		if o := out(t, id); !strings.Contains(o, "Phases:\n  1. 0:0") || !strings.Contains(o, "In phase 1 (") {
			t.Errorf("job %d: the digest does not list the phases and the finding's:\n%s", id, o)
		}
	})

	// A CPU-bound job on one CPU of node1 for 30 CPU-seconds; 12 s after its start a job
	// on node2 (the nodes share the machine's CPUs) puts two busy threads on that CPU for
	// 3 CPU-seconds each: the job gets a third of its CPU for about 9 s.
	cpuBound := func(t *testing.T, neighbour bool) (*digest.Report, string, time.Time, time.Time) {
		quiet(t)
		id := submit(t, c.nodes[0], "-c", "1", "--wrap", load+" spin -seconds 30")
		c.waitRunning(t, id)
		var from, to time.Time
		if neighbour {
			time.Sleep(12 * time.Second)
			cpu := c.jobCPU(t, id)
			from = time.Now()
			nb := submit(t, c.nodes[1], "-c", "2", "--wrap", load+" spin -seconds 3 -threads 2 -pin "+cpu+","+cpu)
			c.waitDone(t, nb, 2*time.Minute)
			to = time.Now()
			t.Logf("the neighbour ran on CPU %s from %s to %s", cpu, from.Format("15:04:05"), to.Format("15:04:05"))
		}
		c.waitDone(t, id, 2*time.Minute)
		r := c.jobReport(t, id)
		logPhases(t, r)
		return r, out(t, id), from, to
	}

	t.Run("a neighbour half-way: interference", func(t *testing.T) {
		r, o, from, to := cpuBound(t, true)
		in := r.Interference
		if in == nil || (in.Class != "medium" && in.Class != "high") || len(in.Causes) == 0 || in.Causes[0].Key != phases.CauseCPU {
			c.logSamples(t, r.JobID)
			t.Fatalf("job %d: interference %+v, want medium or high, from other work on the CPUs", r.JobID, in)
		}
		if w := in.Worst; w == nil || w.To.Before(from) || w.From.After(to) {
			t.Errorf("job %d: worst stretch %+v, want one within the neighbour's %v-%v", r.JobID, w, from, to)
		}
		flat := strings.Join(strings.Fields(o), " ") // the digest wraps at 80 columns
		if !strings.Contains(flat, "of the job's time was lost to other work on "+c.nodes[0]) || !strings.Contains(flat, in.Class+" interference") {
			t.Errorf("job %d: the digest does not state the interference:\n%s", r.JobID, o)
		}
	})

	t.Run("a 3-node job: the node unlike the rest", func(t *testing.T) {
		quiet(t)
		script := "#!/bin/sh\nsrun -N3 sh -c 'if [ $SLURM_NODEID = 2 ]; then " + load + " write -file " + filepath.Join(work, "tiny3.dat") +
			" -bytes 8388608 -size 64 -min-seconds 8 && (timeout 12 " + load + " spin -seconds 100 || true); " +
			"else (timeout 20 " + load + " spin -seconds 100 || true); fi'\n"
		id := submit(t, strings.Join(c.nodes, ","), "-N3", "--wrap", script)
		c.waitDone(t, id, 2*time.Minute)
		r := c.jobReport(t, id)
		a := r.Alike
		if a == nil || a.Nodes != 3 || len(a.Unlike) != 1 || a.Unlike[0].Node != c.nodes[2] {
			logPhases(t, r)
			t.Fatalf("job %d: alikeness %+v, want 3 nodes compared, %s unlike the rest", id, a, c.nodes[2])
		}
		u := a.Unlike[0]
		defer func() {
			if t.Failed() {
				logPhases(t, r)
				for _, n := range c.nodes {
					c.logNodeSamples(t, n, id)
				}
			}
		}()
		t.Logf("%s: alike %.2f, unlike %s-%s, writing %.0f calls/s (the others %.0f)", u.Node, u.Alike,
			u.Stretch.From.Format("15:04:05"), u.Stretch.To.Format("15:04:05"), u.Traits.WriteCalls, u.Others.WriteCalls)
		if u.Stretch.From.Sub(r.Start) > 4*time.Second || u.Traits.WriteCalls < 100*max(u.Others.WriteCalls, 1) {
			t.Errorf("job %d: %s unlike the rest %+v: want from its start, writing where the others did not", id, u.Node, u)
		}
		o := out(t, id)
		t.Logf("job %d's digest:\n%s", id, o)
		if !strings.Contains(strings.Join(strings.Fields(o), " "), c.nodes[2]+" behaved unlike the job's other nodes") {
			t.Errorf("job %d: the digest does not name %s", id, c.nodes[2])
		}
	})

	t.Run("alone: no interference", func(t *testing.T) {
		r, o, _, _ := cpuBound(t, false)
		if in := r.Interference; in == nil || in.Share >= digest.InterferenceShown {
			t.Errorf("job %d: interference %+v, want under %v", r.JobID, in, digest.InterferenceShown)
		}
		if strings.Contains(o, "lost to") {
			t.Errorf("job %d: the digest states interference:\n%s", r.JobID, o)
		}
		if len(r.Phases) != 1 {
			t.Errorf("job %d: %d phases, want 1", r.JobID, len(r.Phases))
		}
	})
}

// TestOwnQuotaIsNoInterference: a program whose own CPU quota throttles it half-way is
// slowed by the scheduler's limit, not by others: no interference. Slurm's cgroup/v1 on
// this machine makes no cpu cgroup for a job, so the quota is put on persyst run's own
// (as the corpus's quota case does).
func TestOwnQuotaIsNoInterference(t *testing.T) {
	testenv.Root(t, "persyst run creates cgroups")
	persyst, load := binaries(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "persyst.conf")
	if err := os.WriteFile(conf, []byte("DigestMinSeconds=3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	quiet(t)
	// 14 s at full speed, then 6 CPU-seconds at half: the throttled intervals are the
	// fewer, and slow against the median.
	res := corpusRun(t, persyst, conf, "0", filepath.Join(dir, "result.json"), []string{load, "spin", "-seconds", "20"}, 14*time.Second, 0)
	d := res.Digest
	if d == nil || d.Interference == nil {
		t.Fatalf("digest %+v: want one with the interference analysed", d)
	}
	logPhases(t, d)
	// The throttled intervals (half the speed of the rest) are none of the interference;
	// an unthrottled one may lose a little to the machine (persyst run's own start, a
	// busy CI node), below what the digest states.
	in := d.Interference
	if in.Share >= digest.InterferenceShown || in.LostSeconds >= 0.5 {
		t.Errorf("interference %+v: want under %v of the time and 0.5 s", *in, digest.InterferenceShown)
	}
	throttled := 0.0
	for _, s := range res.Samples {
		throttled += s.Job[sample.CPUThrottledSecs]
		if w := in.Worst; w != nil && s.Job[sample.CPUThrottledSecs] > 0.1 &&
			s.Time.After(w.From) && s.From().Before(w.To) {
			t.Errorf("interference %+v: its worst stretch %v–%v holds an interval the quota throttled (%s)", *in, w.From, w.To, s.Time)
		}
	}
	defer func() {
		if t.Failed() {
			for _, s := range res.Samples {
				t.Logf("%s %.2f s: user %.2f system %.2f throttled %.2f", s.Reason, s.Seconds, s.Job[sample.CPUUserSeconds], s.Job[sample.CPUSystemSeconds], s.Job[sample.CPUThrottledSecs])
			}
		}
	}()
	t.Logf("throttled %.1f s; slow intervals the quota explains lost %.1f s", throttled, d.Interference.Throttled)
	if throttled < 4 {
		t.Errorf("throttled %.1f s in all: the quota did not bite", throttled)
	}
}

// jobCPU is the CPU a running one-CPU job measures on its batch host.
func (c *cluster) jobCPU(t *testing.T, id uint32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	samples, err := daemon.JobSamples(ctx, c.socket(c.jobInfo(t, id)["BatchHost"]), id)
	if err != nil {
		t.Fatalf("samples of job %d: %v", id, err)
	}
	for _, s := range samples {
		if len(s.CPU) == 1 {
			return strconv.Itoa(s.CPU[0].CPU)
		}
	}
	t.Fatalf("job %d: no sample with one CPU's values", id)
	return ""
}

// logSamples logs what phases and interference are made of, interval by interval.
func (c *cluster) logSamples(t *testing.T, id uint32) {
	t.Helper()
	c.logNodeSamples(t, c.jobInfo(t, id)["BatchHost"], id)
}

// logNodeSamples logs what a node's daemon measured of a job.
func (c *cluster) logNodeSamples(t *testing.T, node string, id uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	samples, err := daemon.JobSamples(ctx, c.socket(node), id)
	if err != nil {
		t.Logf("samples of job %d: %v", id, err)
	}
	for _, s := range samples {
		t.Logf("%s: %s %s %.2f s: user %.2f system %.2f wait %.2f write calls %.0f; node: CPUs busy %.2f, I/O stall %.2f, memory stall %.2f",
			node, s.Time.Format("15:04:05.000"), s.Reason, s.Seconds, s.Job[sample.CPUUserSeconds], s.Job[sample.CPUSystemSeconds], s.Job[sample.SchedWaitSeconds], s.Job[sample.WriteSyscalls],
			s.Job[sample.NodeCPUsBusySeconds], s.Job[sample.NodeIOPressureSeconds], s.Job[sample.NodeMemPressureSeconds])
	}
}

func logPhases(t *testing.T, r *digest.Report) {
	t.Helper()
	for _, p := range r.Phases {
		t.Logf("job %d phase %d: %d intervals, %.0f s, stretches %v, traits %+v, held %v", r.JobID, p.N, p.Intervals, p.Seconds, p.Stretches, p.Traits, p.Held)
	}
	if in := r.Interference; in != nil {
		t.Logf("job %d interference: %+v (worst %v)", r.JobID, *in, in.Worst)
	}
}
