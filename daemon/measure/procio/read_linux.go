package procio

import (
	"path/filepath"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pidReader reads /proc/PID/stat and /proc/PID/io into reused buffers, without allocating
// on success. Both files are opened relative to one open /proc/PID directory: the
// directory handle pins the process, so if the pid is reused between the two reads the
// second open fails (the old process is gone) instead of reading another process.
//
// The two files of up to MaxKeptPIDs processes stay open and are read again with
// pread(2) (two system calls per process and read instead of eight). A kept file belongs
// to its process, not to its pid: once the process is gone its reads fail with ESRCH,
// even if the pid was reused; the files are then closed and the pid is read anew.
type pidReader struct {
	path   []byte // "<root>/proc/<pid>\x00"
	prefix int    // len("<root>/proc/")
	buf    [4096]byte
	kept   map[int]pidFiles
	closed bool
	// procfs: <root>/proc is the kernel's (0: not known yet, 1: yes, 2: no, e.g. a test
	// fixture, whose files are never kept open).
	procfs int8
}

// pidFiles are the kept descriptors of one process's stat and io.
type pidFiles struct{ stat, io int }

// MaxKeptPIDs bounds the processes per Tracker whose files stay open between reads.
const MaxKeptPIDs = 64

// Names of the files in /proc/PID, NUL-terminated for openat(2).
var (
	cStat = []byte("stat\x00")
	cIO   = []byte("io\x00")
)

func newPidReader(root string) pidReader {
	p := filepath.Join(root, "proc") + "/"
	return pidReader{path: []byte(p), prefix: len(p), kept: map[int]pidFiles{}}
}

// forget closes pid's kept files.
func (r *pidReader) forget(pid int) {
	if k, ok := r.kept[pid]; ok {
		_ = unix.Close(k.stat)
		_ = unix.Close(k.io)
		delete(r.kept, pid)
	}
}

// close closes every kept file; later reads keep none.
func (r *pidReader) close() {
	r.closed = true
	for pid := range r.kept {
		r.forget(pid)
	}
}

// readKept reads pid's kept files; ok is false when they no longer serve (the process is
// gone, or an error): they are closed then, and the caller reads pid anew.
func (r *pidReader) readKept(pid int, k pidFiles) (st procStat, v IO, ok bool, err error) {
	n, errno := r.preadOnce(k.stat)
	if errno != 0 || n == 0 {
		r.forget(pid)
		return st, v, false, nil
	}
	if st, err = parseStatBytes(r.buf[:n]); err != nil {
		r.forget(pid)
		return st, v, true, &fileError{pidPath(pid, "stat"), err}
	}
	n, errno = r.preadOnce(k.io)
	if errno != 0 || n == 0 {
		r.forget(pid)
		return st, v, false, nil
	}
	if v, err = parseIOBytes(r.buf[:n]); err != nil {
		r.forget(pid)
		return st, v, true, &fileError{pidPath(pid, "io"), err}
	}
	return st, v, true, nil
}

// preadOnce reads fd from offset 0 with one pread(2): /proc/PID/{stat,io} are
// single-record seq_files, generated anew at offset 0 and returned whole.
func (r *pidReader) preadOnce(fd int) (int, unix.Errno) {
	for {
		n, err := unix.Pread(fd, r.buf[:], 0)
		if err == nil {
			if n == len(r.buf) {
				return 0, unix.EFBIG
			}
			return n, 0
		}
		e, ok := err.(unix.Errno)
		if !ok {
			return 0, unix.EIO
		}
		if e != unix.EINTR {
			return 0, e
		}
	}
}

// readResult says what happened to one process's read.
type readResult int

const (
	readOK     readResult = iota
	readGone              // the process no longer exists (or never did)
	readFailed            // could not read it; the error says why
)

// read reads pid's stat and io. On readFailed, err names the file; malformed content is
// wrapped as a parse error.
func (r *pidReader) read(pid int) (st procStat, v IO, res readResult, err error) {
	if k, ok := r.kept[pid]; ok {
		st, v, ok, err := r.readKept(pid, k)
		if err != nil {
			return st, v, readFailed, err
		}
		if ok {
			return st, v, readOK, nil
		}
	}
	r.path = strconv.AppendInt(r.path[:r.prefix], int64(pid), 10)
	r.path = append(r.path, 0)
	dir, errno := openat(unix.AT_FDCWD, r.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if errno != 0 {
		return st, v, classify(errno), r.fail(pid, "", errno)
	}
	defer unix.Close(dir)

	if r.procfs == 0 {
		r.procfs = 2
		var sfs unix.Statfs_t
		if unix.Fstatfs(dir, &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC {
			r.procfs = 1
		}
	}
	keep := !r.closed && r.procfs == 1 && len(r.kept) < MaxKeptPIDs
	sfd, n, errno := r.readAt(dir, cStat, keep)
	if errno != 0 || n == 0 {
		return st, v, classify(errno), r.fail(pid, "stat", errno)
	}
	st, err = parseStatBytes(r.buf[:n])
	if err != nil {
		closeFD(sfd)
		return st, v, readFailed, &fileError{pidPath(pid, "stat"), err}
	}
	ifd, n, errno := r.readAt(dir, cIO, keep)
	if errno != 0 || n == 0 {
		closeFD(sfd)
		return st, v, classify(errno), r.fail(pid, "io", errno)
	}
	v, err = parseIOBytes(r.buf[:n])
	if err != nil {
		closeFD(sfd)
		closeFD(ifd)
		return st, v, readFailed, &fileError{pidPath(pid, "io"), err}
	}
	if keep {
		r.kept[pid] = pidFiles{stat: sfd, io: ifd}
	}
	return st, v, readOK, nil
}

func closeFD(fd int) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

// classify maps a read error to a result: ENOENT and ESRCH (and an empty read, errno 0)
// mean the process is gone.
func classify(errno unix.Errno) readResult {
	switch errno {
	case 0, unix.ENOENT, unix.ESRCH:
		return readGone
	}
	return readFailed
}

// fail builds the error for a failed read; nil when the process is merely gone.
func (r *pidReader) fail(pid int, name string, errno unix.Errno) error {
	if classify(errno) == readGone {
		return nil
	}
	return &fileError{pidPath(pid, name), errno}
}

// readAt reads the whole file name (NUL-terminated) in directory dir into r.buf. With
// keep, the file stays open and its descriptor is returned (else -1).
func (r *pidReader) readAt(dir int, name []byte, keep bool) (kept, n int, errno unix.Errno) {
	fd, errno := openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC)
	if errno != 0 {
		return -1, 0, errno
	}
	n, errno = r.readFD(fd)
	if keep && errno == 0 && n > 0 {
		return fd, n, 0
	}
	_ = unix.Close(fd)
	return -1, n, errno
}

// readFD reads the whole of fd (from its offset) into r.buf.
func (r *pidReader) readFD(fd int) (int, unix.Errno) {
	n := 0
	for n < len(r.buf) {
		m, err := unix.Read(fd, r.buf[n:])
		if err != nil {
			e, ok := err.(unix.Errno)
			if !ok {
				return 0, unix.EIO
			}
			if e == unix.EINTR {
				continue
			}
			return 0, e
		}
		n += m
		if m == 0 || n < len(r.buf) {
			// A short read is the end: /proc/PID/{stat,io} are single-record seq_files,
			// which return all they have in one read, so the read(2) that would return 0
			// is saved.
			return n, 0
		}
	}
	return 0, unix.EFBIG // /proc/PID/stat is < 1 KiB, io < 200 bytes
}

// openat is openat(2) on a NUL-terminated name, without the string copy unix.Openat makes.
func openat(dir int, name []byte, flags int) (int, unix.Errno) {
	for {
		fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dir), uintptr(unsafe.Pointer(&name[0])), uintptr(flags), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(fd), 0
	}
}

// fileError is an error about one file under /proc.
type fileError struct {
	file string
	err  error
}

func (e *fileError) Error() string { return "procio: " + e.file + ": " + e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }
