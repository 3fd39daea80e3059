package jobcgroup

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestList(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		dirs    []string
		node    string
		steps   func(Dir) bool // nil: every directory's
		want    []Dir
	}{
		{
			name:    "v1 node's own layout, one entry per job",
			fixture: "mountinfo-v1-systemd",
			dirs: []string{
				"sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_42/step_batch",
				"sys/fs/cgroup/memory/slurm_node1/uid_1000/job_42",
				"sys/fs/cgroup/memory/slurm_node1/uid_1001/job_7/step_extern",
				"sys/fs/cgroup/freezer/slurm_node1/uid_1001/job_x",           // not a job id
				"sys/fs/cgroup/freezer/slurm_node1/uid_1001/job_0",           // nor this
				"sys/fs/cgroup/freezer/slurm_node1/uid_1001/job_99999999999", // out of range
				"sys/fs/cgroup/freezer/slurm_node2/uid_1000/job_43",          // another node's
				"sys/fs/cgroup/freezer/slurm/uid_1000/job_44",                // where node1 has its own
			},
			node: "node1",
			want: []Dir{
				// Its steps are in another hierarchy than the first that has it.
				{Name: "job_42", Path: "/sys/fs/cgroup/memory/slurm_node1/uid_1000/job_42", JobID: 42, Steps: true},
				// Only the extern step: the prolog may still run.
				{Name: "job_7", Path: "/sys/fs/cgroup/memory/slurm_node1/uid_1001/job_7", JobID: 7},
			},
		},
		{
			name:    "v1 plain slurm",
			fixture: "mountinfo-v1-hybrid",
			dirs:    []string{"sys/fs/cgroup/pids/slurm/uid_7/job_9/step_0"},
			node:    "n",
			want:    []Dir{{Name: "job_9", Path: "/sys/fs/cgroup/pids/slurm/uid_7/job_9", JobID: 9, Steps: true}},
		},
		{
			name:    "v2 ids and SLUIDs, not slurmstepd's own",
			fixture: "mountinfo-v2",
			dirs: []string{
				"sys/fs/cgroup/system.slice/slurmstepd.scope/system",
				"sys/fs/cgroup/system.slice/slurmstepd.scope/job_5/step_0",
				"sys/fs/cgroup/system.slice/slurmstepd.scope/s0KF3ZQ8Y4M7TD/step_batch",
			},
			node: "node1",
			want: []Dir{
				{Name: "job_5", Path: "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5", JobID: 5, Steps: true},
				{Name: "s0KF3ZQ8Y4M7TD", Path: "/sys/fs/cgroup/system.slice/slurmstepd.scope/s0KF3ZQ8Y4M7TD", Steps: true},
			},
		},
		{
			name:    "v2 several slurmd on a host: only the node's scope",
			fixture: "mountinfo-v2",
			dirs: []string{
				"sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_5",
				"sys/fs/cgroup/system.slice/node2_slurmstepd.scope/job_6",
				"sys/fs/cgroup/slurm.slice/node1_slurmstepd.scope/job_8",
			},
			node: "node1",
			want: []Dir{
				{Name: "job_5", Path: "/sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_5", JobID: 5},
				{Name: "job_8", Path: "/sys/fs/cgroup/slurm.slice/node1_slurmstepd.scope/job_8", JobID: 8},
			},
		},
		{
			name:    "steps looked for only where asked",
			fixture: "mountinfo-v1-hybrid",
			dirs:    []string{"sys/fs/cgroup/pids/slurm/uid_7/job_9/step_0", "sys/fs/cgroup/pids/slurm/uid_7/job_10/step_0"},
			node:    "n",
			steps:   func(d Dir) bool { return d.JobID != 9 },
			want: []Dir{
				{Name: "job_10", Path: "/sys/fs/cgroup/pids/slurm/uid_7/job_10", JobID: 10, Steps: true},
				{Name: "job_9", Path: "/sys/fs/cgroup/pids/slurm/uid_7/job_9", JobID: 9},
			},
		},
		{
			name:    "no Slurm here",
			fixture: "mountinfo-v2",
			node:    "node1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakeRoot(t, tc.fixture, "", tc.dirs, nil)
			mounts, err := Mounts(fs)
			if err != nil {
				t.Fatal(err)
			}
			got := List(fs, WithSlurm(fs, mounts, tc.node), tc.node, tc.steps)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("List(%s) mismatch (-want +got):\n%s", tc.node, diff)
			}
		})
	}
}
