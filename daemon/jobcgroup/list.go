package jobcgroup

import (
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
	var buf []byte // getdents's, for every directory read
	var names []string
	add := func(parent string) {
		names = names[:0]
		var err error
		if buf, err = hostfs.Subdirs(h.Path(parent), buf, func(name string) { names = append(names, name) }); err != nil {
			return
		}
		for _, name := range names {
			d := Dir{Name: name, Path: filepath.Join(parent, name)}
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
			if steps == nil || steps(d) {
				d.Steps, buf = hasSteps(h, d.Path, buf)
			}
			if !seen || d.Steps {
				if seen {
					d.Path = prev.Path
				}
				byName[d.Name] = d
			}
		}
	}
	for _, m := range mounts {
		var parents []string
		parents, buf = jobParents(h, m, node, buf)
		for _, parent := range parents {
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
// step's (step_batch, step_0, step_interactive, ...); buf is getdents's, returned.
func hasSteps(h hostfs.FS, dir string, buf []byte) (bool, []byte) {
	found := false
	buf, _ = hostfs.Subdirs(h.Path(dir), buf, func(name string) {
		found = found || strings.HasPrefix(name, "step_") && name != "step_extern"
	})
	return found, buf
}

// jobParents are the directories, relative to m, whose children are node's job cgroups;
// buf is getdents's, returned.
func jobParents(h hostfs.FS, m Mount, node string, buf []byte) ([]string, []byte) {
	if m.IsV2 {
		scopes := Scopes(h, m, node)
		var own []string
		for _, s := range scopes {
			if filepath.Base(s) == node+"_slurmstepd.scope" {
				own = append(own, s)
			}
		}
		if len(own) > 0 {
			return own, buf // several slurmd share this host: the others' jobs are theirs
		}
		return scopes, buf
	}
	base := "slurm_" + node
	if !isDir(h, m.Path, base) {
		base = "slurm"
	}
	var out []string
	buf, _ = hostfs.Subdirs(h.Path(m.Path, base), buf, func(name string) {
		if strings.HasPrefix(name, "uid_") {
			out = append(out, filepath.Join(base, name))
		}
	})
	return out, buf
}
