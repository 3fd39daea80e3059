package sdnotify

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestServingWithoutWatchdog: a unit without WatchdogSec still hears READY=1 and, when the
// service stops, STOPPING=1.
func TestServingWithoutWatchdog(t *testing.T) {
	ln := notifySocket(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	Serving(ctx, zerolog.Nop())
	buf := make([]byte, 64)
	for _, want := range []string{"READY=1", "STOPPING=1"} {
		if want == "STOPPING=1" {
			cancel()
		}
		ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := ln.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("got %q (%v), want %s", buf[:n], err, want)
		}
	}
}

// TestStoppingBeforeExit: the function Serving returns sends STOPPING=1 at once, before
// the service's process could exit, and only once whoever comes first (it or the end of
// ctx).
func TestStoppingBeforeExit(t *testing.T) {
	ln := notifySocket(t)
	ctx, cancel := context.WithCancel(context.Background())
	stopping := Serving(ctx, zerolog.Nop())
	stopping() // as the service returns, ctx not yet done
	cancel()
	stopping()
	buf := make([]byte, 64)
	var got []string
	for {
		ln.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := ln.Read(buf)
		if err != nil {
			break
		}
		got = append(got, string(buf[:n]))
	}
	if want := []string{"READY=1", "STOPPING=1"}; !slices.Equal(got, want) {
		t.Errorf("notifications %q, want %q", got, want)
	}
}

// notifySocket is a socket systemd would listen on, named in NOTIFY_SOCKET, without a
// watchdog.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "")
	return ln
}
