package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")

	// A stale socket (bound, its listener gone without unlinking it) is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	ln, err := Listen(path, 0o660, "test service")
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o660 {
		t.Errorf("mode %v, want 0660", got)
	}

	// A live one is an error that names who answers there.
	if _, err := Listen(path, 0o660, "test service"); err == nil || !strings.Contains(err.Error(), "another test service is answering there") {
		t.Errorf("over a live socket: %v, want an error naming another test service", err)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after Close: %v", err)
	}

	// Anything but a socket is left alone.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, 0o660, "test service"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file: %v, want 'not a socket'", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "data" {
		t.Errorf("the file was touched: %q %v", b, err)
	}
}

func TestListenUmaskNeverWidens(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	ln, err := Listen(filepath.Join(t.TempDir(), "s.sock"), 0o666, "test service")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, _ := os.Stat(ln.Addr().String())
	if got := st.Mode().Perm(); got != 0o666 {
		t.Errorf("mode %v, want the mode asked for, 0666, whatever the umask", got)
	}
}
