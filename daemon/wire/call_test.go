package wire_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/daemon/wire"
)

// fakeDaemon listens on a unix socket in a temp dir and answers every connection with
// handle. It records the request lines it read.
type fakeDaemon struct {
	path  string
	mu    sync.Mutex
	lines []string
}

// startFake starts a fake daemon that reads one request line per connection and passes
// it to handle.
func startFake(t *testing.T, handle func(c net.Conn, line []byte)) *fakeDaemon {
	t.Helper()
	var d *fakeDaemon
	d = startRawFake(t, func(c net.Conn) {
		line, err := wire.ReadLine(bufio.NewReader(c))
		if err != nil {
			return
		}
		d.mu.Lock()
		d.lines = append(d.lines, string(line))
		d.mu.Unlock()
		handle(c, line)
	})
	return d
}

// startRawFake starts a fake daemon that hands each connection to handle as it is accepted.
func startRawFake(t *testing.T, handle func(c net.Conn)) *fakeDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &fakeDaemon{path: filepath.Join(dir, "s")}
	ln, err := net.Listen("unix", d.path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				handle(c)
			}()
		}
	}()
	return d
}

func (d *fakeDaemon) received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lines...)
}

func answer(rep *wire.Reply) func(net.Conn, []byte) {
	return func(c net.Conn, _ []byte) { _ = wire.WriteMessage(c, rep) }
}

func TestCall(t *testing.T) {
	ev := event(wire.StepStart)
	tests := []struct {
		name    string
		handle  func(c net.Conn, line []byte)
		req     *wire.Request
		want    *wire.Reply
		wantErr []string // substrings; nil means success
	}{
		{
			name:   "ok",
			handle: answer(&wire.Reply{V: 1, OK: true}),
			req:    &wire.Request{Kind: wire.StepStart, Event: ev},
			want:   &wire.Reply{V: 1, OK: true},
		},
		{
			name:   "ok list",
			handle: answer(&wire.Reply{V: 1, OK: true, Node: "node1", Jobs: []byte(`[{"job_id":1}]`)}),
			req:    &wire.Request{Kind: wire.List},
			want:   &wire.Reply{V: 1, OK: true, Node: "node1", Jobs: []byte(`[{"job_id":1}]`)},
		},
		{
			name:    "error reply",
			handle:  answer(&wire.Reply{V: 1, Error: "job_start: field job_id: 0 is not a job id"}),
			req:     &wire.Request{Kind: wire.StepStart, Event: ev},
			want:    &wire.Reply{V: 1, Error: "job_start: field job_id: 0 is not a job id"},
			wantErr: []string{"daemon at", "job_start: field job_id: 0 is not a job id"},
		},
		{
			name:    "garbage reply",
			handle:  func(c net.Conn, _ []byte) { _, _ = c.Write([]byte("not json\n")) },
			req:     &wire.Request{Kind: wire.List},
			wantErr: []string{"reply from"},
		},
		{
			name:    "closed without reply",
			handle:  func(net.Conn, []byte) {},
			req:     &wire.Request{Kind: wire.List},
			wantErr: []string{"reply from", "EOF"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := startFake(t, tc.handle)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := wire.Call(ctx, d.path, tc.req)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
			} else {
				if err == nil {
					t.Fatalf("Call = %+v, nil; want error containing %q", got, tc.wantErr)
				}
				checkContains(t, err, append(tc.wantErr, d.path))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reply mismatch (-want +got):\n%s", diff)
			}
			// The daemon must have received exactly the request, stamped with our version.
			sent := *tc.req
			sent.V = wire.Version
			if diff := cmp.Diff([]string{string(marshal(t, &sent))}, d.received()); diff != "" {
				t.Errorf("request on the wire mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCallServerNeverAnswers(t *testing.T) {
	release := make(chan struct{})
	d := startFake(t, func(net.Conn, []byte) { <-release })
	defer close(release)

	const limit = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	rep, err := wire.Call(ctx, d.path, &wire.Request{Kind: wire.List})
	took := time.Since(start)
	if err == nil {
		t.Fatalf("Call = %+v, nil; want a deadline error", rep)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Call error = %v, want a deadline error", err)
	}
	checkContains(t, err, []string{"reply from " + d.path})
	if took < limit-20*time.Millisecond || took > limit+time.Second {
		t.Errorf("Call returned after %v, want about %v", took, limit)
	}
}

// A cancelled context (no deadline) must also abort a Call that waits for a reply.
func TestCallCancelled(t *testing.T) {
	release := make(chan struct{})
	d := startFake(t, func(net.Conn, []byte) { <-release })
	defer close(release)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := wire.Call(ctx, d.path, &wire.Request{Kind: wire.List})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Call error = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Call did not return after its context was cancelled")
	}
}

func TestCallNoServer(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		path  string
		errno syscall.Errno
	}{
		{"missing socket", filepath.Join(dir, "nope.sock"), syscall.ENOENT},
		{"not a socket", func() string {
			p := filepath.Join(dir, "file")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}(), syscall.ECONNREFUSED},
		{"dead socket", func() string {
			p := filepath.Join(dir, "dead")
			ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			ln.SetUnlinkOnClose(false)
			ln.Close()
			return p
		}(), syscall.ECONNREFUSED},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			rep, err := wire.Call(ctx, tc.path, &wire.Request{Kind: wire.List})
			if err == nil {
				t.Fatalf("Call = %+v, nil; want a connect error", rep)
			}
			if rep != nil {
				t.Errorf("Call returned reply %+v with a connect error", rep)
			}
			checkContains(t, err, []string{tc.path, "connect"})
			if !errors.Is(err, tc.errno) {
				t.Errorf("Call error %q is not %v", err, tc.errno)
			}
		})
	}
}

// stallCtx is a context whose Deadline method stalls once the fake daemon has accepted
// the connection, until that daemon is done with it. Call asks for the deadline right
// after connecting and before writing its request, so this makes the daemon's
// answer-and-close happen before Call's write, deterministically. Before the connection
// exists (while dialing) Deadline only waits briefly for an accept that cannot come.
type stallCtx struct {
	context.Context
	accepted, done <-chan struct{}
}

func (c stallCtx) Deadline() (time.Time, bool) {
	select {
	case <-c.accepted:
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
	case <-time.After(20 * time.Millisecond):
	}
	return time.Time{}, false
}

// The node daemon answers some connections before reading the request: it refuses a peer
// whose uid may not talk to it right after accept, with an error reply, and closes. Call
// must still return that reply's message even when the daemon closed before Call wrote
// its request (the write then fails with EPIPE, but the reply is already there to read).
func TestCallReplyBeforeRequestIsRead(t *testing.T) {
	const msg = "permission denied: uid 65534 may not talk to the persyst daemon"
	tests := []struct {
		name  string
		reply *wire.Reply
		want  *wire.Reply
	}{
		{"refusal", &wire.Reply{V: wire.Version, Error: msg}, &wire.Reply{V: wire.Version, Error: msg}},
		{"other refusal", &wire.Reply{V: wire.Version, Error: "daemon shutting down"}, &wire.Reply{V: wire.Version, Error: "daemon shutting down"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			accepted, done := make(chan struct{}), make(chan struct{})
			var once sync.Once
			d := startRawFake(t, func(c net.Conn) {
				once.Do(func() {
					close(accepted)
					_ = wire.WriteMessage(c, tc.reply)
					c.Close()
					close(done)
				})
			})
			ctx := stallCtx{Context: context.Background(), accepted: accepted, done: done}
			got, err := wire.Call(ctx, d.path, &wire.Request{Kind: wire.List})
			if tc.want.OK && err != nil {
				t.Errorf("Call: %v", err)
			}
			if !tc.want.OK && (err == nil || !strings.Contains(err.Error(), tc.want.Error)) {
				t.Errorf("Call error = %v, want one carrying the daemon's %q", err, tc.want.Error)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reply mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
