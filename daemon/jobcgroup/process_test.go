package jobcgroup

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/persyst/persyst/hostfs"
)

func TestOfProcess(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		cgroup  string
		job     uint32
		want    map[string]string
	}{
		{
			name:    "v1",
			fixture: "mountinfo-v1-systemd",
			cgroup: "11:perf_event:/slurm_node1/uid_1000/job_42/step_batch\n" +
				"7:freezer:/slurm_node1/uid_1000/job_42/step_batch\n" +
				"5:memory:/slurm_node1/uid_1000/job_42/step_batch/task_0\n" +
				"4:cpuacct,cpu:/slurm_node1/uid_1000/job_42/step_batch\n" +
				"3:devices:/slurm_node1/uid_1000/job_42/step_batch\n" + // devices is not mounted here
				"2:cpuset:/\n" + // not in a job cgroup
				"1:name=systemd:/system.slice/slurmd.service\n" +
				"0::/system.slice/slurmd.service\n",
			job: 42,
			want: map[string]string{
				"perf_event":  "/mnt/cg space/slurm_node1/uid_1000/job_42",
				"freezer":     "/sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_42",
				"memory":      "/sys/fs/cgroup/memory/slurm_node1/uid_1000/job_42",
				"cpu,cpuacct": "/sys/fs/cgroup/cpu,cpuacct/slurm_node1/uid_1000/job_42",
			},
		},
		{
			name:    "v2",
			fixture: "mountinfo-v2",
			cgroup:  "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n",
			job:     42,
			want:    map[string]string{"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"},
		},
		{
			name:    "hybrid unified",
			fixture: "mountinfo-v1-hybrid",
			cgroup:  "7:freezer:/slurm/uid_0/job_3/step_0\n0::/system.slice/slurmstepd.scope/job_3/step_0\n",
			job:     3,
			want: map[string]string{
				"freezer": "/sys/fs/cgroup/freezer/slurm/uid_0/job_3",
				"unified": "/sys/fs/cgroup/unified/system.slice/slurmstepd.scope/job_3",
			},
		},
		{
			name:    "v2 SLUID of Slurm 26.05",
			fixture: "mountinfo-v2",
			cgroup:  "0::/system.slice/slurmstepd.scope/s0KF3ZQ8Y4M7TD/step_batch/user/task_0\n",
			job:     42,
			want:    map[string]string{"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/s0KF3ZQ8Y4M7TD"},
		},
		{
			name:    "v2 slurmstepd's own cgroup is no job's",
			fixture: "mountinfo-v2",
			cgroup:  "0::/system.slice/slurmstepd.scope/system\n",
			job:     42,
			want:    map[string]string{},
		},
		{
			name:    "v2 not a SLUID (I, L, O, U are not Crockford's)",
			fixture: "mountinfo-v2",
			cgroup:  "0::/system.slice/slurmstepd.scope/s0KF3ZQ8Y4M7TI/step_0\n",
			job:     42,
			want:    map[string]string{},
		},
		{
			name:    "other job",
			fixture: "mountinfo-v2",
			cgroup:  "0::/system.slice/slurmstepd.scope/job_420/step_0\n",
			job:     42,
			want:    map[string]string{},
		},
		{
			name:    "job id as a prefix of a component does not match",
			fixture: "mountinfo-v1-systemd",
			cgroup:  "7:freezer:/slurm/uid_1000/job_42x/step_0\n",
			job:     42,
			want:    map[string]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := asProcess(t, fakeRoot(t, tc.fixture, tc.cgroup, nil, nil))
			got, err := OfProcess(fs, 4242, tc.job)
			if err != nil {
				t.Fatalf("OfProcess: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("OfProcess(%d) mismatch (-want +got):\n%s", tc.job, diff)
			}
		})
	}
	t.Run("gone", func(t *testing.T) {
		fs := fakeRoot(t, "mountinfo-v2", "0::/\n", nil, nil)
		_, err := OfProcess(fs, 4243, 1)
		if err == nil || !strings.Contains(err.Error(), "proc/4243/mountinfo") {
			t.Errorf("OfProcess of a process that is gone: %v, want an error naming its file", err)
		}
		if _, err := OfProcess(fs, 0, 1); err == nil {
			t.Error("OfProcess(0): no error")
		}
	})
}

// TestOwn: this process's directory on the cgroup v2 hierarchy, under the injected root.
func TestOwn(t *testing.T) {
	for _, tc := range []struct {
		name, fixture, cgroup string
		want                  string // under the root; "" none
	}{
		{"v2 under systemd", "mountinfo-v2", "0::/system.slice/persyst.service\n", "/sys/fs/cgroup/system.slice/persyst.service"},
		{"hybrid", "mountinfo-v1-hybrid", "7:freezer:/\n0::/system.slice/persyst.service\n", "/sys/fs/cgroup/unified/system.slice/persyst.service"},
		{"at the root", "mountinfo-v2", "0::/\n", "/sys/fs/cgroup"},
		{"v1 only", "mountinfo-v1-systemd", "7:freezer:/\n1:name=systemd:/system.slice/persyst.service\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakeRoot(t, tc.fixture, tc.cgroup, nil, nil)
			got, err := Own(fs)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want != "" {
				want = fs.Path(want)
			}
			if got != want {
				t.Errorf("Own = %q, want %q", got, want)
			}
		})
	}
	if _, err := Own(hostfs.New(t.TempDir())); err == nil || !strings.Contains(err.Error(), "proc/self/mountinfo") {
		t.Errorf("Own without proc: %v, want an error naming proc/self/mountinfo", err)
	}
}
