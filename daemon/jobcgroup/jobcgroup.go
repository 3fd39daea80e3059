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
	"path"
	"path/filepath"
	"regexp"
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
		for _, rel := range candidates(h, m, node, uid, job) {
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
// slurm or slurmstepd scope directory): only there can a job's cgroup be. A daemon that
// looks for many jobs' cgroups filters the mounts once, then calls FindIn with these.
func WithSlurm(h hostfs.FS, mounts []Mount, node string) []Mount {
	var out []Mount
	for _, m := range mounts {
		if m.IsV2 {
			if len(Scopes(h, m, node)) > 0 {
				out = append(out, m)
			}
			continue
		}
		for _, r := range []string{"slurm_" + node, "slurm"} {
			if isDir(h, m.Path, r) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// Scopes returns the directories, relative to the cgroup v2 mount m, of the scopes
// Slurm's cgroup/v2 puts its step daemons in on node: <prefix>/<slice>/slurmstepd.scope,
// or <node>_slurmstepd.scope where several slurmd share a host. The slice is any
// (CgroupSlice, from Slurm 25.11; system.slice before), and the prefix the parent of PID
// 1's cgroup (Slurm 23.02 and later, for a node in a container; "" on a host).
func Scopes(h hostfs.FS, m Mount, node string) []string {
	prefix := initPrefix(h)
	var slices []string
	if ents, err := os.ReadDir(h.Path(m.Path, prefix)); err == nil {
		for _, e := range ents {
			if e.IsDir() && strings.HasSuffix(e.Name(), ".slice") {
				slices = append(slices, filepath.Join(prefix, e.Name()))
			}
		}
	}
	slices = append(slices, prefix) // a scope right under the root
	var out []string
	for _, sl := range slices {
		for _, sc := range []string{node + "_slurmstepd.scope", "slurmstepd.scope"} {
			if isDir(h, m.Path, filepath.Join(sl, sc)) {
				out = append(out, filepath.Join(sl, sc))
			}
		}
	}
	return out
}

// initPrefix is the parent of PID 1's cgroup v2 path (<root>/proc/1/cgroup), as Slurm's
// cgroup/v2 takes it: "" when PID 1 is at the root or in a child of it (a host:
// /init.scope).
func initPrefix(h hostfs.FS) string {
	b, err := hostfs.ReadRegular(h.Path("proc/1/cgroup"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if d := filepath.Dir(p); d != "/" && d != "." {
				return strings.TrimPrefix(d, "/")
			}
		}
	}
	return ""
}

func isDir(h hostfs.FS, elem ...string) bool {
	var st unix.Stat_t
	return unix.Stat(h.Path(elem...), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// Holds says whether the cgroup path rel, relative to its hierarchy's root (as the
// kernel's log names a task's cgroup), lies in job's cgroup of Slurm's layout on node, on
// cgroup v1 or v2 (below a slurmstepd scope in any slice), whether or not the cgroup still
// exists. A job whose v2 directory is named by its SLUID (Slurm 26.05) is not found by
// its id: the caller matches the directory its meter reads.
func Holds(rel, node string, uid, job uint32) bool {
	for _, c := range candidates(hostfs.FS{}, Mount{}, node, uid, job) {
		c = "/" + c
		if rel == c || strings.HasPrefix(rel, c+"/") {
			return true
		}
	}
	parts := strings.Split(rel, "/")
	want := "job_" + strconv.FormatUint(uint64(job), 10)
	for i := 0; i+1 < len(parts); i++ {
		if isScope(parts[i], node) && parts[i+1] == want {
			return true
		}
	}
	return false
}

// isScope says whether a cgroup directory's name is a slurmstepd scope of node.
func isScope(name, node string) bool {
	return name == "slurmstepd.scope" || name == node+"_slurmstepd.scope"
}

// sluidRE is a Slurm unique job id (Slurm 25.11 and later): 's' and 13 characters of
// Crockford's base 32, the name of a job's cgroup/v2 directory from 26.05 on (unless
// cgroup.conf's CgroupJobIdPaths=yes, 26.05.2 and later).
var sluidRE = regexp.MustCompile(`^s[0-9A-HJKMNP-TV-Z]{13}$`)

// AllJobs is the cgroup that holds all of Slurm's jobs on the node, from one job's
// directory: without its job_<id> (or Slurm 26.05's SLUID) and (cgroup v1) uid_<uid>
// directories ("…/slurm/uid_1000/job_42" → "…/slurm"; v2's "…/slurmstepd.scope/job_42"
// → "…/slurmstepd.scope"). false: the directory is not named as Slurm names a job's.
func AllJobs(jobDir string) (string, bool) {
	d := path.Clean(jobDir)
	if b := path.Base(d); !numbered(b, "job_") && !IsSLUID(b) {
		return "", false
	}
	d = path.Dir(d)
	if numbered(path.Base(d), "uid_") {
		d = path.Dir(d)
	}
	if d == "/" || d == "." {
		return "", false
	}
	return d, true
}

// numbered says whether name is prefix followed by a decimal number.
func numbered(name, prefix string) bool {
	n, ok := strings.CutPrefix(name, prefix)
	if !ok || n == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 64)
	return err == nil
}

// IsSLUID says whether a cgroup directory's name is a SLUID (Slurm 26.05's cgroup/v2
// names a job's directory so, unless CgroupJobIdPaths=yes), not job_<id>.
func IsSLUID(name string) bool { return sluidRE.MatchString(name) }

// JobDir cuts a cgroup path after job's directory: its "job_<id>" component, or on
// cgroup v2 the component right below a slurmstepd scope when it is a SLUID (the path
// of one of the job's processes, which the kernel gives: Slurm names the job there).
func JobDir(path string, job uint32) (string, bool) {
	if dir, ok := cutAfter(path, "job_"+strconv.FormatUint(uint64(job), 10)); ok {
		return dir, true
	}
	parts := strings.Split(path, "/")
	for i := 0; i+1 < len(parts); i++ {
		if strings.HasSuffix(parts[i], "slurmstepd.scope") && sluidRE.MatchString(parts[i+1]) {
			return strings.Join(parts[:i+2], "/"), true
		}
	}
	return "", false
}

func candidates(h hostfs.FS, m Mount, node string, uid, job uint32) []string {
	j := "job_" + strconv.FormatUint(uint64(job), 10)
	if m.IsV2 {
		var out []string
		for _, sc := range Scopes(h, m, node) {
			out = append(out, filepath.Join(sc, j))
		}
		return out
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
