package check

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/slurmver"
)

// The oldest and the newest Slurm releases persyst is tested with (slurmver.Tested: the
// Slurm of each Debian release the tests run in); the newest is the newest it is made for.
var (
	oldestTested = slurmver.OldestTested()
	newestTested = slurmver.NewestTested()
)

func checkConfig(_ context.Context, n *Node) []Result {
	switch {
	case n.o.ConfigErr != nil:
		return []Result{fail(n.o.ConfigErr.Error(), "correct the line it names: the daemon does not start with this file")}
	case n.o.ConfigPath == "":
		return []Result{ok("persyst.conf: none, the defaults")}
	}
	if _, err := os.Stat(n.h.Path(n.o.ConfigPath)); err != nil {
		return []Result{ok(n.o.ConfigPath + ": none, the defaults")}
	}
	return []Result{ok(n.o.ConfigPath + " read")}
}

func checkSlurm(_ context.Context, n *Node) []Result {
	var out []Result
	switch r := n.release; {
	case !r.Known():
		return []Result{fail(fmt.Sprintf("Slurm's release is not known: %v", n.releaseErr),
			"run persyst check on a node of the cluster, with Slurm's commands (slurmd, scontrol) on PATH")}
	case r.CompareSeries(oldestTested) < 0:
		out = append(out, warn(fmt.Sprintf("Slurm %s (%s) is older than any persyst is tested with (%s)", r, n.releaseFrom, oldestTested.Series()),
			"upgrade Slurm, or expect what persyst reads of Slurm to be incomplete"))
	case r.CompareSeries(newestTested) > 0:
		out = append(out, warn(fmt.Sprintf("Slurm %s (%s) is newer than any persyst is tested with (%s)", r, n.releaseFrom, newestTested.Series()),
			"check for a persyst release made for it"))
	default:
		out = append(out, ok(fmt.Sprintf("Slurm %s (%s)", r, n.releaseFrom)))
	}
	if n.releaseFrom != "slurmd -V" {
		out = append(out, info("no slurmd on this node: the checks of jobs on a node do not apply (run persyst check on a compute node)"))
	}
	if n.slurmConfErr != nil {
		from := "and no slurm.conf: Slurm's defaults taken"
		if n.slurmConfFrom != "" {
			from = "read " + n.slurmConfFrom + " instead"
		}
		out = append(out, warn(fmt.Sprintf("%v; %s", short(n.slurmConfErr), from),
			"check that slurmctld answers (scontrol ping)"))
	}
	return out
}

func checkPlugstack(_ context.Context, n *Node) []Result {
	if n.stackErr != nil {
		return []Result{fail(n.stackErr.Error(), "make "+n.stackPath+" readable by slurmd (root)")}
	}
	var out []Result
	for _, p := range n.stackProblems {
		out = append(out, warn(p, "correct the line: slurmd reports it in its log too"))
	}
	if len(n.persyst) == 0 {
		fix := fmt.Sprintf("add persyst's line to %s: optional spank_persyst.so", n.stackPath)
		if d := filepath.Join(filepath.Dir(n.stackPath), "plugstack.conf.d"); hasPersystFile(n, d) {
			fix = fmt.Sprintf("persyst's package put its line in %s/: add \"include %s/*.conf\" to %s", d, d, n.stackPath)
		}
		return append(out, fail(fmt.Sprintf("%s (PlugStackConfig) loads no persyst plugin: slurmd does not run it, no job is measured", n.stackPath), fix+", then restart slurmd"))
	}
	if len(n.persyst) > 1 {
		out = append(out, warn(fmt.Sprintf("persyst's plugin is loaded %d times (%s)", len(n.persyst), where(n.persyst)), "keep one line"))
	}
	for _, l := range n.persyst {
		at := fmt.Sprintf("%s:%d", l.File, l.Line)
		for _, err := range l.argErrs {
			out = append(out, fail(fmt.Sprintf("%s: %v: the plugin turns itself off, no job is measured", at, err), "correct the argument, then restart slurmd"))
		}
		if l.Required {
			out = append(out, warn(at+": required: where slurmd cannot load the plugin (after a Slurm upgrade), every job on the node fails to start",
				"write optional: a node without the plugin runs its jobs unmeasured"))
		}
		if len(l.argErrs) == 0 {
			out = append(out, ok(fmt.Sprintf("%s loads %s %s", at, l.Path, strings.Join(l.Args, " "))))
		}
	}
	return out
}

func hasPersystFile(n *Node, dir string) bool {
	m, _ := filepath.Glob(n.h.Path(dir, "*persyst*"))
	return len(m) > 0
}

func where(ls []persystLine) string {
	var w []string
	for _, l := range ls {
		w = append(w, fmt.Sprintf("%s:%d", l.File, l.Line))
	}
	return strings.Join(w, ", ")
}

func checkPlugin(_ context.Context, n *Node) []Result {
	var out []Result
	for _, l := range n.persyst {
		if l.Resolved == "" {
			out = append(out, fail(fmt.Sprintf("%s: no such plugin file (looked in %s)", l.Path, n.pluginDir()),
				"install persyst's package, or correct the path in "+l.File))
			continue
		}
		out = append(out, checkPluginFile(n, l)...)
	}
	return out
}

// checkPluginFile checks what slurmd checks of a plugin before it loads it, and who may
// change it (slurmstepd runs it as root in every job).
func checkPluginFile(n *Node, l persystLine) []Result {
	f := l.Resolved
	if l.infoErr != nil {
		return []Result{fail(l.infoErr.Error(), "reinstall persyst's package")}
	}
	var out []Result
	if w := writableByOthers(n, f); w != "" {
		out = append(out, fail(w+": whoever can change it runs code as root in every job", "chown root:root and chmod go-w "+f+" and its directories"))
	}
	built, slurmd := l.info.Version, n.release
	switch {
	case l.info.Type != "spank":
		out = append(out, fail(fmt.Sprintf("%s is a Slurm %s plugin, not a SPANK plugin", f, l.info.Type), "install persyst's spank_persyst.so"))
	case slurmd.Known() && !built.SameSeries(slurmd):
		out = append(out, fail(fmt.Sprintf("%s was built for Slurm %s; slurmd is %s and skips it (its log: \"Incompatible Slurm plugin\"): no job is measured",
			f, built.Series(), slurmd.Series()),
			fmt.Sprintf("install persyst's package built for Slurm %s, or rebuild it with Slurm %s's headers (make package), then restart slurmd", slurmd.Series(), slurmd.Series())))
	default:
		out = append(out, ok(fmt.Sprintf("%s: SPANK plugin %q built for Slurm %s", f, l.info.Name, built.Series())))
	}
	return out
}

// writableByOthers says who besides root may write the file or a directory above it
// ("": nobody).
func writableByOthers(n *Node, path string) string {
	for p := path; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(n.h.Path(p), &st); err == nil {
			switch {
			case st.Uid != 0:
				return fmt.Sprintf("%s belongs to uid %d", p, st.Uid)
			case st.Mode&0o002 != 0 && st.Mode&unix.S_ISVTX == 0:
				return p + " is writable by everyone"
			case st.Mode&0o020 != 0 && st.Gid != 0:
				return fmt.Sprintf("%s is writable by group %d", p, st.Gid)
			}
		}
		if p == "/" || p == "." {
			return ""
		}
	}
}

// short is an error's first line.
func short(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
