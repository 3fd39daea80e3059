package hostfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/persyst/persyst/internal/testenv"
)

// TestKeptProc: a proc file is kept open and read again whole with the same descriptor,
// however small the buffer it starts with; Close closes it and the next Read opens it
// again.
func TestKeptProc(t *testing.T) {
	const path = "/proc/version" // stable content, generated anew at each read
	want, err := os.ReadFile(path)
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("no %s: %v", path, err))
	}
	k := NewKept(path)
	k.buf = make([]byte, 16) // smaller than the file: the read grows it
	defer k.Close()
	var fd int
	for i := range 3 {
		got, err := k.Read()
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if string(got) != string(want) {
			t.Errorf("read %d = %q, want %q", i, got, want)
		}
		if i == 0 {
			fd = k.fd
		}
		if k.fd < 0 || k.fd != fd {
			t.Errorf("read %d: descriptor %d, want %d kept from the first", i, k.fd, fd)
		}
	}
	if err := k.Close(); err != nil || k.fd != -1 {
		t.Fatalf("Close: %v, descriptor %d", err, k.fd)
	}
	if got, err := k.Read(); err != nil || string(got) != string(want) || k.fd < 0 {
		t.Errorf("read after Close = %q, %v (descriptor %d), want the file, kept again", got, err, k.fd)
	}
}

// TestKeptOtherFS: a file outside /proc (a fixture) is read anew at every Read, so that a
// file replaced between reads is seen; a missing or non-regular file is an error naming
// its path.
func TestKeptOtherFS(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "stat")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
	k := NewKept(p)
	defer k.Close()
	for _, s := range []string{"one\n", strings.Repeat("two ", 3000)} {
		write(s)
		if got, err := k.Read(); err != nil || string(got) != s {
			t.Errorf("Read = %.20q (%d bytes), %v; want %.20q (%d bytes)", got, len(got), err, s, len(s))
		}
		if k.fd != -1 {
			t.Errorf("a file outside /proc kept open (descriptor %d)", k.fd)
		}
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), dir} {
		if _, err := NewKept(bad).Read(); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Read of %s: error %v, want one naming it", bad, err)
		}
	}
}
