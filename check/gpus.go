package check

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/persyst/persyst/amdgpu"
	"github.com/persyst/persyst/gres"
	"github.com/persyst/persyst/hostfs"
)

// checkGPUs says which device each of Slurm's GPU indices is, and which AMD GPUs the
// daemon will read and what each gives (NVIDIA's are read through persyst-nvml, which
// says what it found in the daemon's log as it starts).
func checkGPUs(ctx context.Context, n *Node) []Result {
	return append(checkGRES(ctx, n), checkAMDGPUs(n)...)
}

// checkGRES asks slurmd, as the daemon does, which device each GPU index is.
func checkGRES(ctx context.Context, n *Node) []Result {
	if n.o.RunAll == nil {
		return nil
	}
	if idx := n.o.Config.GPUIndex; idx != "" && idx != "slurmd" {
		return []Result{info(fmt.Sprintf("Slurm's GPU indices are taken as GPUIndex=%s says (persyst.conf)", idx))}
	}
	gpus, err := gres.Start(ctx, gres.Options{Node: n.o.Node, Host: n.h, Run: n.o.RunAll, Timeout: n.o.Timeout}).Wait(ctx)
	if err != nil && !hasGPUs(n) {
		return []Result{info(err.Error() + "; this node has no GPU, so nothing depends on it")}
	}
	if err != nil {
		return []Result{warn(err.Error(), "jobs' GPU indices are taken as NVML's (right with gres.conf AutoDetect=nvml only): "+
			"let the daemon run slurmd -G, or set GPUIndex in persyst.conf (docs/admin.md)")}
	}
	if len(gpus) == 0 {
		return []Result{info("Slurm gives this node no GPUs (slurmd -G lists no gpu GRES)")}
	}
	var said, unknown []string
	for _, g := range gpus {
		if g.ID() == "" {
			unknown = append(unknown, fmt.Sprintf("%d (%s)", g.Index, g.Why))
			continue
		}
		said = append(said, fmt.Sprintf("%d %s", g.Index, strings.Join(g.Files, ",")))
	}
	out := []Result{ok("Slurm's GPU indices (slurmd -G): " + strings.Join(said, ", "))}
	if len(unknown) > 0 {
		out = append(out, warn("Slurm's GPU indices that name no one GPU device: "+strings.Join(unknown, "; "),
			"a job given one is measured by NVML's index (a MIG instance's GPUs are sent by UUID, docs/metrics.md)"))
	}
	return out
}

// hasGPUs says whether the node has a GPU: an NVIDIA device node, or a card the amdgpu
// driver lists.
func hasGPUs(n *Node) bool {
	if nv, _ := filepath.Glob(n.h.Path("/dev/nvidia[0-9]*")); len(nv) > 0 {
		return true
	}
	devs, _ := amdSysfs(n).Devices()
	return len(devs) > 0
}

// checkAMDGPUs says which AMD GPUs the daemon will read, and what each gives.
func checkAMDGPUs(n *Node) []Result {
	sys := amdSysfs(n)
	devs, err := sys.Devices()
	var out []Result
	if err != nil {
		out = append(out, warn(err.Error(), "a card the amdgpu driver lists could not be read: its jobs' GPU values are not measured"))
	}
	if len(devs) == 0 {
		return append(out, info("no AMD GPU (the amdgpu driver lists no card)"))
	}
	_, kfd, kerr := sys.Processes()
	for _, d := range devs {
		now := sys.Read(d)
		var has, lacks []string
		for _, k := range []struct{ key, name string }{{"busy", "busy time"}, {"vram", "memory"}, {"watts", "power"}, {"joules", "energy counter"},
			{"throttle", "throttling"}, {"residency", "throttling"}, {"ras", "RAS errors"}} {
			switch {
			case now.Has[k.key]:
				has = append(has, k.name)
			case now.Why[k.key] != "":
				lacks = append(lacks, fmt.Sprintf("%s (%s)", k.name, now.Why[k.key]))
			}
		}
		name := d.Name
		if name == "" {
			name = "AMD GPU"
		}
		where := fmt.Sprintf("%s at %s (%s", name, d.Bus, d.Card)
		if d.Render >= 0 {
			where += fmt.Sprintf(", /dev/dri/renderD%d", d.Render)
		}
		switch {
		case d.Partitions > 1:
			where += fmt.Sprintf(", partition %d of %d", d.XCP, d.Partitions)
		case d.Partition != "":
			where += ", compute partition " + d.Partition
		}
		where += ")"
		detail := where + ": " + strings.Join(has, ", ")
		switch {
		case kerr != nil:
			lacks = append(lacks, "whose processes use it ("+kerr.Error()+")")
		case !kfd || len(d.GPUIDs) == 0:
			lacks = append(lacks, "whose processes use it (the KFD does not list this GPU: a job's GPU values are not judged, as if shared)")
		}
		if len(lacks) > 0 {
			out = append(out, warn(detail+"; not: "+strings.Join(lacks, "; "), "what is not read is not assessed for jobs on this GPU (docs/metrics.md, GPUs)"))
			continue
		}
		out = append(out, ok(detail+"; processes through the KFD"))
	}
	return out
}

// amdSysfs is the amdgpu driver's sysfs the daemon reads (AMDGPUSysfs, or /sys).
func amdSysfs(n *Node) *amdgpu.Sysfs {
	return amdgpu.New(hostfs.New(n.h.Path(cmp.Or(n.o.Config.AMDGPUSysfs, "/sys"))))
}
