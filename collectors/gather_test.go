package collectors

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/connectivity"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
)

// TestTreeConnectedAhead: the agents a frontend's ping names are connected to at once,
// before any call, so that a job's end asks its parts over a connection that is up; an
// address named again is not dialed twice.
func TestTreeConnectedAhead(t *testing.T) {
	c, err := New(Config{Name: "c1", Store: storetest.Open(t, store.Options{}), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, c) }()
	defer func() {
		cancel()
		<-done
	}()
	d := newDialer(nil)
	defer d.close()
	addr := ln.Addr().String()
	for range 2 {
		if err := d.setTree([]string{addr}); err != nil {
			t.Fatal(err)
		}
	}
	d.mu.Lock()
	conn, n := d.conns[addr], len(d.conns)
	d.mu.Unlock()
	if conn == nil || n != 1 {
		t.Fatalf("after two pings naming %s: %d connections, want 1 to it", addr, n)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(wctx, s) {
			t.Fatalf("the connection to %s is %s 10 s after the ping, want ready without a call", addr, s)
		}
	}
}
