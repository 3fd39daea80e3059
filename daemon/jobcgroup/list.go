package jobcgroup

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/persyst/persyst/hostfs"
)

// Dir is one job's cgroup directory of Slurm's layout.
type Dir struct {
	// Name is the directory's name: job_<id>, or on cgroup v2 from Slurm 26.05 the
	// job's SLUID.
	Name string
	// Path is its absolute path in this mount namespace (the first hierarchy it was
	// found in).
	Path string
	// JobID is the job's id, 0 where the name is a SLUID.
	JobID uint32
	// Steps says whether a step other than the extern step has its cgroup there (in any
	// hierarchy): slurmstepd runs one only once the job's prolog is over.
	Steps bool
}

// List returns the job directories Slurm has on node now in the mounts (WithSlurm's), one
// per job however many hierarchies hold it, sorted by name: under slurm_<node>/uid_*/ (or,
// where no node has its own, slurm/uid_*/) on cgroup v1, and in the node's slurmstepd
// scopes on v2 (<node>_slurmstepd.scope where the host has one, else slurmstepd.scope).
// A directory that cannot be read is skipped: the next call looks again. Steps is looked
// for (a directory read in each hierarchy) only where steps, if not nil, says so of the
// directory.
func List(h hostfs.FS, mounts []Mount, node string, steps func(Dir) bool) []Dir {
	byName := map[string]Dir{}
	add := func(parent string) {
		ents, err := os.ReadDir(h.Path(parent))
		if err != nil {
			return
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			d := Dir{Name: e.Name(), Path: filepath.Join(parent, e.Name())}
			if id, ok := strings.CutPrefix(d.Name, "job_"); ok {
				n, err := strconv.ParseUint(id, 10, 32)
				if err != nil || n == 0 {
					continue
				}
				d.JobID = uint32(n)
			} else if !sluidRE.MatchString(d.Name) {
				continue // slurmstepd's own "system" cgroup, anything else
			}
			prev, seen := byName[d.Name]
			if seen && prev.Steps {
				continue
			}
			d.Steps = (steps == nil || steps(d)) && hasSteps(h, d.Path)
			if !seen || d.Steps {
				if seen {
					d.Path = prev.Path
				}
				byName[d.Name] = d
			}
		}
	}
	for _, m := range mounts {
		for _, parent := range jobParents(h, m, node) {
			add(filepath.Join(m.Path, parent))
		}
	}
	out := make([]Dir, 0, len(byName))
	for _, d := range byName {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// hasSteps says whether the job directory holds a step's cgroup other than the extern
// step's (step_batch, step_0, step_interactive, ...).
func hasSteps(h hostfs.FS, dir string) bool {
	ents, err := os.ReadDir(h.Path(dir))
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step_") && e.Name() != "step_extern" {
			return true
		}
	}
	return false
}

// jobParents are the directories, relative to m, whose children are node's job cgroups.
func jobParents(h hostfs.FS, m Mount, node string) []string {
	if m.IsV2 {
		scopes := Scopes(h, m, node)
		var own []string
		for _, s := range scopes {
			if filepath.Base(s) == node+"_slurmstepd.scope" {
				own = append(own, s)
			}
		}
		if len(own) > 0 {
			return own // several slurmd share this host: the others' jobs are theirs
		}
		return scopes
	}
	base := "slurm_" + node
	if !isDir(h, m.Path, base) {
		base = "slurm"
	}
	ents, err := os.ReadDir(h.Path(m.Path, base))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "uid_") {
			out = append(out, filepath.Join(base, e.Name()))
		}
	}
	return out
}
