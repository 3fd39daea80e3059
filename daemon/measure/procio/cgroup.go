package procio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/persyst/persyst/hostfs"
)

// ListProcs returns the PIDs in the cgroup.procs of cgroupDir and of all its descendant
// directories, deduplicated and sorted. cgroupDir is an absolute path as seen in the mount
// namespace (as jobcgroup.Find returns it), resolved under the root.
//
// A descendant that vanishes during the walk (a step ended) is skipped. cgroupDir itself
// missing is an error wrapping fs.ErrNotExist (the job ended). A threaded cgroup's
// cgroup.procs cannot be read (EOPNOTSUPP); its processes are listed by its thread-domain
// ancestor, so it is skipped. Other errors (malformed cgroup.procs, permission) are
// returned joined, with the PIDs that could be read.
func ListProcs(h hostfs.FS, cgroupDir string) ([]int, error) {
	w := walker{root: h.Root()}
	if err := w.walk(cgroupDir, true); err != nil {
		return nil, err
	}
	slices.Sort(w.pids)
	return slices.Compact(w.pids), errors.Join(w.errs...)
}

// walker lists the processes of a cgroup tree with raw system calls (hostfs.ReadInto,
// hostfs.Subdirs), into buffers reused across the tree.
type walker struct {
	root       string
	pids       []int
	errs       []error
	buf, dents []byte
}

// vanished reports whether err means the cgroup directory or file is gone: ENOENT, or
// ENODEV for a file of a cgroup removed while open.
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// walk reads dir's cgroup.procs and descends into its subdirectories. Only an error about
// the top directory itself (vanished, not a directory) is returned; the rest is collected
// in w.errs.
func (w *walker) walk(dir string, top bool) error {
	file := filepath.Join(dir, "cgroup.procs")
	var err error
	w.buf, err = hostfs.ReadInto(filepath.Join(w.root, file), w.buf)
	switch {
	case err == nil:
		var perr error
		w.pids, perr = parseProcs(w.buf, w.pids)
		if perr != nil {
			w.errs = append(w.errs, fmt.Errorf("procio: %s: %w", file, perr))
		}
	case top && errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("procio: cgroup %s: not a directory", dir)
	case vanished(err) && top:
		if _, serr := os.Stat(filepath.Join(w.root, dir)); serr != nil && vanished(serr) {
			return fmt.Errorf("procio: cgroup %s: %w", dir, serr)
		}
		return fmt.Errorf("procio: cgroup %s: no cgroup.procs: not a cgroup directory", dir)
	case vanished(err):
		return nil // the step ended while we walked
	case errors.Is(err, syscall.EOPNOTSUPP):
		// threaded cgroup: its processes are in the thread domain's cgroup.procs
	default:
		w.errs = append(w.errs, fmt.Errorf("procio: %w", err))
	}
	var subdirs []string
	w.dents, err = hostfs.Subdirs(filepath.Join(w.root, dir), w.dents, func(name string) { subdirs = append(subdirs, name) })
	if err != nil {
		if vanished(err) {
			if top {
				return fmt.Errorf("procio: cgroup %s: %w", dir, err)
			}
			return nil
		}
		w.errs = append(w.errs, fmt.Errorf("procio: %w", err))
	}
	for _, name := range subdirs {
		_ = w.walk(filepath.Join(dir, name), false)
	}
	return nil
}

// parseProcs appends the PIDs of a cgroup.procs file (one decimal per line) to dst.
func parseProcs(b []byte, dst []int) ([]int, error) {
	for line := 1; len(b) > 0; line++ {
		var f []byte
		f, b = nextLine(b)
		f = hostfs.TrimSpace(f)
		if len(f) == 0 {
			continue
		}
		n, ok := hostfs.ParseUint(f)
		if !ok || n == 0 || n > 1<<31-1 {
			return dst, fmt.Errorf("line %d: want a pid, got %q", line, f)
		}
		dst = append(dst, int(n))
	}
	return dst, nil
}

func nextLine(b []byte) (line, rest []byte) {
	for i, c := range b {
		if c == '\n' {
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}
