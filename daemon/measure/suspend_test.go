package measure

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/sample"
)

// TestFrozen: Slurm's suspension is read from the job's step cgroups, on cgroup v1 (the
// freezer controller's freezer.state) and v2 (cgroup.events of the step's user cgroup);
// a job without a cgroup that could say is "not known", never "not frozen".
func TestFrozen(t *testing.T) {
	const v1 = "sys/fs/cgroup/freezer/slurm/uid_1000/job_7"
	const v2 = "sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_7"
	const own = "sys/fs/cgroup/unified/persyst_node1/job_7"
	for _, tc := range []struct {
		name          string
		files         map[string]string
		cgroups       map[string]string
		frozen, known bool
	}{
		{"v1 running", map[string]string{v1 + "/freezer.state": "THAWED\n", v1 + "/step_batch/freezer.state": "THAWED\n"},
			map[string]string{"freezer": "/" + v1}, false, true},
		{"v1 suspended", map[string]string{v1 + "/freezer.state": "THAWED\n", v1 + "/step_batch/freezer.state": "FROZEN\n"},
			map[string]string{"freezer": "/" + v1, "memory": "/sys/fs/cgroup/memory/slurm/uid_1000/job_7"}, true, true},
		{"v1 being frozen", map[string]string{v1 + "/step_0/freezer.state": "FREEZING\n", v1 + "/step_batch/freezer.state": "THAWED\n"},
			map[string]string{"freezer": "/" + v1}, true, true},
		{"v2 running", map[string]string{v2 + "/cgroup.events": "populated 1\nfrozen 0\n", v2 + "/step_batch/user/cgroup.events": "populated 1\nfrozen 0\n"},
			map[string]string{"unified": "/" + v2}, false, true},
		{"v2 suspended", map[string]string{v2 + "/cgroup.events": "populated 1\nfrozen 0\n", v2 + "/step_batch/user/cgroup.events": "populated 1\nfrozen 1\n"},
			map[string]string{"unified": "/" + v2}, true, true},
		{"v1 without a freezer hierarchy", map[string]string{"sys/fs/cgroup/memory/slurm/uid_1000/job_7/memory.stat": ""},
			map[string]string{"memory": "/sys/fs/cgroup/memory/slurm/uid_1000/job_7"}, false, false},
		// persyst's own v2 cgroup of a job on v1 Slurm: never frozen by Slurm, it says nothing.
		{"v1 without a freezer hierarchy, persyst's v2 cgroup", map[string]string{own + "/cgroup.events": "populated 1\nfrozen 0\n"},
			map[string]string{"memory": "/sys/fs/cgroup/memory/slurm/uid_1000/job_7", "unified": "/" + own}, false, false},
		{"v1 suspended, persyst's v2 cgroup", map[string]string{v1 + "/step_batch/freezer.state": "FROZEN\n", own + "/cgroup.events": "populated 1\nfrozen 0\n"},
			map[string]string{"freezer": "/" + v1, "unified": "/" + own}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hostfs.New(testenv.Files(t, tc.files))
			f := NewFreezer(h)
			defer f.Close()
			frozen, known := f.Frozen(tc.cgroups, "/"+own)
			if frozen != tc.frozen || known != tc.known {
				t.Errorf("Frozen = %v, %v; want %v, %v", frozen, known, tc.frozen, tc.known)
			}
		})
	}
}

// TestFreezerFollowsSteps: the Freezer keeps the files open between looks and still
// sees a step frozen later, a step that began since the last look, and one that ended.
func TestFreezerFollowsSteps(t *testing.T) {
	const job = "sys/fs/cgroup/freezer/slurm/uid_1000/job_7"
	root := testenv.Files(t, map[string]string{job + "/freezer.state": "THAWED\n", job + "/step_batch/freezer.state": "THAWED\n"})
	f := NewFreezer(hostfs.New(root))
	defer f.Close()
	cg := map[string]string{"freezer": "/" + job}
	dir := filepath.Join(root, job)
	write := func(file, v string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, step := range []struct {
		name string
		do   func()
		want bool
	}{
		{"running", func() {}, false},
		{"a new step frozen", func() { write("step_0/freezer.state", "FROZEN\n") }, true},
		{"it ended", func() { os.RemoveAll(filepath.Join(dir, "step_0")) }, false},
		{"the batch step frozen", func() { write("step_batch/freezer.state", "FROZEN\n") }, true},
		{"thawed", func() { write("step_batch/freezer.state", "THAWED\n") }, false},
	} {
		step.do()
		if frozen, known := f.Frozen(cg, ""); frozen != step.want || !known {
			t.Errorf("%d %s: Frozen = %v, %v; want %v, true", i, step.name, frozen, known, step.want)
		}
	}
	if n := f.OpenFiles(); n != 3 {
		t.Errorf("%d files open, want 3 (the job's directory, its state and the batch step's)", n)
	}
}

// TestSuspendSource: an interval counts as suspended when the job was frozen at its
// start (the daemon reads again at every freeze and thaw), and not measured where
// nothing could say.
func TestSuspendSource(t *testing.T) {
	const job = "sys/fs/cgroup/freezer/slurm/uid_1000/job_7"
	root := testenv.Files(t, map[string]string{job + "/step_batch/freezer.state": "THAWED\n"})
	h := hostfs.New(root)
	src, _ := newSuspend(&Env{Host: h}, nil)
	freezer := NewFreezer(h)
	defer freezer.Close()
	spec := &Spec{StatCgroups: map[string]string{"freezer": "/" + job}}
	read := func(reason sample.Reason, secs float64) (float64, bool, string) {
		s := sample.Sample{Time: time.Unix(100, 0), Seconds: secs, Job: map[string]float64{}}
		r := &Read{Reason: reason, Sample: &s, Spec: spec, notes: map[string]string{}, freezer: freezer}
		if err := src.Read(r); err != nil {
			t.Fatal(err)
		}
		v, ok := s.Job[sample.SuspendedSeconds]
		return v, ok, r.notes[sample.SuspendedSeconds]
	}
	read(sample.Start, 0)
	testenv.Write(t, root+"/"+job+"/step_batch/freezer.state", "FROZEN\n")
	if v, _, _ := read(sample.Suspend, 30); v != suspendGrace.Seconds() {
		t.Errorf("the interval that ends at the freeze: suspended %v s, want Slurm's grace %v s (SIGTSTP)", v, suspendGrace.Seconds())
	}
	testenv.Write(t, root+"/"+job+"/step_batch/freezer.state", "THAWED\n")
	read(sample.Resume, 1)
	testenv.Write(t, root+"/"+job+"/step_batch/freezer.state", "FROZEN\n")
	if v, _, _ := read(sample.Suspend, 1.5); v != suspendGrace.Seconds() {
		t.Errorf("a freeze 1.5 s after a read: suspended %v s, want the grace %v s (the stretch began before this interval)", v, suspendGrace.Seconds())
	}
	testenv.Write(t, root+"/"+job+"/step_batch/freezer.state", "THAWED\n")
	if v, _, _ := read(sample.Resume, 10); v != 10 {
		t.Errorf("the interval from the freeze to the thaw: suspended %v s, want 10", v)
	}
	if v, _, _ := read(sample.Cycle, 5); v != 0 {
		t.Errorf("after the thaw: suspended %v s, want 0", v)
	}
	spec.StatCgroups = map[string]string{"memory": "/sys/fs/cgroup/memory/slurm/uid_1000/job_7"}
	if _, ok, why := read(sample.Cycle, 5); ok || why == "" {
		t.Errorf("no freezer: measured %v, why %q; want not measured with a reason", ok, why)
	}
}

// TestStateFrozen: the state files' contents as the kernel writes them, and cut short.
func TestStateFrozen(t *testing.T) {
	for _, tc := range []struct {
		v2   bool
		file string
		want bool
	}{
		{true, "populated 1\nfrozen 1\n", true},
		{true, "populated 1\nfrozen 0\n", false},
		{true, "frozen 1", true}, // no newline at the end
		{true, "populated 1\n", false},
		{true, "frozen 10\n", false},
		{true, "unfrozen 1\nfrozen 0\n", false},
		{true, "", false},
		{false, "FROZEN\n", true},
		{false, "FREEZING\n", true},
		{false, "THAWED\n", false},
		{false, "", false},
	} {
		if got := stateFrozen(tc.v2, []byte(tc.file)); got != tc.want {
			t.Errorf("stateFrozen(v2 %v, %q) = %v, want %v", tc.v2, tc.file, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { stateFrozen(true, []byte("populated 1\nfrozen 1\n")) }); n != 0 {
		t.Errorf("stateFrozen allocates %v times a call, want 0", n)
	}
}
