package check

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/persyst/persyst/collectors/treeauth"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/daemon/measure/powercap"
	"github.com/persyst/persyst/daemon/measure/redfish"
)

// socket is where the plugin sends the node's events: its socket= argument, else where
// the daemon was said to listen (the default of both).
func (n *Node) socket() string {
	for _, l := range n.persyst {
		for _, a := range l.Args {
			if strings.HasPrefix(a, "socket=") && len(l.argErrs) == 0 {
				return l.args.Socket
			}
		}
	}
	return n.o.Socket
}

func checkDaemon(ctx context.Context, n *Node) []Result {
	ctx, cancel := context.WithTimeout(ctx, n.o.Timeout)
	defer cancel()
	sock := n.socket()
	l, err := daemon.List(ctx, sock)
	if err != nil {
		return []Result{fail(fmt.Sprintf("no daemon answers at %s: %v", sock, short(err)),
			"start it (systemctl enable --now persyst-daemon); its log says why it stopped")}
	}
	running := 0
	for _, j := range l.Jobs {
		if j.State == daemon.Running {
			running++
		}
	}
	out := []Result{ok(fmt.Sprintf("the daemon of node %s answers at %s: %s, %d running", l.Node, sock, plural(len(l.Jobs), "job"), running))}
	if n.o.Node != "" && l.Node != n.o.Node {
		out = append(out, warn(fmt.Sprintf("the daemon says it is node %s, this is %s", l.Node, n.o.Node),
			"start the daemon with --node set to the node's Slurm name"))
	}
	switch u := l.Unannounced; {
	case u == nil:
		out = append(out, info("only root and persyst's admins see whether Slurm ran jobs the plugin did not announce: run persyst check as root"))
	case u.Total > 0:
		out = append(out, fail(fmt.Sprintf("%s Slurm ran here since the daemon started never announced by the plugin (latest: %s): not measured",
			plural(u.Total, "job"), jobList(u.Recent)), "slurmd did not load persyst's plugin: see the lines above and slurmd's log, then restart slurmd"))
	default:
		out = append(out, ok("every job Slurm ran here since the daemon started was announced by the plugin"))
	}
	return out
}

func jobList(ids []uint32) string {
	var s []string
	for i := len(ids) - 1; i >= 0 && len(s) < 5; i-- {
		if ids[i] == 0 {
			s = append(s, "a job named by its SLUID")
		} else {
			s = append(s, "job "+fmt.Sprint(ids[i]))
		}
	}
	return strings.Join(s, ", ")
}

func checkCgroups(_ context.Context, n *Node) []Result {
	mounts, err := jobcgroup.Mounts(n.h)
	if err != nil || len(mounts) == 0 {
		return []Result{fail(fmt.Sprintf("no cgroup hierarchy: %v", err), "mount cgroup2 at /sys/fs/cgroup")}
	}
	var out []Result
	if p := n.conf("ProctrackType", ""); p != "" && p != "proctrack/cgroup" {
		out = append(out, warn("ProctrackType="+p+": Slurm puts jobs in no cgroup of their own, persyst measures none",
			"ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup,task/affinity"))
	}
	kind := "cgroup v1"
	var v2 *jobcgroup.Mount
	for i, m := range mounts {
		if m.IsV2 {
			v2 = &mounts[i]
		}
	}
	switch {
	case v2 != nil && len(mounts) == 1:
		kind = "cgroup v2 at " + v2.Path
	case v2 != nil:
		kind = fmt.Sprintf("cgroup v1 (%d hierarchies) with cgroup v2 at %s", len(mounts)-1, v2.Path)
	}
	slurm := jobcgroup.WithSlurm(n.h, mounts, n.o.Node)
	if len(slurm) == 0 {
		out = append(out, info(kind+"; no Slurm job cgroup yet (none until slurmd ran a job)"))
	} else {
		out = append(out, ok(fmt.Sprintf("%s; Slurm's job cgroups there (%s now)", kind, plural(len(jobcgroup.List(n.h, slurm, n.o.Node, nil)), "job"))))
	}
	if v2 != nil && len(mounts) == 1 {
		out = append(out, v2Controllers(n, *v2)...)
	}
	return out
}

// v2Controllers says which controllers the unified hierarchy lacks: what persyst reads
// of them is not measured.
func v2Controllers(n *Node, m jobcgroup.Mount) []Result {
	b, err := os.ReadFile(n.h.Path(m.Path, "cgroup.controllers"))
	if err != nil {
		return []Result{warn(fmt.Sprintf("%s: %v", m.Path, err), "")}
	}
	have := strings.Fields(string(b))
	var missing []string
	for _, c := range []string{"cpu", "cpuset", "memory", "io"} {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return []Result{info("cgroup v2 without the " + strings.Join(missing, ", ") + " controller: what persyst reads there is not measured")}
	}
	return nil
}

func checkCounters(_ context.Context, n *Node) []Result {
	var pmus []string
	for _, name := range []string{"cpu", "cpu_core", "cpu_atom", "armv8_pmuv3_0"} {
		if _, err := os.Stat(n.h.Path("sys/bus/event_source/devices", name, "type")); err == nil {
			pmus = append(pmus, name)
		}
	}
	if len(pmus) == 0 {
		// Not a failure: the digest says what it did not measure.
		return []Result{info("no hardware counters (no PMU, as in most virtual machines): cycles, instructions and cache misses are not measured")}
	}
	return []Result{ok("hardware counters: " + strings.Join(pmus, ", "))}
}

// checkEnergy says from which counters jobs' energy will be read: the node's own meter
// where persyst.conf names its BMC (asked once), and the powercap tree's zones
// (PowercapDir), else the perf power PMU's events, else none.
func checkEnergy(ctx context.Context, n *Node) []Result {
	return append(checkBMC(ctx, n), checkRAPL(n)...)
}

// checkBMC asks the node's BMC (BMCRedfish) for its power once, as the daemon does.
func checkBMC(ctx context.Context, n *Node) []Result {
	c := n.o.Config
	if c.BMCRedfish == "" {
		return nil
	}
	m, err := redfish.New(redfish.Options{URL: strings.ReplaceAll(c.BMCRedfish, "%n", n.o.Node), User: c.BMCUser,
		PasswordFile: c.BMCPasswordFile, CAFile: c.BMCCA, Timeout: c.BMCTimeout})
	if err != nil {
		return []Result{fail(err.Error(), "the node's whole energy is not measured: check the BMC keys in persyst.conf")}
	}
	m.Poll(ctx)
	r, err := m.Last()
	if err != nil {
		return []Result{warn(err.Error(), "the node's whole energy is not measured while its BMC does not answer; jobs' energy is RAPL's alone")}
	}
	return []Result{ok(fmt.Sprintf("%s: %.0f W now; a job's share of a shared node by its CPU time", m.Name(), r.Watts))}
}

// checkRAPL says from which RAPL counters jobs' processors' and memory's energy will be
// read.
func checkRAPL(n *Node) []Result {
	dir := n.h.Path(cmp.Or(n.o.Config.PowercapDir, "/sys/class/powercap"))
	zones, zerr := powercap.Zones(dir)
	if zerr == nil {
		var names []string
		for _, z := range zones {
			names = append(names, z.Name)
		}
		return []Result{ok("RAPL (powercap " + dir + "): " + strings.Join(names, ", ") + "; a job's share of a shared node by its CPU time")}
	}
	if !errors.Is(zerr, powercap.ErrNone) || n.o.Config.PowercapDir != "" {
		return []Result{warn(zerr.Error(), "jobs' energy is not measured: check PowercapDir in persyst.conf")}
	}
	evs, err := perfcg.PowerEvents(n.h)
	if err == nil && len(evs) > 0 {
		var names []string
		for _, e := range evs {
			names = append(names, e.Name)
		}
		return []Result{ok("RAPL (perf power PMU): " + strings.Join(names, ", ") + "; a job's share of a shared node by its CPU time")}
	}
	// Not a failure: the digest says what it did not measure.
	return []Result{info("no RAPL counters (no powercap zones, no power PMU, as in most virtual machines): jobs' energy is not measured")}
}

func checkJobMap(ctx context.Context, n *Node) []Result {
	var out []Result
	for i, s := range n.o.Sources {
		c, cancel := context.WithTimeout(ctx, n.o.Timeout)
		jobs, err := s.Jobs(c)
		cancel()
		switch {
		case err == nil:
			out = append(out, ok(fmt.Sprintf("job map: %s answers (%s)", s.Name(), plural(len(jobs), "job"))))
		case i+1 < len(n.o.Sources):
			out = append(out, warn(fmt.Sprintf("job map: %s: %v", s.Name(), short(err)),
				"persyst falls back on Slurm's commands; check SlurmRestd in persyst.conf"))
		default:
			out = append(out, fail(fmt.Sprintf("job map: %s: %v", s.Name(), short(err)),
				"digests lack what Slurm says of a job (its output file among it): check that slurmctld answers"))
		}
	}
	return out
}

func checkTree(ctx context.Context, n *Node) []Result {
	c := n.o.Config
	if c.Collector == "" && c.Tree == "" {
		return []Result{ok("no agent tree: digests are made on the nodes")}
	}
	mode, err := treeauth.ParseMode(c.TreeAuth)
	if err != nil {
		return []Result{fail("TreeAuth: "+err.Error(), "TreeAuth=tls or munge")}
	}
	if mode == treeauth.Munge && (c.TLSCert != "" || c.TLSKey != "") && c.TreeAuth == "" {
		mode = treeauth.TLS
	}
	switch mode {
	case treeauth.None:
		return []Result{warn("TreeAuth=none: whoever reaches the tree's ports may push and read records", "TreeAuth=tls, with TLSCert, TLSKey and TLSCA")}
	case treeauth.TLS:
		var out []Result
		for _, f := range []string{c.TLSCert, c.TLSKey, c.TLSCA} {
			f = strings.ReplaceAll(f, "%n", n.o.Node)
			if _, err := os.Stat(n.h.Path(f)); err != nil {
				out = append(out, fail(fmt.Sprintf("TreeAuth=tls: %v", err), "install the node's certificate, key and the site's CA"))
			}
		}
		if len(out) == 0 {
			out = append(out, ok("TreeAuth=tls: certificate, key and CA present"))
		}
		return out
	}
	args := []string{"-n"}
	if c.MungeSocket != "" {
		args = append(args, "--socket="+c.MungeSocket)
	}
	if _, err := n.run(ctx, "munge", args...); err != nil {
		fix := "start munged on every node of the tree, or set TreeAuth=tls with TLSCert, TLSKey and TLSCA"
		if n.conf("AuthType", "") == "auth/slurm" {
			fix = "Slurm authenticates with auth/slurm here, without munged: set TreeAuth=tls with TLSCert, TLSKey and TLSCA"
		}
		return []Result{fail("TreeAuth=munge: munged does not answer: "+short(err), fix)}
	}
	return []Result{ok("TreeAuth=munge: munged answers")}
}

// plural is "1 job", "2 jobs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
