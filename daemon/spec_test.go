package daemon

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/gres"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// TestJobSpec: a job's spec from Slurm's cgroups and what was read of them. The CPUs are
// the job's cpuset's once Slurm has set and narrowed it (else the meter waits, for at
// most cpusetWait), an earlier daemon's, or the node's; perf counts in persyst's cgroup
// of the job, else in Slurm's v2 one, else not (and says why).
func TestJobSpec(t *testing.T) {
	started := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const (
		v1cpuset = "/sys/fs/cgroup/cpuset/slurm_n1/uid_1000/job_7"
		v1freez  = "/sys/fs/cgroup/freezer/slurm_n1/uid_1000/job_7"
		v1mem    = "/sys/fs/cgroup/memory/slurm_n1/uid_1000/job_7"
		v2job    = "/sys/fs/cgroup/system.slice/n1_slurmstepd.scope/job_7"
		owned    = "/sys/fs/cgroup/unified/persyst_n1/job_7"
	)
	// Two hardware threads per core: CPUs 0 and 2 are core 0, 1 and 3 core 1.
	topo := func(cpus []int) []sample.CPUTopo {
		out := make([]sample.CPUTopo, len(cpus))
		for i, c := range cpus {
			out[i] = sample.CPUTopo{CPU: c, Core: c % 2}
		}
		return out
	}
	v1Node := specNode{Host: hostfs.New("/r"), Topology: topo, CpusetV1: true, PerfParent: "/sys/fs/cgroup/unified/persyst_n1", OwnedV2: true}
	v2Node := specNode{Host: hostfs.New("/r"), Topology: topo, PerfParent: "/sys/fs/cgroup/persyst_n1", OwnedV2: true}
	noPerf := specNode{Host: hostfs.New("/r"), Topology: topo, CpusetV1: true, PerfWhy: "no cgroup v2 or perf_event v1 hierarchy is mounted"}
	listed := func(cpus ...int) listedCPUs { return listedCPUs{CPUs: cpus, Listed: len(cpus) > 0} }
	type want struct {
		CPUs                   []int
		Stat                   map[string]string
		PerfCgroup, ProcCgroup string
		PerfWhy                string
		ProcsSince             time.Time
	}
	for _, tc := range []struct {
		name   string
		node   specNode
		in     specInput
		notYet bool // errNotYet
		failed bool // another error
		want   want
	}{
		{name: "no cgroups yet", node: v1Node, in: specInput{}, notYet: true},
		{name: "v1: cpuset not made yet", node: v1Node,
			in: specInput{Cgroups: map[string]string{"freezer": v1freez}, Online: []int{0, 1, 2, 3}}, notYet: true},
		{name: "v1: cpuset never made: the node's CPUs after cpusetWait", node: v1Node,
			in:   specInput{Cgroups: map[string]string{"freezer": v1freez}, Online: []int{0, 1, 2, 3}, Now: started.Add(cpusetWait)},
			want: want{CPUs: []int{0, 1, 2, 3}, Stat: map[string]string{"freezer": v1freez, "unified": owned}, PerfCgroup: "/r" + owned, ProcCgroup: owned}},
		{name: "v1: cpuset lists no CPUs yet", node: v1Node,
			in: specInput{Cgroups: map[string]string{"cpuset": v1cpuset}, CPUs: map[string]listedCPUs{"cpuset": listed()}, Online: []int{0, 1, 2, 3}}, notYet: true},
		{name: "v1: cpuset not narrowed to the job's core yet", node: v1Node,
			in: specInput{Cores: "0", Steps: 1, Cgroups: map[string]string{"cpuset": v1cpuset}, CPUs: map[string]listedCPUs{"cpuset": listed(0, 1, 2, 3)}}, notYet: true},
		{name: "v1: no step yet, cores not said", node: v1Node,
			in: specInput{Cgroups: map[string]string{"cpuset": v1cpuset}, CPUs: map[string]listedCPUs{"cpuset": listed(0, 1, 2, 3)}}, notYet: true},
		{name: "v1: narrowed to the job's core (its two threads)", node: v1Node,
			in:   specInput{Cores: "0", Steps: 1, Cgroups: map[string]string{"cpuset": v1cpuset, "memory": v1mem}, CPUs: map[string]listedCPUs{"cpuset": listed(0, 2)}},
			want: want{CPUs: []int{0, 2}, Stat: map[string]string{"cpuset": v1cpuset, "memory": v1mem, "unified": owned}, PerfCgroup: "/r" + owned, ProcCgroup: owned}},
		{name: "v1 without persyst's cgroup: processes from a v1 cgroup", node: noPerf,
			in:   specInput{Steps: 1, Cgroups: map[string]string{"cpuset": v1cpuset, "freezer": v1freez}, CPUs: map[string]listedCPUs{"cpuset": listed(1)}},
			want: want{CPUs: []int{1}, Stat: map[string]string{"cpuset": v1cpuset, "freezer": v1freez}, ProcCgroup: v1freez, PerfWhy: noPerf.PerfWhy}},
		{name: "v2: Slurm's job cgroup counts perf", node: v2Node,
			in:   specInput{Steps: 1, Cgroups: map[string]string{"unified": v2job}, CPUs: map[string]listedCPUs{"unified": listed(1, 3)}},
			want: want{CPUs: []int{1, 3}, Stat: map[string]string{"unified": v2job}, PerfCgroup: "/r" + v2job, ProcCgroup: v2job}},
		{name: "v2: no perf parent, no perf", node: specNode{Host: hostfs.New("/r"), Topology: topo},
			in:   specInput{Steps: 1, Cgroups: map[string]string{"unified": v2job}, CPUs: map[string]listedCPUs{"unified": listed(1)}},
			want: want{CPUs: []int{1}, Stat: map[string]string{"unified": v2job}, PerfWhy: "no cgroup of the job to count perf events in"}},
		{name: "after a restart: an earlier daemon's CPUs, processes from now", node: v2Node,
			in:   specInput{Steps: 1, Cgroups: map[string]string{"unified": v2job}, Prev: &sampleHeader{CPUs: "2-3"}, Now: started.Add(time.Hour)},
			want: want{CPUs: []int{2, 3}, Stat: map[string]string{"unified": v2job}, PerfCgroup: "/r" + v2job, ProcCgroup: v2job, ProcsSince: started.Add(time.Hour)}},
		{name: "no CPUs known at all", node: v2Node,
			in: specInput{Steps: 1, Cgroups: map[string]string{"unified": v2job}, Now: started.Add(time.Hour)}, failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.ID, in.Started = 7, started
			if in.Now.IsZero() {
				in.Now = started.Add(time.Second)
			}
			if in.Owned == "" && tc.node.PerfParent != "" && tc.node.CpusetV1 {
				in.Owned = owned
			}
			spec, err := jobSpec(tc.node, in)
			switch {
			case tc.notYet || tc.failed:
				if err == nil || errors.Is(err, errNotYet) != tc.notYet {
					t.Fatalf("error %v, want one (not yet: %v)", err, tc.notYet)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			w := tc.want
			if w.ProcsSince.IsZero() {
				w.ProcsSince = started
			}
			got := want{CPUs: spec.CPUs, Stat: spec.StatCgroups, PerfCgroup: spec.PerfCgroup, ProcCgroup: spec.ProcCgroup, PerfWhy: spec.PerfWhy, ProcsSince: spec.ProcsSince}
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if len(spec.Topology) != len(spec.CPUs) || spec.Name != "job 7" {
				t.Errorf("name %q, topology %v for CPUs %v", spec.Name, spec.Topology, spec.CPUs)
			}
		})
	}
}

// TestJobSpecGPUs: the prolog's list of the job's GPUs becomes the names the GPU source
// matches: the devices slurmd numbers so (GPUIndex slurmd, the default), NVML indices
// (where slurmd did not answer, or GPUIndex=nvml), minor numbers (GPUIndex=minor), MIG
// UUIDs; slurmd not answered yet is waited for early in the job only.
func TestJobSpecGPUs(t *testing.T) {
	const v2job = "/sys/fs/cgroup/system.slice/n1_slurmstepd.scope/job_7"
	// A node's GPUs as slurmd numbers them: an NVIDIA GPU, two AMD ones, a MIG instance
	// (its files are no one GPU's device node: not resolved).
	order := gres.Known([]gres.GPU{{Index: 0, Kind: gres.NVIDIA, Minor: 0}, {Index: 1, Kind: gres.AMD, Minor: 128},
		{Index: 2, Kind: gres.AMD, Minor: 129}, {Index: 3, Why: "a MIG instance"}}, nil)
	failed := gres.Known(nil, errors.New("slurmd -G: exit status 1"))
	pending := func() ([]gres.GPU, bool, error) { return nil, false, nil }
	for _, tc := range []struct {
		name, gpus, index string
		order             func() ([]gres.GPU, bool, error)
		late              bool // the job started long ago
		want              []string
		notYet            bool
	}{
		{name: "none", want: nil},
		{name: "GRES indices", gpus: "0,2-3", want: []string{"0", "2", "3"}},
		{name: "minor numbers", gpus: "1,5", index: "minor", want: []string{"minor:1", "minor:5"}},
		{name: "MIG instances", gpus: "MIG-1a2b,MIG-3c4d", index: "minor", want: []string{"MIG-1a2b", "MIG-3c4d"}},
		{name: "not a list", gpus: "0,x", want: nil},
		{name: "slurmd's order", gpus: "0-3", order: order.Get, want: []string{"minor:0", "render:128", "render:129", "3"}},
		{name: "slurmd's order, said so", gpus: "2", index: "slurmd", order: order.Get, want: []string{"render:129"}},
		{name: "beyond slurmd's GPUs", gpus: "7", order: order.Get, want: []string{"7"}},
		{name: "NVML's order asked for", gpus: "1", index: "nvml", order: order.Get, want: []string{"1"}},
		{name: "slurmd failed", gpus: "1", order: failed.Get, want: []string{"1"}},
		{name: "slurmd not answered yet", gpus: "1", order: pending, notYet: true},
		{name: "slurmd not answered, the job long started", gpus: "1", order: pending, late: true, want: []string{"1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := specNode{Host: hostfs.New("/r"), Topology: func(cpus []int) []sample.CPUTopo { return nil },
				PerfParent: "/sys/fs/cgroup/persyst_n1", OwnedV2: true, GPUIndex: tc.index, GPUOrder: tc.order}
			in := specInput{ID: 7, GPUs: tc.gpus, Steps: 1, Cgroups: map[string]string{"unified": v2job},
				CPUs: map[string]listedCPUs{"unified": {CPUs: []int{0}, Listed: true}}}
			if tc.late {
				in.Now = in.Started.Add(time.Hour)
			}
			spec, err := jobSpec(n, in)
			if tc.notYet {
				if !errors.Is(err, errNotYet) {
					t.Fatalf("err = %v, want not yet", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, spec.GPUs); d != "" {
				t.Errorf("GPUs (-want +got):\n%s", d)
			}
		})
	}
}

// TestCPUShare: a job's share of the cores the node's running jobs hold.
func TestCPUShare(t *testing.T) {
	jobs := func(cores ...string) []*Job {
		var out []*Job
		for i, c := range cores {
			out = append(out, &Job{JobID: uint32(i + 1), Cores: c})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		running []*Job
		id      uint32
		want    float64
	}{
		{name: "by the cores each holds", running: jobs("0-5", "6-7"), id: 1, want: 0.75},
		{name: "the other", running: jobs("0-5", "6-7"), id: 2, want: 0.25},
		{name: "one's cores not known: an equal share", running: jobs("0-5", "", "7"), id: 3, want: 1.0 / 3},
		{name: "not running", running: jobs("0-5"), id: 9, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cpuShare(tc.running, tc.id); got != tc.want {
				t.Errorf("cpuShare = %v, want %v", got, tc.want)
			}
		})
	}
}
