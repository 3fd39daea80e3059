package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/jobmap"
)

// TestRegistryBounds: 20,000 job starts without an end leave at most MaxRunning jobs and
// files; a job's steps stay within MaxSteps (running steps all kept); ended jobs stay
// within MaxEnded.
func TestRegistryBounds(t *testing.T) {
	dir := t.TempDir()
	r := newReg(t, RegistryConfig{Dir: dir})
	refused := 0
	for id := uint32(1); id <= 20000; id++ {
		e := ev(id, "", at(0))
		if _, err := r.Apply(wire.JobStart, &e, at(0)); errors.Is(err, ErrFull) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if r.Running() != MaxRunning || refused != 20000-MaxRunning || len(files) != MaxRunning {
		t.Errorf("after 20,000 starts: %d running, %d refused, %d files; want %d, %d, %d",
			r.Running(), refused, len(files), MaxRunning, 20000-MaxRunning, MaxRunning)
	}

	s := newReg(t, RegistryConfig{})
	for i := 0; i < 3*MaxSteps; i++ {
		step := strconv.Itoa(i)
		e := ev(1, step, at(time.Duration(i)*time.Second))
		if _, err := s.Apply(wire.StepStart, &e, at(0)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // every other step ends; the others keep running
			if _, err := s.Apply(wire.StepEnd, &e, at(0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	j := s.Job(1)
	if len(j.Steps) > max(MaxSteps, 3*MaxSteps/2) || j.StepsDropped == 0 {
		t.Errorf("%d steps kept, %d dropped", len(j.Steps), j.StepsDropped)
	}
	runningKept := 0
	for _, st := range j.Steps {
		if st.State == Running {
			runningKept++
		}
	}
	if runningKept != 3*MaxSteps/2 {
		t.Errorf("%d running steps kept, want all %d", runningKept, 3*MaxSteps/2)
	}

	e := newReg(t, RegistryConfig{})
	for id := uint32(1); id <= MaxEnded+50; id++ {
		for _, k := range []wire.Kind{wire.JobStart, wire.JobEnd} {
			x := ev(id, "", at(0))
			if _, err := e.Apply(k, &x, at(time.Duration(id)*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(e.Jobs()); n != MaxEnded || e.Job(1) != nil || e.Job(MaxEnded+50) == nil {
		t.Errorf("%d ended jobs kept (job 1 kept: %v), want the newest %d", n, e.Job(1) != nil, MaxEnded)
	}
}

// TestRegistryJobIDReuse: a job start for an id whose job has ended is a new job, and so
// is a step start after the end (a requeued job runs again).
func TestRegistryJobIDReuse(t *testing.T) {
	r := newReg(t, RegistryConfig{})
	applyAll(t, r, []applied{
		{wire.JobStart, ev(5, "", at(0)), at(0)},
		{wire.StepStart, ev(5, "batch", at(time.Second)), at(time.Second)},
		{wire.JobEnd, ev(5, "", at(time.Minute)), at(time.Minute)},
		{wire.JobStart, ev(5, "", at(time.Hour), func(e *wire.Event) { e.UID = 2000 }), at(time.Hour)},
	})
	j := r.Job(5)
	if j.State != Running || j.Ended != nil || len(j.Steps) != 0 || j.UID != 2000 || !j.Started.Equal(at(time.Hour)) {
		t.Errorf("reused job id: %+v, want a new running job of uid 2000 without steps", j)
	}
	// A requeued job's next run may begin with its batch step, without a prolog on this
	// node: a new run too.
	again := newReg(t, RegistryConfig{})
	applyAll(t, again, []applied{
		{wire.JobStart, ev(7, "", at(0)), at(0)},
		{wire.StepStart, ev(7, "batch", at(time.Second)), at(time.Second)},
		{wire.StepEnd, ev(7, "batch", at(10*time.Second)), at(10 * time.Second)},
		{wire.JobEnd, ev(7, "", at(11*time.Second)), at(11 * time.Second)},
		{wire.StepStart, ev(7, "batch", at(15*time.Second)), at(15 * time.Second)},
	})
	if j := again.Job(7); j.State != Running || j.Ended != nil || len(j.Steps) != 1 || !j.Started.Equal(at(15*time.Second)) {
		t.Errorf("requeued job's next run: %+v, want a new running job from its batch step", j)
	}
	// A job's own start handled after its end (events that waited for a hung daemon are
	// handled in any order) is not a new job.
	late := newReg(t, RegistryConfig{})
	applyAll(t, late, []applied{
		{wire.JobEnd, ev(6, "", at(time.Minute)), at(2 * time.Minute)},
		{wire.StepStart, ev(6, "batch", at(time.Second)), at(2 * time.Minute)},
		{wire.JobStart, ev(6, "", at(0)), at(2 * time.Minute)},
	})
	if j := late.Job(6); j.Ended == nil || len(j.Steps) != 1 || !j.JobStartSeen {
		t.Errorf("late job start: %+v, want the ended job with its step", j)
	}
}

// TestRegistryStateDirJunk: unfinished saves are removed at start; a directory named
// like a job's file does not stop the daemon.
func TestRegistryStateDirJunk(t *testing.T) {
	dir := t.TempDir()
	r := newReg(t, RegistryConfig{Dir: dir})
	e := ev(3, "", at(0))
	if _, err := r.Apply(wire.JobStart, &e, at(0)); err != nil {
		t.Fatal(err)
	}
	testenv.Write(t, filepath.Join(dir, "4.json.tmp"), "{half")
	if err := os.Mkdir(filepath.Join(dir, "7.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	r2 := newReg(t, RegistryConfig{Dir: dir})
	if r2.Job(3) == nil {
		t.Error("job 3 not restored")
	}
	if _, err := os.Stat(filepath.Join(dir, "4.json.tmp")); err == nil {
		t.Error("unfinished save left in place")
	}
	if st, err := os.Stat(filepath.Join(dir, "7.json")); err != nil || !st.IsDir() {
		t.Error("the directory in the state dir was touched")
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v, want 0700", st.Mode().Perm())
	}
}

// slurmFacts answers the reconciler as the job map would.
type slurmFacts map[uint32]*jobmap.Job

func (f slurmFacts) Job(_ context.Context, id string) (*jobmap.Job, error) {
	n, _ := strconv.ParseUint(id, 10, 32)
	j, ok := f[uint32(n)]
	switch {
	case !ok:
		return nil, fmt.Errorf("job %s: %w", id, jobmap.ErrNoJob)
	case j == nil:
		return nil, errors.New("slurmrestd does not answer")
	}
	return j, nil
}

// TestReconcile: running jobs Slurm no longer runs here end, with the reason; the others,
// and those the job map cannot tell about, keep running; a job with a recent event is not
// asked about.
func TestReconcile(t *testing.T) {
	r := newReg(t, RegistryConfig{Dir: t.TempDir()})
	now := at(time.Hour)
	// A running daemon's reconciler: the jobs start after it.
	rc := newReconciler(r, nil, nil, "node1", zerolog.Nop(), func() time.Time { return now })
	for id := uint32(1); id <= 6; id++ {
		e := ev(id, "", at(0))
		seen := at(0)
		if id == 6 {
			seen = now.Add(-time.Second) // an event a second ago
		}
		if _, err := r.Apply(wire.JobStart, &e, seen); err != nil {
			t.Fatal(err)
		}
	}
	facts := slurmFacts{
		2: {JobID: 2, State: "COMPLETED"},
		3: {JobID: 3, State: "RUNNING", Nodes: []string{"node1", "node2"}},
		4: {JobID: 4, State: "RUNNING", Nodes: []string{"node7"}},
		5: nil, // the job map fails
	}
	rc.facts = facts
	rc.round(context.Background())
	want := map[uint32]string{1: "Slurm no longer knows the job", 2: "Slurm says the job is COMPLETED",
		3: "", 4: "Slurm runs the job on other nodes", 5: "", 6: ""}
	for id, why := range want {
		j := r.Job(id)
		if (j.Ended != nil) != (why != "") || j.EndReason != why {
			t.Errorf("job %d: ended %v, reason %q; want reason %q", id, j.Ended != nil, j.EndReason, why)
		}
	}
	if r.Running() != 3 {
		t.Errorf("%d jobs running, want 3", r.Running())
	}
	// A restarted daemon's reconciler asks at once about every job the previous one left
	// running, however recent its last event: job 6 is gone.
	restarted := newReconciler(r, nil, facts, "node1", zerolog.Nop(), func() time.Time { return now })
	restarted.round(context.Background())
	if j := r.Job(6); j.Ended == nil || j.EndReason != "Slurm no longer knows the job" {
		t.Errorf("job 6 after a restart: ended %v, reason %q", j.Ended != nil, j.EndReason)
	}
	if r.Running() != 2 {
		t.Errorf("%d jobs running after a restart, want 2 (3 and 5)", r.Running())
	}
}

// TestBadCgroup: a job's cgroup directory from an event is taken only inside its
// hierarchy and in the job's own cgroup.
func TestBadCgroup(t *testing.T) {
	m := slurmCgroups{mounts: map[string]string{"freezer": "/sys/fs/cgroup/freezer", "unified": "/sys/fs/cgroup/unified"}}
	for _, tc := range []struct {
		key, dir, why string
	}{
		{"freezer", "/sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_7", ""},
		{"freezer", "/sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_7/step_batch", ""},
		{"unified", "/sys/fs/cgroup/unified/system.slice/slurmstepd.scope/job_7", ""},
		{"freezer", "/etc", "not under its hierarchy's mount"},
		{"freezer", "/sys/fs/cgroup/freezer", "not under its hierarchy's mount"},
		{"freezer", "/sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_8", "not the job's own cgroup"},
		{"freezer", "/sys/fs/cgroup/freezer/job_7/../../../../etc", "not a clean absolute path"},
		{"freezer", "sys/fs/cgroup/freezer/job_7", "not a clean absolute path"},
		{"memory", "/sys/fs/cgroup/memory/slurm/uid_1/job_7", "no such cgroup hierarchy"},
		{"unified", "/sys/fs/cgroup/freezer/slurm/uid_1/job_7", "not under its hierarchy's mount"},
	} {
		if got := m.badCgroup(tc.key, tc.dir, 7); !strings.HasPrefix(got, tc.why) || (tc.why == "") != (got == "") {
			t.Errorf("badCgroup(%s, %s) = %q, want %q", tc.key, tc.dir, got, tc.why)
		}
	}
}
