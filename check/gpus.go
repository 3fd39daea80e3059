package check

import (
	"context"
	"fmt"
	"strings"

	"github.com/persyst/persyst/amdgpu"
)

// checkGPUs says which AMD GPUs the daemon will read, and what each gives (NVIDIA's are
// read through persyst-nvml, which says what it found in the daemon's log as it starts).
func checkGPUs(_ context.Context, n *Node) []Result {
	sys := amdgpu.New(n.h)
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
		if d.Partition != "" {
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
