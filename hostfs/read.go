package hostfs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is the error for a file that is not a regular file (a FIFO, a device,
// a directory, a symlink): the kernel's files under /proc, /sys and the cgroup trees are
// all regular, and something else in their place is refused rather than read.
var ErrNotRegular = errors.New("not a regular file")

// MaxRead bounds one file read by ReadRegular (cgroup.procs of a big job is the largest).
const MaxRead = 4 << 20

// ReadRegular reads the regular file at path without ever blocking on it: it is opened
// non-blocking and without following a final symlink, checked to be a regular file, and
// read up to MaxRead bytes (more is an error). Errors name the path.
func ReadRegular(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("read %s: %w", path, ErrNotRegular)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxRead+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxRead {
		return nil, fmt.Errorf("read %s: more than %d bytes", path, MaxRead)
	}
	return b, nil
}
