package daemon

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/sample"
)

// TestSuspendWatch: when Slurm freezes a measured job's step (cgroup v2: its user
// cgroup's cgroup.events says "frozen 1") the watch reads the job at once, and again
// when it is thawed; the interval between is suspended, and the job's summary has the
// stretch. Nothing changed: no read.
func TestSuspendWatch(t *testing.T) {
	root, _ := fakeNode(t, 7)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	m, reg := testMeasurer(t, root, func() time.Time { return now })
	prepareNow(m, batchStart(t, reg, 7, "", now))
	t.Cleanup(func() { m.end(7) })
	job := measured(m, 7)
	if job == nil {
		t.Fatal("job 7 not measured")
	}
	events := filepath.Join(root, "sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_7/step_batch/user/cgroup.events")
	w := suspendWatch{meters: m.meters, log: zerolog.Nop()}
	reasons := func() (out []sample.Reason) {
		for _, s := range job.Meter().Samples() {
			out = append(out, s.Reason)
		}
		return out
	}
	w.look()
	if got := reasons(); len(got) != 0 {
		t.Fatalf("reads while nothing changed: %v", got)
	}
	testenv.Write(t, events, "populated 1\nfrozen 1\n")
	now = now.Add(3 * time.Second)
	w.look()
	w.look()
	testenv.Write(t, events, "populated 1\nfrozen 0\n")
	now = now.Add(10 * time.Second)
	w.look()
	if got, want := reasons(), []sample.Reason{sample.Suspend, sample.Resume}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("reads %v, want %v", got, want)
	}
	// Frozen for the 10 s between the reads, and stopped by Slurm's SIGTSTP for its
	// grace of 2 s before the freeze was seen.
	s := job.Summary()
	if len(s.Suspended) != 1 || s.Suspended[0].Seconds() != 12 {
		t.Errorf("suspended stretches %+v, want one of 12 s", s.Suspended)
	}
}
