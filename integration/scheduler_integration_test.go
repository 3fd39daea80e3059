package integration

// What Slurm does to a job is not the job's fault: on the real cluster, a job suspended
// by `scontrol suspend` for a third of its life gets no finding from the suspension and
// a line that names it (TestSchedulerEvents, alone: it judges the job's CPU time); a
// requeued job's digests say "requeued" and "run 2"; a job preempted by one of a higher
// partition (PreemptMode=REQUEUE) says so (TestRequeues, beside other tests: they judge
// no CPU time, and their jobs run for a wall-clock time, not CPU time).

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
)

// schedulerCluster starts a one-node cluster for the scheduler's events, with how to read a
// job's report and output there and to run scontrol.
func schedulerCluster(t *testing.T) (c *cluster, load string, report func(*testing.T, uint32) (*digest.Report, string), scontrol func(*testing.T, ...string)) {
	t.Helper()
	c = startCluster(t, 1)
	_, load = binaries(t)
	report = func(t *testing.T, id uint32) (*digest.Report, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := daemon.JobReport(ctx, c.socket(c.nodes[0]), id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(c.work, "sched-"+strconv.FormatUint(uint64(id), 10)+".out"))
		if err != nil {
			t.Fatal(err)
		}
		return r, string(b)
	}
	scontrol = func(t *testing.T, args ...string) {
		t.Helper()
		if o, e, err := c.run(t, nil, "scontrol", args...); err != nil {
			t.Fatalf("scontrol %v: %v %s%s", args, err, o, e)
		}
	}
	return c, load, report, scontrol
}

func TestSchedulerEvents(t *testing.T) {
	c, load, report, scontrol := schedulerCluster(t)
	t.Run("suspended for a third of its life: stated, not judged", func(t *testing.T) {
		// Two busy threads on two CPUs for 16 s of CPU time each, suspended for 10 s.
		id := c.sbatch(t, nil, "-c", "2", "-o", filepath.Join(c.work, "sched-%j.out"), "--wrap",
			load+" spin -seconds 16 -threads 2 -pin 0,1")
		waitSamples(t, c, id, 4)
		ids := strconv.FormatUint(uint64(id), 10)
		scontrol(t, "suspend", ids)
		time.Sleep(10 * time.Second)
		scontrol(t, "resume", ids)
		if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", id, st)
		}
		r, text := report(t, id)
		t.Logf("digest of job %d:\n%s", id, text)
		if len(r.Suspended) != 1 {
			t.Fatalf("suspended stretches %+v, want one", r.Suspended)
		}
		// Slurm stops the tasks (SIGTSTP), and freezes their cgroups 2 s later (the
		// suspend grace time), which the daemon counts back from the freeze it sees
		// within a second.
		if s := r.Suspended[0].Seconds(); s < 8.5 || s > 12 {
			t.Errorf("suspended for %.1f s, want the 10 s (8.5 to 12 s)", s)
		}
		for _, f := range r.Findings {
			switch f.Key {
			case "idle_cores", "idle_cpu", "intra_node_imbalance", "cpu_pressure", "cpu_starved":
				t.Errorf("finding %s (%.0f %% of the job) from Slurm's suspension", f.Key, 100*f.TimeShare)
			}
		}
		if flat := strings.Join(strings.Fields(text), " "); !strings.Contains(flat, "Suspended by Slurm for") || !strings.Contains(flat, "not judged") {
			t.Errorf("the digest does not state the suspension:\n%s", text)
		}
	})
}

func TestRequeues(t *testing.T) {
	defer sideBySide(t)()
	c, load, report, scontrol := schedulerCluster(t)
	t.Run("requeued: named, and the next run says which it is", func(t *testing.T) {
		id := c.sbatch(t, nil, "-c", "1", "--open-mode=append", "-o", filepath.Join(c.work, "sched-%j.out"), "--wrap",
			"timeout 6 "+load+" spin -seconds 600; true")
		waitSamples(t, c, id, 3)
		ids := strconv.FormatUint(uint64(id), 10)
		scontrol(t, "requeue", ids)
		// Slurm lets a requeued job start again only once its launch credential expired
		// (2 minutes by default): it may start at once.
		poll(time.Now().Add(time.Minute), func() bool { return c.jobInfo(t, id)["JobState"] == "PENDING" })
		time.Sleep(2 * time.Second)
		scontrol(t, "update", "JobId="+ids, "StartTime=now")
		if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s after its requeue", id, st)
		}
		r, text := report(t, id)
		t.Logf("output of job %d (two runs):\n%s", id, text)
		flat := strings.Join(strings.Fields(text), " ")
		if strings.Count(flat, "persyst: job "+ids+", run ") != 2 {
			t.Fatalf("want two digests in the output, each naming its run")
		}
		cut := strings.LastIndex(flat, "persyst: job "+ids+", run ")
		first, second := flat[:cut], flat[cut:]
		if !strings.Contains(first, "Requeued after") || strings.Contains(first, "cancelled") {
			t.Errorf("the first run's digest does not say it was requeued: %s", first)
		}
		if !strings.Contains(second, "run 2") {
			t.Errorf("the second run's digest does not say it is run 2: %s", second)
		}
		if r.Run != 2 {
			t.Errorf("report: run %d, want 2", r.Run)
		}
		if r.Coverage == nil || r.Coverage.Elapsed > 30 {
			t.Errorf("the second run's coverage %+v, want only itself (about 6 s)", r.Coverage)
		}
	})

	t.Run("preempted by a job of a higher partition, requeued", func(t *testing.T) {
		// The cluster's partition "urgent" preempts "debug" (PreemptMode=REQUEUE).
		id := c.sbatch(t, nil, "--exclusive", "--open-mode=append", "-o", filepath.Join(c.work, "sched-%j.out"), "--wrap",
			"timeout 4 "+load+" spin -seconds 600 -threads 2; true")
		waitSamples(t, c, id, 3)
		urgent := c.sbatch(t, nil, "-p", "urgent", "--exclusive", "-o", filepath.Join(c.work, "sched-%j.out"), "--wrap", "sleep 1")
		if st := c.waitDone(t, urgent, 2*time.Minute); st != "COMPLETED" {
			t.Fatalf("urgent job %d ended %s", urgent, st)
		}
		ids := strconv.FormatUint(uint64(id), 10)
		if st := c.jobInfo(t, id)["JobState"]; st == "PENDING" {
			scontrol(t, "update", "JobId="+ids, "StartTime=now")
		}
		if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s after its preemption", id, st)
		}
		_, text := report(t, id)
		t.Logf("output of job %d (two runs):\n%s", id, text)
		flat := strings.Join(strings.Fields(text), " ")
		if !strings.Contains(flat, "Preempted after") || !strings.Contains(flat, "by a job of higher priority and requeued") || !strings.Contains(flat, ", run 2") {
			t.Errorf("the digests do not name the preemption and the second run")
		}
	})
}
