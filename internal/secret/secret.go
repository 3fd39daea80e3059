// Package secret reads the files that hold persyst's passwords (the site store's, the
// BMCs'): only a regular file that its owner alone may read is trusted.
package secret

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Read reads a password file: a regular file, not a link, that neither its
// group nor others may read, owned by root or by the user reading it.
func Read(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("password file %s: not a regular file", path)
	case st.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("password file %s: mode %04o lets others read it; chmod 600", path, st.Mode().Perm())
	case sys != nil && sys.Uid != 0 && int(sys.Uid) != os.Geteuid():
		return "", fmt.Errorf("password file %s: owned by uid %d, want root or the user running persyst", path, sys.Uid)
	case st.Size() > 4096:
		return "", fmt.Errorf("password file %s: %d bytes, want one line", path, st.Size())
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return "", fmt.Errorf("password file %s: %w", path, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" || strings.ContainsAny(pw, "\n") {
		return "", fmt.Errorf("password file %s: want the password alone on one line", path)
	}
	return pw, nil
}
