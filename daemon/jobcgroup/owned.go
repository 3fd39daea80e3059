package jobcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/persyst/persyst/hostfs"
	"golang.org/x/sys/unix"
)

// PerfHierarchy returns the hierarchy where persyst can create its own cgroups for perf
// events in cgroup mode: a v1 hierarchy with the perf_event controller, else the cgroup v2
// hierarchy (perf_event is implicit there). ok is false when neither is mounted.
func PerfHierarchy(mounts []Mount) (m Mount, ok bool) {
	for _, x := range mounts {
		if !x.IsV2 {
			for _, c := range x.Ctrls {
				if c == "perf_event" {
					return x, true
				}
			}
		}
	}
	for _, x := range mounts {
		if x.IsV2 {
			return x, true
		}
	}
	return Mount{}, false
}

// Create makes the cgroup directory dir (as seen in the mount namespace) under the root,
// with its parents, and returns it. An existing directory is fine (a daemon restart).
// Every component is created 0755 and checked to be a directory, not a link.
func Create(h hostfs.FS, dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("create cgroup %q: not a clean absolute path", dir)
	}
	p := h.Path(dir)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", p, err)
	}
	st, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", p, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("create cgroup %s: not a directory", p)
	}
	return nil
}

// Procs returns the PIDs listed in dir's cgroup.procs (not its descendants').
func Procs(h hostfs.FS, dir string) ([]string, error) {
	p := h.Path(dir, "cgroup.procs")
	b, err := hostfs.ReadRegular(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return strings.Fields(string(b)), nil
}

// Join moves pid into the cgroup dir.
func Join(h hostfs.FS, dir string, pid int) error {
	p := h.Path(dir, "cgroup.procs")
	f, err := os.OpenFile(p, os.O_WRONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("join %s: %w", p, err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%d", pid); err != nil {
		return fmt.Errorf("join %s: pid %d: %w", p, pid, err)
	}
	return nil
}

// Remove removes the cgroup directory dir (and empty children). Processes still in it
// are first moved to the hierarchy's root cgroup (mount), so that a straggler never keeps
// a cgroup of persyst's alive; then rmdir is retried for up to wait, because the kernel
// keeps a cgroup busy briefly after its last task exited. A missing dir is not an error.
func Remove(h hostfs.FS, mount, dir string, wait time.Duration) error {
	root := h.Path(dir)
	if _, err := os.Lstat(root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// Children first (deepest first).
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		rel := h.Rel(dirs[i])
		if pids, err := Procs(h, rel); err == nil {
			for _, pid := range pids {
				var n int
				if _, err := fmt.Sscanf(pid, "%d", &n); err == nil {
					if err := Join(h, mount, n); err != nil && !errors.Is(err, unix.ESRCH) {
						errs = append(errs, err)
					}
				}
			}
		}
		deadline := time.Now().Add(wait)
		for {
			err := unix.Rmdir(dirs[i])
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
