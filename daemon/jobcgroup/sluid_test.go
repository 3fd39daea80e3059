package jobcgroup

import "testing"

func TestIsSLUID(t *testing.T) {
	for name, want := range map[string]bool{
		"sEKNKTV3WPV500": true, // cgroup.conf(5)'s example
		"s0ABCDEFGHJKMN": true,
		"job_12":         false,
		"sEKNKTV3WPV50":  false, // 12 characters
		"SEKNKTV3WPV500": false, // the prefix is lowercase
		"sEKNKTV3WPV50U": false, // U is not Crockford's
		"step_batch":     false,
	} {
		if got := IsSLUID(name); got != want {
			t.Errorf("IsSLUID(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestAllJobs: the cgroup that holds all of Slurm's jobs on a node, from a job's.
func TestAllJobs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/sys/fs/cgroup/cpu,cpuacct/slurm_n1/uid_1000/job_7", "/sys/fs/cgroup/cpu,cpuacct/slurm_n1"},
		{"/sys/fs/cgroup/memory/slurm/uid_0/job_12/", "/sys/fs/cgroup/memory/slurm"},
		{"/sys/fs/cgroup/system.slice/n1_slurmstepd.scope/job_7", "/sys/fs/cgroup/system.slice/n1_slurmstepd.scope"},
		{"/sys/fs/cgroup/system.slice/slurmstepd.scope/s0123456789ABC", "/sys/fs/cgroup/system.slice/slurmstepd.scope"},
		{"/sys/fs/cgroup/jobs/seven", ""},
		{"/job_x", ""},
		{"/job_7", ""},
		{"/sys/fs/cgroup/unified/persyst_n1/job_7", "/sys/fs/cgroup/unified/persyst_n1"},
	} {
		got, ok := AllJobs(tc.in)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("AllJobs(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}
