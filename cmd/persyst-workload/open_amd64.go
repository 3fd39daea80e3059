package main

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// legacyOpen opens with open(2) itself (Go's own calls use openat).
func legacyOpen(path string, flags int, mode uint32) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	fd, _, errno := unix.Syscall(unix.SYS_OPEN, uintptr(unsafe.Pointer(p)), uintptr(flags), uintptr(mode))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}
