package hostfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ReadInto is ReadRegular into buf (returned grown when it was too small; nil: a new
// one), with raw system calls only: open, fstat, read until the end, close. Unlike a file
// of package os, the file is never registered with Go's poller, which saves three system
// calls on every read of a small kernel file.
func ReadInto(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return buf[:0], &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return buf[:0], &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return buf[:0], fmt.Errorf("read %s: %w", path, ErrNotRegular)
	}
	if cap(buf) == 0 {
		buf = make([]byte, 0, 4096)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			if len(buf) > MaxRead {
				return buf[:0], fmt.Errorf("read %s: more than %d bytes", path, MaxRead)
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return buf[:0], &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			if len(buf) > MaxRead {
				return buf[:0], fmt.Errorf("read %s: more than %d bytes", path, MaxRead)
			}
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// Subdirs calls fn with the name of every subdirectory of the directory path (not "."
// or "..", in the kernel's order), reading the entries with getdents64(2) into buf
// (nil: a new one) and returning it: no poller registration, no per-entry stat (the
// entry type is the file system's; an entry of unknown type is taken as a directory
// if lstat says so).
func Subdirs(path string, buf []byte, fn func(name string)) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return buf, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf, err = SubdirsFD(fd, buf, fn)
	if err != nil {
		return buf, &os.PathError{Op: "readdirent", Path: path, Err: err}
	}
	return buf, nil
}

// SubdirsFD is Subdirs on an open directory, from its current offset.
func SubdirsFD(fd int, buf []byte, fn func(name string)) ([]byte, error) {
	if len(buf) < 8192 {
		buf = make([]byte, 8192)
	}
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return buf, err
		}
		if n <= 0 {
			return buf, nil
		}
		parseDirents(buf[:n], func(name []byte, typ uint8) {
			if bytes.Equal(name, []byte(".")) || bytes.Equal(name, []byte("..")) {
				return
			}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
					return
				}
				typ = unix.DT_DIR
			}
			if typ == unix.DT_DIR {
				fn(string(name))
			}
		})
	}
}

// parseDirents walks linux_dirent64 records (ino u64, off s64, reclen u16, type u8,
// NUL-terminated name), stopping at a malformed one.
func parseDirents(b []byte, fn func(name []byte, typ uint8)) {
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			return
		}
		name := b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		fn(name, b[18])
		b = b[reclen:]
	}
}
