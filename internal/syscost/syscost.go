// Package syscost measures what a small system call costs on this machine: the time a
// 64-byte write(2) to an in-memory file takes (memfd: the page cache, no device), the
// fixed cost of a read or write call whatever its size. It is about 1 µs on today's
// servers and tens of µs under software emulation; the small-request properties weigh
// a job's call counts with it (properties: syscall_seconds).
package syscost

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// rounds and calls bound the measurement: the best of 3 rounds of 2000 calls (a few ms
// on a server; the best round leaves out what preemption added to the others).
const (
	rounds = 3
	calls  = 2000
	size   = 64
)

// Measure returns the time one small write(2) takes here.
func Measure() (time.Duration, error) {
	fd, err := unix.MemfdCreate("persyst-syscost", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	buf := make([]byte, size)
	best := time.Duration(0)
	for range rounds {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return 0, err
		}
		start := time.Now()
		for range calls {
			if n, err := unix.Write(fd, buf); err != nil || n != size {
				if err == nil {
					err = errors.New("short write")
				}
				return 0, err
			}
		}
		if d := time.Since(start) / calls; best == 0 || d < best {
			best = d
		}
	}
	return best, nil
}
