package collectors

import (
	"context"
	"net"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/daemon"
)

// serveCollector runs a real collector on a loopback port until the returned stop.
func serveCollector(t *testing.T, name string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), name+".db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := New(Config{Name: name, Store: st, Log: zerolog.Nop()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { Serve(ctx, ln, c); close(done) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			st.Close()
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// TestFrontendRoutesAndReroutes: a frontend over 4 node daemons' route servers and 2
// real collectors balances a 4-node job, two 2-node jobs and a one-node job, pushes the
// routes the balancing decided to every node (the one-node job stays local), and when a
// collector stops answering, the next cycle routes everything to the other.
func TestFrontendRoutesAndReroutes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a1, stop1 := serveCollector(t, "col1")
	a2, _ := serveCollector(t, "col2")
	nodes := []string{"n1", "n2", "n3", "n4"}
	ships := map[string]*daemon.Shipper{}
	addrs := map[string]string{}
	for _, n := range nodes {
		sh, _ := daemon.NewShipper(daemon.ShipConfig{Node: n}, zerolog.Nop())
		ships[n] = sh
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[n] = ln.Addr().String()
		nctx, ncancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { daemon.ServeNode(nctx, ln, &daemon.NodeServer{Node: n, Ship: sh}); close(done) }()
		t.Cleanup(func() { ncancel(); <-done })
	}
	jobs := []balance.Job{
		{ID: "10", Nodes: []string{"n1", "n2", "n3", "n4"}},
		{ID: "11", Nodes: []string{"n1", "n2"}},
		{ID: "12", Nodes: []string{"n3", "n4"}},
		{ID: "13", Nodes: []string{"n1"}},
	}
	f, err := NewFrontend(FrontendConfig{
		Collectors: map[string]string{"col1": a1, "col2": a2},
		NodeAddr:   func(n string) string { return addrs[n] },
		Nodes:      nodes,
		Jobs:       func(context.Context) ([]balance.Job, error) { return jobs, nil },
		Timeout:    500 * time.Millisecond,
		Log:        zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	res, err := f.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 0 || len(res.Alive) != 2 {
		t.Fatalf("alive %v, push errors %v", res.Alive, res.Errors)
	}
	// The routes are the balancing's: compare with balance.Balance on the same tree.
	tree, _ := balance.FlatTree(nodes, 2, 0)
	want, _ := balance.Balance(tree, jobs, balance.Config{})
	addrOf := map[string]string{"c1": a1, "c2": a2}
	for _, r := range want.Routes {
		for _, s := range r.Sends {
			id := map[string]uint32{"10": 10, "11": 11, "12": 12, "13": 13}[r.JobID]
			got := ships[s.Node].Route(id)
			if got != addrOf[s.To] {
				t.Errorf("job %s node %s routes to %q, balancing says %s (%q)", r.JobID, s.Node, got, s.To, addrOf[s.To])
			}
		}
	}
	if ships["n1"].Route(13) != "" {
		t.Errorf("the one-node job 13 is routed to %q, want it local", ships["n1"].Route(13))
	}
	for _, id := range []uint32{11, 12} {
		r := res.ByJob[id]
		seen := map[string]bool{}
		for _, a := range r.NodeCollector {
			seen[a] = true
		}
		if len(seen) != 1 {
			t.Errorf("2-node job %d split over %v, want one collector (exact)", id, r.NodeCollector)
		}
	}

	// col1 dies: the next cycle leaves it out, and every routed job goes to col2.
	stop1()
	res, err = f.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Alive) != 1 || res.Alive[0] != "col2" {
		t.Fatalf("alive after col1 died: %v", res.Alive)
	}
	var used []string
	for _, n := range nodes {
		for _, id := range []uint32{10, 11, 12} {
			if a := ships[n].Route(id); a != "" {
				used = append(used, a)
			}
		}
	}
	sort.Strings(used)
	for _, a := range used {
		if a != a2 {
			t.Errorf("after the reroute, routes still use %s: %v", a, used)
			break
		}
	}
	if len(used) == 0 {
		t.Errorf("no routes after the reroute")
	}
}
