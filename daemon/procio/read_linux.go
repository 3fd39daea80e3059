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
type pidReader struct {
	path   []byte // "<root>/proc/<pid>\x00"
	prefix int    // len("<root>/proc/")
	buf    [4096]byte
}

// Names of the files in /proc/PID, NUL-terminated for openat(2).
var (
	cStat = []byte("stat\x00")
	cIO   = []byte("io\x00")
)

func newPidReader(root string) pidReader {
	p := filepath.Join(root, "proc") + "/"
	return pidReader{path: []byte(p), prefix: len(p)}
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
	r.path = strconv.AppendInt(r.path[:r.prefix], int64(pid), 10)
	r.path = append(r.path, 0)
	dir, errno := openat(unix.AT_FDCWD, r.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if errno != 0 {
		return st, v, classify(errno), r.fail(pid, "", errno)
	}
	defer unix.Close(dir)

	n, errno := r.readAt(dir, cStat)
	if errno != 0 || n == 0 {
		return st, v, classify(errno), r.fail(pid, "stat", errno)
	}
	st, err = parseStatBytes(r.buf[:n])
	if err != nil {
		return st, v, readFailed, &fileError{pidPath(pid, "stat"), err}
	}
	n, errno = r.readAt(dir, cIO)
	if errno != 0 || n == 0 {
		return st, v, classify(errno), r.fail(pid, "io", errno)
	}
	v, err = parseIOBytes(r.buf[:n])
	if err != nil {
		return st, v, readFailed, &fileError{pidPath(pid, "io"), err}
	}
	return st, v, readOK, nil
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

// readAt reads the whole file name (NUL-terminated) in directory dir into r.buf.
func (r *pidReader) readAt(dir int, name []byte) (int, unix.Errno) {
	fd, errno := openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC)
	if errno != 0 {
		return 0, errno
	}
	defer unix.Close(fd)
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
