package cgstats

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
)

// MaxOpenFiles bounds the files one Files keeps open. A job has at most a dozen statistics
// files per hierarchy; beyond the bound, files are opened and closed at every read.
const MaxOpenFiles = 64

// errKnownAbsent is the error for a file that Files found absent in a cgroup directory
// that exists: it is not looked for again until Recheck.
var errKnownAbsent = fmt.Errorf("%w (found absent before)", fs.ErrNotExist)

// Files reads one job's cgroups at every cycle with few system calls: the statistics
// files of cgroup filesystems are kept open and read again with pread(2) at offset 0,
// which makes the kernel generate their content anew; files found absent in a directory
// that exists are remembered as such until Recheck. The file descriptors are raw
// (O_CLOEXEC), never registered with Go's poller: a read is one system call.
//
// A directory no longer in the paths given to Read has its files closed; so has one whose
// cgroup was removed (a read fails with ENODEV): the next Read opens them again, and a
// cgroup Slurm re-created at the same path is read from its new files. Close closes
// everything. Files on other file systems (test fixtures) are opened at every read.
// Files is not safe for concurrent use.
type Files struct {
	r      *Reader
	dirs   map[string]*dirFiles
	open   int
	buf    []byte
	closed bool // Close was called: later reads keep nothing open
	sc     scratch
}

// dirFiles is what Files holds for one cgroup directory.
type dirFiles struct {
	fds    map[string]int    // file name → open fd
	absent map[string]bool   // file names found absent
	paths  map[string]string // file name → dir/name, for notes
}

// Files returns an empty set of kept files for one job's cgroups.
func (r *Reader) Files() *Files {
	return &Files{r: r, dirs: map[string]*dirFiles{}}
}

// Read is Reader.Read through the kept files. The Stats' Missing notes are valid until
// the next Read (their array is reused).
func (f *Files) Read(paths map[string]string) (Stats, error) {
	for dir := range f.dirs {
		if !hasDir(paths, dir) {
			f.drop(dir)
		}
	}
	return f.r.read(paths, f, &f.sc)
}

func hasDir(paths map[string]string, dir string) bool {
	for _, d := range paths {
		if d == dir {
			return true
		}
	}
	return false
}

// Recheck forgets the files found absent: the next Read looks for them again (the job's
// cgroups were found again, and a controller may have been enabled since).
func (f *Files) Recheck() {
	for _, d := range f.dirs {
		clear(d.absent)
	}
}

// OpenFiles returns how many file descriptors f holds.
func (f *Files) OpenFiles() int { return f.open }

// Close closes every kept file. Reads after Close still work, with every file opened and
// closed again.
func (f *Files) Close() error {
	f.closed = true
	var errs []error
	for dir := range f.dirs {
		errs = append(errs, f.drop(dir))
	}
	return errors.Join(errs...)
}

// drop closes dir's files and forgets what was found there.
func (f *Files) drop(dir string) error {
	d := f.dirs[dir]
	if d == nil {
		return nil
	}
	var errs []error
	for name, fd := range d.fds {
		if err := unix.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("cgstats: close %s: %w", filepath.Join(dir, name), err))
		}
	}
	f.open -= len(d.fds)
	delete(f.dirs, dir)
	return errors.Join(errs...)
}

func (f *Files) dir(dir string) *dirFiles {
	d := f.dirs[dir]
	if d == nil {
		d = &dirFiles{fds: map[string]int{}, absent: map[string]bool{}, paths: map[string]string{}}
		f.dirs[dir] = d
	}
	return d
}

// path implements source: dir/name, remembered while dir is known.
func (f *Files) path(dir, name string) string {
	d := f.dirs[dir]
	if d == nil {
		return filepath.Join(dir, name)
	}
	p, ok := d.paths[name]
	if !ok {
		p = filepath.Join(dir, name)
		d.paths[name] = p
	}
	return p
}

// read implements source. The content is f's scratch buffer.
func (f *Files) read(dir, name string) ([]byte, error) {
	if d := f.dirs[dir]; d != nil {
		if d.absent[name] {
			return nil, errKnownAbsent
		}
		if fd, ok := d.fds[name]; ok {
			b, err := f.pread(fd)
			if err != nil {
				// The cgroup was removed (ENODEV) or the file broke: start afresh.
				_ = f.drop(dir)
				return nil, &fs.PathError{Op: "read", Path: filepath.Join(f.r.fs.Root(), dir, name), Err: err}
			}
			return b, nil
		}
	}
	p := filepath.Join(f.r.fs.Root(), dir, name)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			var st unix.Stat_t
			if unix.Stat(filepath.Join(f.r.fs.Root(), dir), &st) == nil {
				f.dir(dir).absent[name] = true
			} else {
				_ = f.drop(dir) // the cgroup is gone: so is what was found in it
			}
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	keep := false
	defer func() {
		if !keep {
			_ = unix.Close(fd)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("read %s: %w", p, hostfs.ErrNotRegular)
	}
	b, err := f.pread(fd)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	var sfs unix.Statfs_t
	if !f.closed && f.open < MaxOpenFiles && unix.Fstatfs(fd, &sfs) == nil && (sfs.Type == unix.CGROUP_SUPER_MAGIC || sfs.Type == unix.CGROUP2_SUPER_MAGIC) {
		keep = true
		f.dir(dir).fds[name] = fd
		f.open++
	}
	return b, nil
}

// pread reads the whole file at fd from offset 0 into f.buf (hostfs.PreadWhole).
func (f *Files) pread(fd int) ([]byte, error) {
	b, buf, err := hostfs.PreadWhole(fd, f.buf)
	f.buf = buf
	return b, err
}
