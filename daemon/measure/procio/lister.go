package procio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
)

// MaxListerDirs bounds the cgroup directories a Lister keeps open (two descriptors each);
// beyond it, directories are opened at every List.
const MaxListerDirs = 32

// Lister lists the processes of one job's cgroup tree at every cycle with few system
// calls: it keeps each cgroup directory of the tree and its cgroup.procs open (raw
// descriptors, never registered with Go's poller), reads cgroup.procs again with pread(2)
// at offset 0, and lists a directory's children only when it has some (the link count of
// a cgroup directory is 2 plus its subdirectories). An idle job of one cgroup costs two
// system calls. Directories that vanish, or are no longer part of the tree, are closed;
// Close closes everything. Directories on other file systems (test fixtures) are read
// as ListProcs reads them. A Lister is not safe for concurrent use.
type Lister struct {
	root   string
	dirs   map[string]*listDir // cgroup directory (as seen in the mount namespace) → its descriptors
	seen   map[string]bool     // directories of the tree at this List
	buf    []byte
	dents  []byte
	closed bool
}

type listDir struct {
	dir, procs int // descriptors of the directory and of its cgroup.procs
}

// NewLister returns a Lister for cgroup directories under the root.
func NewLister(h hostfs.FS) *Lister {
	return &Lister{root: h.Root(), dirs: map[string]*listDir{}, seen: map[string]bool{}}
}

// List is ListProcs through the kept descriptors.
func (l *Lister) List(cgroupDir string) ([]int, error) {
	clear(l.seen)
	w := walker{root: l.root, buf: l.buf, dents: l.dents}
	err := l.walk(&w, cgroupDir, true)
	l.buf, l.dents = w.buf, w.dents
	for dir := range l.dirs {
		if !l.seen[dir] {
			l.drop(dir)
		}
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(w.pids)
	return slices.Compact(w.pids), errors.Join(w.errs...)
}

// OpenFiles returns how many descriptors l holds.
func (l *Lister) OpenFiles() int { return 2 * len(l.dirs) }

// Close closes every kept descriptor; later Lists open and close them again.
func (l *Lister) Close() error {
	l.closed = true
	for dir := range l.dirs {
		l.drop(dir)
	}
	return nil
}

func (l *Lister) drop(dir string) {
	if d := l.dirs[dir]; d != nil {
		_ = unix.Close(d.procs)
		_ = unix.Close(d.dir)
		delete(l.dirs, dir)
	}
}

// walk is walker.walk with kept descriptors.
func (l *Lister) walk(w *walker, dir string, top bool) error {
	d := l.dirs[dir]
	if d == nil {
		d = l.open(dir)
		if d == nil {
			// Not kept: read as ListProcs does, children included (walked without keeping).
			return w.walk(dir, top)
		}
	}
	l.seen[dir] = true
	file := filepath.Join(dir, "cgroup.procs")
	var err error
	w.buf, err = preadAll(d.procs, w.buf)
	switch {
	case err == nil:
		var perr error
		w.pids, perr = parseProcs(w.buf, w.pids)
		if perr != nil {
			w.errs = append(w.errs, fmt.Errorf("procio: %s: %w", file, perr))
		}
	case vanished(err):
		// The cgroup was removed (ENODEV): forget it; a cgroup made again at its path is
		// opened afresh.
		l.drop(dir)
		delete(l.seen, dir)
		if top {
			return w.walk(dir, top)
		}
		return nil
	case errors.Is(err, syscall.EOPNOTSUPP):
		// threaded cgroup: its processes are in the thread domain's cgroup.procs
	default:
		w.errs = append(w.errs, fmt.Errorf("procio: %s: %w", file, err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.dir, &st); err == nil && st.Nlink <= 2 {
		return nil // no subdirectory
	}
	var subdirs []string
	w.dents, err = readDirFD(d.dir, w.dents, func(name string) { subdirs = append(subdirs, name) })
	if err != nil && !vanished(err) {
		w.errs = append(w.errs, fmt.Errorf("procio: %s: %w", dir, err))
	}
	for _, name := range subdirs {
		_ = l.walk(w, filepath.Join(dir, name), false)
	}
	return nil
}

// open opens dir and its cgroup.procs to keep them; nil when they are not kept (closed
// Lister, the bound reached, not a cgroup file system, or an error: the caller reads dir
// the ordinary way, which reports it).
func (l *Lister) open(dir string) *listDir {
	if l.closed || len(l.dirs) >= MaxListerDirs {
		return nil
	}
	p := filepath.Join(l.root, dir)
	dfd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	var sfs unix.Statfs_t
	if unix.Fstatfs(dfd, &sfs) != nil || (sfs.Type != unix.CGROUP_SUPER_MAGIC && sfs.Type != unix.CGROUP2_SUPER_MAGIC) {
		_ = unix.Close(dfd)
		return nil
	}
	pfd, err := unix.Openat(dfd, "cgroup.procs", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(dfd)
		return nil
	}
	d := &listDir{dir: dfd, procs: pfd}
	l.dirs[dir] = d
	return d
}

// preadAll reads the whole file at fd from offset 0 into buf (cgroup.procs: a seq_file of
// one line per process, which may take several reads).
func preadAll(fd int, buf []byte) ([]byte, error) {
	if cap(buf) < 4096 {
		buf = make([]byte, 0, 4096)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			if len(buf) > hostfs.MaxRead {
				return buf[:0], fmt.Errorf("more than %d bytes", hostfs.MaxRead)
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return buf[:0], err
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		if len(buf) < pageSize-maxProcsLine {
			// seq_file fills a page of lines per read, up to the end: a read that stopped
			// with room for another line in its page was the end.
			return buf, nil
		}
	}
}

var pageSize = os.Getpagesize()

// maxProcsLine is the longest line of cgroup.procs: a pid (up to 2^22, 7 digits) and a newline, with margin.
const maxProcsLine = 16

// readDirFD lists the subdirectories of the open directory fd from its start.
func readDirFD(fd int, buf []byte, fn func(name string)) ([]byte, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return buf, err
	}
	return hostfs.SubdirsFD(fd, buf, fn)
}
