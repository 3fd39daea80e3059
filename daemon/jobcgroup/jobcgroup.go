// Package jobcgroup finds the cgroup directories Slurm created for a job, on cgroup v1
// (slurm[_<node>]/uid_U/job_J under each controller) and v2 (…/slurmstepd.scope/job_J,
// or <node>_slurmstepd.scope with several slurmd on one host).
//
// The filesystem root is injected (hostfs.FS), so tests run on fixture trees; the mount table is
// read from <root>/proc/self/mountinfo by the pure parseMountinfo.
package jobcgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
)

// Mount is one cgroup hierarchy.
type Mount struct {
	// Key names the hierarchy: its controllers joined by "," ("cpu,cpuacct"), "name=X"
	// for a named v1 hierarchy, or "unified" for cgroup v2.
	Key   string
	Path  string // mount point, as the kernel reports it
	IsV2  bool
	Ctrls []string
}

// Mounts returns the cgroup hierarchies mounted in this mount namespace.
func Mounts(h hostfs.FS) ([]Mount, error) {
	p := h.Path("proc/self/mountinfo")
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	m, err := parseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return m, nil
}

// parseMountinfo extracts cgroup and cgroup2 mounts from /proc/PID/mountinfo
// (proc(5): fields before " - " then fstype, source, super options).
func parseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			return nil, fmt.Errorf("line %d: no ' - ' separator", line)
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			return nil, fmt.Errorf("line %d: too few fields", line)
		}
		mnt := unescape(f[4])
		var m Mount
		switch g[0] {
		case "cgroup2":
			m = Mount{Key: "unified", Path: mnt, IsV2: true}
		case "cgroup":
			if len(g) < 3 {
				return nil, fmt.Errorf("line %d: cgroup mount without options", line)
			}
			for _, o := range strings.Split(g[2], ",") {
				switch {
				case strings.HasPrefix(o, "name="):
					m.Ctrls = append(m.Ctrls, o)
				case o == "rw" || o == "ro" || strings.Contains(o, "=") || o == "noprefix" || o == "clone_children" || o == "xattr" || o == "cpuset_v2_mode" || o == "favordynmods":
				default:
					m.Ctrls = append(m.Ctrls, o)
				}
			}
			if len(m.Ctrls) == 0 {
				continue
			}
			sort.Strings(m.Ctrls)
			m.Key = strings.Join(m.Ctrls, ",")
			m.Path = mnt
		default:
			continue
		}
		// A hierarchy may be mounted twice; keep the first (the canonical) mount.
		if seen[m.Key] {
			continue
		}
		seen[m.Key] = true
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// unescape undoes the octal escapes (\040 for space, ...) the kernel uses in mountinfo.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Find returns, per hierarchy key, the directory of the job's cgroup that exists now.
// A job without cgroups (not started yet, or already gone) gives an empty map, not an error.
func Find(h hostfs.FS, node string, uid, job uint32) (map[string]string, error) {
	mounts, err := Mounts(h)
	if err != nil {
		return nil, err
	}
	return FindIn(h, mounts, node, uid, job), nil
}

// FindIn is Find on the hierarchies mounts (as Mounts returned them): a caller that looks
// for many jobs reads the mount table once.
func FindIn(h hostfs.FS, mounts []Mount, node string, uid, job uint32) map[string]string {
	out := map[string]string{}
	for _, m := range mounts {
		for _, rel := range candidates(m, node, uid, job) {
			dir := filepath.Join(m.Path, rel)
			var st unix.Stat_t // not os.Stat: the daemon looks at every job's cgroups every 10 s
			if err := unix.Stat(h.Path(dir), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				out[m.Key] = dir
				break
			}
		}
	}
	return out
}

// WithSlurm returns the mounts where Slurm's cgroup layout exists now (its slurm_<node>,
// slurm or slurmstepd.scope directory): only there can a job's cgroup be. A daemon that
// looks for many jobs' cgroups filters the mounts once, then calls FindIn with these.
func WithSlurm(h hostfs.FS, mounts []Mount, node string) []Mount {
	var out []Mount
	for _, m := range mounts {
		roots := []string{"slurm_" + node, "slurm"}
		if m.IsV2 {
			roots = []string{"system.slice/" + node + "_slurmstepd.scope", "system.slice/slurmstepd.scope", node + "_slurmstepd.scope", "slurmstepd.scope"}
		}
		for _, r := range roots {
			var st unix.Stat_t
			if err := unix.Stat(h.Path(m.Path, r), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// Holds says whether the cgroup path rel, relative to its hierarchy's root (as the
// kernel's log names a task's cgroup), lies in job's cgroup of Slurm's layout on node, on
// cgroup v1 or v2, whether or not the cgroup still exists.
func Holds(rel, node string, uid, job uint32) bool {
	for _, v2 := range []bool{false, true} {
		for _, c := range candidates(Mount{IsV2: v2}, node, uid, job) {
			c = "/" + c
			if rel == c || strings.HasPrefix(rel, c+"/") {
				return true
			}
		}
	}
	return false
}

func candidates(m Mount, node string, uid, job uint32) []string {
	j := "job_" + strconv.FormatUint(uint64(job), 10)
	if m.IsV2 {
		return []string{
			filepath.Join("system.slice", node+"_slurmstepd.scope", j),
			filepath.Join("system.slice", "slurmstepd.scope", j),
			filepath.Join(node+"_slurmstepd.scope", j),
			filepath.Join("slurmstepd.scope", j),
		}
	}
	u := "uid_" + strconv.FormatUint(uint64(uid), 10)
	return []string{
		filepath.Join("slurm_"+node, u, j),
		filepath.Join("slurm", u, j),
	}
}

// cutAfter returns path up to and including the component equal to comp.
func cutAfter(path, comp string) (string, bool) {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if p == comp {
			return strings.Join(parts[:i+1], "/"), true
		}
	}
	return "", false
}

// parseProcCgroup parses /proc/PID/cgroup ("hierarchy-ID:controllers:path" per line) into
// hierarchy key → path, with keys as Mount.Key ("unified" for the v2 line "0::path").
func parseProcCgroup(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		if t == "" {
			continue
		}
		parts := strings.SplitN(t, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("line %d: want hierarchy:controllers:path, got %q", line, t)
		}
		key := parts[1]
		if parts[0] == "0" && key == "" {
			key = "unified"
		} else {
			c := strings.Split(key, ",")
			sort.Strings(c)
			key = strings.Join(c, ",")
		}
		if key == "" {
			return nil, fmt.Errorf("line %d: empty controller list", line)
		}
		out[key] = parts[2]
	}
	return out, sc.Err()
}
