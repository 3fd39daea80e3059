package daemon

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/gres"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// From Slurm's cgroups of a job to the spec its meter is opened with: a pure function
// (jobSpec) of what was read before (specInput) and of the node (specNode).

// specNode is what a job's spec takes from the node.
type specNode struct {
	Host     hostfs.FS                    // where cgroup paths lie (only joined, never read)
	Topology func([]int) []sample.CPUTopo // the cores and sockets of CPUs
	CpusetV1 bool                         // a v1 cpuset hierarchy is mounted (Slurm's job cpusets live there)
	GPUIndex string                       // what a GRES index is: "" or "slurmd" (GPUOrder's), "nvml" (NVML's index), "minor"
	// GPUOrder gives the node's GPUs in Slurm's order, as slurmd said them (ready false:
	// not yet; nil: not asked).
	GPUOrder func() (gpus []gres.GPU, ready bool, err error)
	// PerfParent is persyst's perf cgroup parent ("": perf cannot be counted in a cgroup
	// of persyst's, PerfWhy says why); OwnedV2: it is on the v2 hierarchy.
	PerfParent, PerfWhy string
	OwnedV2             bool
}

// specInput is what was read of a job before its meter is opened.
type specInput struct {
	ID      uint32
	Started time.Time // the job's start on this node
	Cores   string    // Slurm's list of the job's cores on this node ("": not said)
	GPUs    string    // Slurm's GRES indices of the job's GPUs on this node ("": none)
	Steps   int       // the job's steps started on this node
	// Cgroups are Slurm's cgroup directories of the job by hierarchy key, and CPUs what
	// the cpuset files of its cpuset and unified ones list.
	Cgroups map[string]string
	CPUs    map[string]listedCPUs
	Owned   string        // persyst's own perf cgroup of the job ("": none)
	Prev    *sampleHeader // what an earlier daemon measured of the job (nil: nothing)
	Online  []int         // the node's online CPUs (nil: not known)
	Now     time.Time
}

// listedCPUs is what a cgroup's cpuset file lists: Listed is false for an empty list.
type listedCPUs struct {
	CPUs   []int
	Listed bool
	Err    error
}

// errNotYet: the job's meter cannot be opened yet (its cgroups are not there, or Slurm
// has not set its CPUs yet); the next event or cycle tries again.
var errNotYet = errors.New("not yet")

// cpusetWait is how long a job's meter waits for Slurm's cpuset cgroup of the job, and
// for it to hold the job's cores only (cpusetSettled).
const cpusetWait = 10 * time.Second

// jobSpec is the spec of a job's meter; an error wrapping errNotYet says why it cannot
// be opened yet, another why it cannot be measured.
func jobSpec(n specNode, in specInput) (measure.Spec, error) {
	cg := in.Cgroups
	if len(cg) == 0 {
		return measure.Spec{}, fmt.Errorf("%w: no cgroup of the job", errNotYet)
	}
	early := in.Now.Sub(in.Started) < cpusetWait
	if n.CpusetV1 && !hasKey(cg, "cpuset") && early {
		// Slurm creates the job's cpuset a moment after the prolog: wait for it, so that
		// per-CPU values cover the job's CPUs only (later: all online CPUs).
		return measure.Spec{}, fmt.Errorf("%w: no cpuset cgroup of the job", errNotYet)
	}
	spec := measure.Spec{Name: "job " + strconv.FormatUint(uint64(in.ID), 10), StatCgroups: statCgroups(cg, in.Owned, n.OwnedV2)}
	if in.Owned != "" && spec.StatCgroups["unified"] == in.Owned {
		spec.OwnCgroup = in.Owned
	}
	if strings.Contains(in.GPUs, "MIG-") || strings.Contains(in.GPUs, "GPU-") {
		spec.GPUs = strings.Split(in.GPUs, ",") // UUIDs (MIG instances)
	} else if gpus, err := sample.ParseCPUList(in.GPUs); err == nil {
		ids, err := gpuIDs(gpus, n, early)
		if err != nil {
			return measure.Spec{}, err
		}
		spec.GPUs = ids
	}
	for k := range cg {
		if !keyHas(k, "cpuset") {
			continue
		}
		if l := in.CPUs[k]; l.Err == nil && l.Listed {
			spec.CPUs = l.CPUs
		} else if early {
			// A new v1 cpuset lists no CPUs until Slurm writes them: measured now, the
			// job would be taken to run on every CPU of the node.
			return measure.Spec{}, fmt.Errorf("%w: the job's cpuset lists no CPUs", errNotYet)
		}
	}
	if l, ok := in.CPUs["unified"]; ok && len(spec.CPUs) == 0 && l.Err == nil && l.Listed {
		spec.CPUs = l.CPUs
	}
	if len(spec.CPUs) > 0 {
		spec.Topology = n.Topology(spec.CPUs)
		if early && !cpusetSettled(in.Cores, in.Steps, spec.Topology) {
			// Slurm creates a job's cpuset with its parent's CPUs and then narrows it to
			// the job's: read in between, a 1-CPU job would be measured on the whole node.
			return measure.Spec{}, fmt.Errorf("%w: the job's cpuset holds more cores than the job's", errNotYet)
		}
	}
	// The job's processes count from their birth, so that what a task does before the
	// meter's first read (which comes a moment after the start, in the background) is
	// the job's however the timing falls. After a restart, the processes there are
	// counted from now: what they did before is in the earlier daemon's samples.
	spec.ProcsSince = in.Started
	if in.Prev != nil {
		spec.ProcsSince = in.Now
		if cpus, err := sample.ParseCPUList(in.Prev.CPUs); err == nil && len(cpus) > 0 && len(spec.CPUs) == 0 {
			spec.CPUs, spec.Topology = cpus, in.Prev.Topology
		}
	}
	if len(spec.CPUs) == 0 {
		if len(in.Online) == 0 {
			return measure.Spec{}, errors.New("no CPUs: the node's online CPUs are not known")
		}
		spec.CPUs = in.Online
	}
	if spec.Topology == nil {
		spec.Topology = n.Topology(spec.CPUs)
	}
	perfCgroup(&spec, n, cg, in.Owned)
	return spec, nil
}

// perfCgroup sets where the job's perf events are counted and its processes listed:
// persyst's own cgroup of the job, else Slurm's v2 one, else none (and why).
func perfCgroup(spec *measure.Spec, n specNode, cg map[string]string, owned string) {
	switch {
	case owned != "":
		spec.PerfCgroup = n.Host.Path(owned)
		spec.ProcCgroup = owned
	case cg["unified"] != "" && n.PerfParent != "":
		spec.PerfCgroup = n.Host.Path(cg["unified"])
		spec.ProcCgroup = cg["unified"]
	default:
		spec.PerfWhy = n.PerfWhy
		if spec.PerfWhy == "" {
			spec.PerfWhy = "no cgroup of the job to count perf events in"
		}
	}
	if spec.ProcCgroup != "" {
		return
	}
	for _, k := range []string{"pids", "freezer", "cpuacct", "cpu,cpuacct", "memory"} {
		if d, ok := cg[k]; ok {
			spec.ProcCgroup = d
			return
		}
	}
}

// cpusetSettled says whether a job's cpuset (its CPUs' topology) is the job's: no more
// physical cores than the job was allocated on the node (cores, Slurm's list of the job's
// cores, which its steps' events bring: before the first step, not settled; a step
// without it, from a plugin that does not say, settled). Slurm counts cores, the cpuset
// lists their hardware threads.
func cpusetSettled(cores string, steps int, topo []sample.CPUTopo) bool {
	if cores == "" {
		return steps > 0
	}
	alloc, err := sample.ParseCPUList(cores)
	if err != nil || len(alloc) == 0 {
		return true
	}
	seen := make(map[sample.Core]struct{}, len(topo))
	for _, t := range topo {
		seen[sample.Core{Socket: t.Socket, Core: t.Core}] = struct{}{}
	}
	return len(seen) <= len(alloc)
}

// statCgroups adds persyst's own v2 job cgroup (owned, when ownedV2) to Slurm's: on
// hybrid hosts its cpu.stat gives the CPU time of the job's tasks even when Slurm made no
// cpuacct cgroup.
func statCgroups(cg map[string]string, owned string, ownedV2 bool) map[string]string {
	out := maps.Clone(cg)
	if _, ok := out["unified"]; !ok && owned != "" && ownedV2 {
		out["unified"] = owned
	}
	return out
}

// gpuIDs names a job's GRES indices as its meter's GPU source matches them: by the
// device Slurm numbered so (GPUIndex slurmd, the default: slurmd -G's order, which
// covers gres.conf's File= lines, AutoDetect and a node with NVIDIA's and AMD's GPUs);
// else as NVML's index (with AutoDetect=nvml Slurm orders GPUs as NVML does, the AMD
// GPUs after them as package measure numbers them), or the device's minor number
// (GPUIndex=minor: File=/dev/nvidiaN lines). Early in the job, slurmd not answered yet
// is waited for.
func gpuIDs(gpus []int, n specNode, early bool) ([]string, error) {
	var order []gres.GPU
	if (n.GPUIndex == "" || n.GPUIndex == "slurmd") && n.GPUOrder != nil {
		o, ready, err := n.GPUOrder()
		if !ready && early {
			return nil, fmt.Errorf("%w: Slurm's order of the node's GPUs (slurmd -G) not read yet", errNotYet)
		}
		if err == nil {
			order = o
		}
	}
	ids := make([]string, 0, len(gpus))
	for _, g := range gpus {
		id := strconv.Itoa(g)
		switch {
		case g < len(order) && order[g].ID() != "":
			id = order[g].ID()
		case n.GPUIndex == "minor":
			id = "minor:" + id
		}
		ids = append(ids, id)
	}
	return ids, nil
}
