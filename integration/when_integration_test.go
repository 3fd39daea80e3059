package integration

// When and why, on the real cluster: a job that first writes in tiny pieces and then
// computes has two phases, its small-writes finding in the first; a CPU-bound job that a
// neighbour job starts competing with half-way is told the time it lost, with the
// interference's class and the stretch; the same job alone is told nothing of the kind.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/phases"
)

func TestWhenAndWhy(t *testing.T) {
	c := startCluster(t, 2)
	_, load := binaries(t)
	work := filepath.Join(c.work, "when")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	out := func(id uint32) string {
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
		var f *digestFinding
		for i := range r.Findings {
			if r.Findings[i].Key == "io_write_request_size" {
				f = &digestFinding{r.Findings[i].Phases}
			}
		}
		if f == nil || len(f.phases) != 1 || f.phases[0] != 1 {
			t.Errorf("job %d: small writes %+v, want a finding held in phase 1", id, f)
		}
		if o := out(id); !strings.Contains(o, "Phases: 1. 0:0") || !strings.Contains(o, "In phase 1 (") {
			t.Errorf("job %d: the digest does not list the phases and the finding's:\n%s", id, o)
		}
	})

	// A CPU-bound job on one CPU of node1 for 30 s; from 12 s to 22 s a job on node2
	// keeps both of the machine's CPUs busy (the nodes share them), taking half of it.
	cpuBound := func(t *testing.T, neighbour bool) (*digest.Report, string, time.Time, time.Time) {
		quiet(t)
		id := submit(t, c.nodes[0], "-c", "1", "--wrap", load+" spin -seconds 30")
		c.waitRunning(t, id)
		var from, to time.Time
		if neighbour {
			time.Sleep(12 * time.Second)
			from = time.Now()
			nb := submit(t, c.nodes[1], "-c", "2", "--wrap", load+" spin -seconds 10 -threads 2")
			c.waitDone(t, nb, 2*time.Minute)
			to = time.Now()
		}
		c.waitDone(t, id, 2*time.Minute)
		r := c.jobReport(t, id)
		logPhases(t, r)
		return r, out(id), from, to
	}

	t.Run("a neighbour half-way: interference", func(t *testing.T) {
		r, o, from, to := cpuBound(t, true)
		in := r.Interference
		if in == nil || (in.Class != "medium" && in.Class != "high") || len(in.Causes) == 0 || in.Causes[0].Key != phases.CauseCPU {
			t.Fatalf("job %d: interference %+v, want medium or high, from other work on the CPUs", r.JobID, in)
		}
		if w := in.Worst; w == nil || w.To.Before(from) || w.From.After(to) {
			t.Errorf("job %d: worst stretch %+v, want one within the neighbour's %v-%v", r.JobID, w, from, to)
		}
		if !strings.Contains(o, "of the job's time was lost to other work on "+c.nodes[0]) || !strings.Contains(o, in.Class+" interference") {
			t.Errorf("job %d: the digest does not state the interference:\n%s", r.JobID, o)
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

type digestFinding struct{ phases []int }

func logPhases(t *testing.T, r *digest.Report) {
	t.Helper()
	for _, p := range r.Phases {
		t.Logf("job %d phase %d: %d intervals, %.0f s, stretches %v, traits %+v, held %v", r.JobID, p.N, p.Intervals, p.Seconds, p.Stretches, p.Traits, p.Held)
	}
	if in := r.Interference; in != nil {
		t.Logf("job %d interference: %+v (worst %v)", r.JobID, *in, in.Worst)
	}
}
