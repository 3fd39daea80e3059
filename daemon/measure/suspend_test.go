package measure

import (
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hostfs.New(testenv.Files(t, tc.files))
			frozen, known := Frozen(h, tc.cgroups)
			if frozen != tc.frozen || known != tc.known {
				t.Errorf("Frozen = %v, %v; want %v, %v", frozen, known, tc.frozen, tc.known)
			}
		})
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
	spec := &Spec{StatCgroups: map[string]string{"freezer": "/" + job}}
	read := func(reason sample.Reason, secs float64) (float64, bool, string) {
		s := sample.Sample{Time: time.Unix(100, 0), Seconds: secs, Job: map[string]float64{}}
		r := &Read{Reason: reason, Sample: &s, Spec: spec, notes: map[string]string{}}
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
