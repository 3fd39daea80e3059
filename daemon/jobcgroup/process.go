package jobcgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/persyst/persyst/hostfs"
)

// OfProcess returns the cgroup directories of job that process pid is in, per hierarchy
// key, read from <root>/proc/PID/cgroup and resolved through the process's own mount
// table (<root>/proc/PID/mountinfo), so the paths are those the process sees.
// slurmstepd puts itself into its job's cgroups before it sends a step's start, so the
// daemon learns them from the sender's pid (SO_PEERCRED), without trusting the job's
// environment or the message. Only the job's directories are returned (JobDir: its
// "job_<job>" component, or on cgroup v2 the SLUID directory Slurm 26.05 names it by).
func OfProcess(h hostfs.FS, pid int, job uint32) (map[string]string, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: not a process", pid)
	}
	memb, byKey, err := membership(h, "proc/"+strconv.Itoa(pid))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for key, path := range memb {
		m, ok := byKey[key]
		if !ok {
			continue
		}
		if dir, ok := JobDir(path, job); ok {
			out[key] = filepath.Join(m.Path, dir)
		}
	}
	return out, nil
}

// Own returns the directory (as h's path) of the cgroup this process is in on the
// cgroup v2 hierarchy, read from <root>/proc/self; "" where none is mounted.
func Own(h hostfs.FS) (string, error) {
	memb, byKey, err := membership(h, "proc/self")
	if err != nil {
		return "", err
	}
	path, ok := memb["unified"]
	m, mounted := byKey["unified"]
	if !ok || !mounted {
		return "", nil
	}
	return h.Path(m.Path, path), nil
}

// membership reads the process proc's cgroup per hierarchy key (<root>/proc/PID/cgroup)
// and the mounts they resolve through (its own mount table, so that the paths are those
// the process sees), by key.
func membership(h hostfs.FS, proc string) (map[string]string, map[string]Mount, error) {
	p := h.Path(proc + "/mountinfo")
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	mounts, err := parseMountinfo(f)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	p = h.Path(proc + "/cgroup")
	f, err = os.Open(p)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	memb, err := parseProcCgroup(f)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	byKey := map[string]Mount{}
	for _, m := range mounts {
		byKey[m.Key] = m
	}
	return memb, byKey, nil
}
