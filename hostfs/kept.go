package hostfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Kept reads one file of the proc file system again and again with one system call: the
// file is kept open and read with pread(2) at offset 0, which makes the kernel generate
// its content anew (/proc/stat, /proc/pressure/*: single-record seq_files). A file on any
// other file system (a test's fixture) is opened, read whole and closed at every Read,
// as ReadInto does, so that a file replaced between reads is read anew. A read that fails
// closes the file: the next opens it again. Kept is not safe for concurrent use.
type Kept struct {
	path string
	fd   int // -1: not open
	buf  []byte
}

// NewKept returns a Kept for path; nothing is opened before the first Read.
func NewKept(path string) *Kept { return &Kept{path: path, fd: -1} }

// Path is the file's path.
func (k *Kept) Path() string { return k.path }

// Read returns the file's content, valid until the next Read. Errors name the path.
func (k *Kept) Read() ([]byte, error) {
	if k.fd >= 0 {
		b, err := k.pread()
		if err == nil {
			return b, nil
		}
		k.Close() // opened again below: a transient failure costs one open
	}
	fd, err := unix.Open(k.path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: k.path, Err: err}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil || sfs.Type != unix.PROC_SUPER_MAGIC {
		_ = unix.Close(fd)
		if k.buf, err = ReadInto(k.path, k.buf); err != nil {
			return nil, err
		}
		return k.buf, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: k.path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("read %s: %w", k.path, ErrNotRegular)
	}
	k.fd = fd
	b, err := k.pread()
	if err != nil {
		k.Close()
		return nil, err
	}
	return b, nil
}

// pread reads the whole file from offset 0 into k.buf (PreadWhole).
func (k *Kept) pread() ([]byte, error) {
	b, buf, err := PreadWhole(k.fd, k.buf)
	k.buf = buf
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: k.path, Err: err}
	}
	return b, nil
}

// PreadWhole reads the whole file at fd from offset 0 into buf (grown, and returned,
// as needed; nil: a new one of 4 KiB). A read shorter than the buffer is the whole
// content: a kernel statistics file (a single-record seq_file) is generated in one piece
// for a read from 0, a regular file ends there; one that fills it is made again with a
// buffer twice as large, up to MaxRead.
func PreadWhole(fd int, buf []byte) (content, grown []byte, err error) {
	if cap(buf) == 0 {
		buf = make([]byte, 4096)
	}
	buf = buf[:cap(buf)]
	for {
		n, err := unix.Pread(fd, buf, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, buf, err
		case n < len(buf):
			return buf[:n], buf, nil
		case len(buf) > MaxRead:
			return nil, buf, fmt.Errorf("more than %d bytes", MaxRead)
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Close closes the file if it is open; a later Read opens it again.
func (k *Kept) Close() error {
	if k.fd < 0 {
		return nil
	}
	err := unix.Close(k.fd)
	k.fd = -1
	if err != nil {
		return &os.PathError{Op: "close", Path: k.path, Err: err}
	}
	return nil
}
