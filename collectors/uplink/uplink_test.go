package uplink

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

// runCollector serves a real collector at addr ("127.0.0.1:0" picks a port) until stop.
func runCollector(t *testing.T, addr string, st *store.Store) (string, func()) {
	t.Helper()
	c, err := collectors.New(collectors.Config{Name: "c1", Store: st, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go c.Run(ctx)
	go func() { collectors.Serve(ctx, ln, c); close(done) }()
	return ln.Addr().String(), func() { cancel(); <-done }
}

func recs(ts time.Time, v float64) []properties.Record {
	return []properties.Record{{Time: ts, Key: "cpu_user_pct", Device: "node", Value: v}}
}

// TestUplinkSurvivesADeadCollector: records reach the collector; while it is down,
// sending never blocks and each job keeps only its newest cycle; when it is back, that
// cycle arrives. At most one cycle is lost.
func TestUplinkSurvivesADeadCollector(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	addr, stop := runCollector(t, "127.0.0.1:0", st)
	sh, err := New(Config{Addr: addr, Node: "node1", Timeout: 300 * time.Millisecond, Retries: 1}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go sh.Run(rctx, 100*time.Millisecond)

	t0 := time.Unix(1_800_000_000, 0)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	stored := func() []int64 {
		cs, _ := st.Cycles(ctx, 7, "cpu_user_pct")
		var out []int64
		for _, c := range cs {
			out = append(out, c.Time.Unix())
		}
		return out
	}
	sh.Send(7, t0, 60, recs(t0, 50), 0, sample.Energy{})
	waitFor("the first cycle at the collector", func() bool { return len(stored()) == 1 })

	stop() // the collector dies
	start := time.Now()
	for i := 1; i <= 3; i++ {
		ts := t0.Add(time.Duration(i) * time.Minute)
		sh.Send(7, ts, 60, recs(ts, float64(50+i)), 0, sample.Energy{})
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("Send blocked for %v with the collector down", d)
	}
	time.Sleep(400 * time.Millisecond)
	if n := sh.Pending(); n != 1 {
		t.Errorf("%d jobs pending, want 1 (the newest cycle of job 7)", n)
	}
	// The collector comes back at the same address.
	_, stop2 := runCollector(t, addr, st)
	defer stop2()
	waitFor("the buffered cycle", func() bool { return len(stored()) == 2 })
	got := stored()
	if got[1] != t0.Add(3*time.Minute).Unix() {
		t.Errorf("stored cycles %v: want the first and the newest (%d)", got, t0.Add(3*time.Minute).Unix())
	}
	waitFor("nothing pending after the collector came back", func() bool { return sh.Pending() == 0 })
}

// TestJobWideFetch: two nodes' shippers send a 2-node job's records to a collector with
// an engine; the batch host fetches the job-wide report (both nodes, the imbalance
// between them) and merges it over its own results.
func TestJobWideFetch(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	eng := propertiestest.Engine(t)
	c, _ := collectors.New(collectors.Config{Name: "c1", Store: st, Engine: eng, Log: zerolog.Nop()})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { collectors.Serve(cctx, ln, c); close(done) }()
	defer func() { cancel(); <-done }()

	ships := map[string]*Uplink{}
	for _, n := range []string{"node1", "node2"} {
		ships[n], _ = New(Config{Addr: ln.Addr().String(), Node: n}, zerolog.Nop())
	}
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < 5; i++ {
		ts := t0.Add(time.Duration(i) * time.Minute)
		for n, user := range map[string]float64{"node1": 97, "node2": 5} {
			ships[n].Send(5, ts, 60, []properties.Record{{Time: ts, Key: "cpu_user_pct", Device: "node", Value: user, Severity: max(0, 1-user/80)}}, 0, sample.Energy{})
			if err := ships[n].FlushJob(ctx, 5); err != nil {
				t.Fatal(err)
			}
		}
	}
	if a := ships["node1"].Aggregation(5); a != ln.Addr().String() {
		t.Fatalf("aggregation point %q", a)
	}
	wide, err := ships["node1"].JobWide(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(wide.Nodes) != 2 {
		t.Fatalf("job-wide report covers %v", wide.Nodes)
	}
	local := []properties.Result{
		{Key: "cpu_user_pct", Assessed: true, Count: 5},
		{Key: "cpi", NotAssessed: "instructions: not available"},
	}
	merged := properties.MergeResults(local, wide.Properties)
	keys := map[string]properties.Result{}
	for _, r := range merged {
		keys[r.Key] = r
	}
	if keys["cpu_user_pct"].Count != 10 {
		t.Errorf("cpu_user_pct after the merge counts %d records, want 10 (both nodes)", keys["cpu_user_pct"].Count)
	}
	if keys["cpi"].NotAssessed == "" {
		t.Errorf("the local not-assessed reason was lost")
	}
	if r, ok := keys["inter_node_imbalance"]; !ok || !r.Finding {
		t.Errorf("inter_node_imbalance after the merge: %+v", r)
	}
}

// TestRoutesBounded: a message of 320,000 routes is refused whole (the node keeps its
// routes); a hundred rounds of 4,096 new jobs' routes leave at most MaxRoutes routes and
// maxRemembered remembered jobs.
func TestRoutesBounded(t *testing.T) {
	u, err := New(Config{Node: "n1"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	routes := func(first, n int) *pb.Routes {
		rs := &pb.Routes{}
		for j := first; j < first+n; j++ {
			rs.Routes = append(rs.Routes, &pb.Route{JobId: uint32(j), NodeCollector: map[string]string{"n1": "10.0.0.1:1"},
				AggregationPoint: "10.0.0.2:1", Holders: []string{"10.0.0.1:1"}})
		}
		return rs
	}
	if err := u.SetRoutes(routes(1, 10)); err != nil {
		t.Fatal(err)
	}
	if err := u.SetRoutes(routes(100, 320_000)); err == nil || !strings.Contains(err.Error(), "320000 routes, more than 4096") {
		t.Errorf("320,000 routes: %v", err)
	}
	if u.Route(1) != "10.0.0.1:1" || u.Route(100) != "" {
		t.Errorf("after a refused message the routes changed: job 1 → %q, job 100 → %q", u.Route(1), u.Route(100))
	}
	for round := 0; round < 100; round++ {
		if err := u.SetRoutes(routes(1000+round*MaxRoutes, MaxRoutes)); err != nil {
			t.Fatal(err)
		}
	}
	u.mu.Lock()
	nr, na, nh := len(u.routes), len(u.aggs), len(u.holders)
	u.mu.Unlock()
	if nr > MaxRoutes || na > MaxRoutes+maxRemembered || nh > MaxRoutes+maxRemembered {
		t.Errorf("after 409,600 jobs' routes: %d routes, %d aggregation points, %d holders; want at most %d, %d, %d",
			nr, na, nh, MaxRoutes, MaxRoutes+maxRemembered, MaxRoutes+maxRemembered)
	}
}

// TestStartWhileTheAddressIsHeld: a daemon restarted while the previous one still holds
// the node service's address starts anyway, and serves the address once it is free.
func TestStartWhileTheAddressIsHeld(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := held.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Start(ctx, Options{Listen: addr, Node: "node1", Log: zerolog.Nop()}); err != nil {
		t.Fatalf("Start with the address held: %v", err)
	}
	held.Close()
	for {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err = pb.NewNodeClient(conn).Ping(cctx, &pb.Heartbeat{})
			ccancel()
			conn.Close()
			if err == nil {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the node service never took the freed address: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// keeperServer is a frontend's report service alone: it takes reports, or refuses them.
type keeperServer struct {
	pb.UnimplementedCollectorServer
	refuse bool
	got    chan uint32
}

func (k *keeperServer) KeepReport(_ context.Context, in *pb.JobSummary) (*pb.Ack, error) {
	k.got <- in.JobId
	if k.refuse {
		return &pb.Ack{Error: "not from the batch host"}, nil
	}
	return &pb.Ack{Ok: true}, nil
}

// serveKeeper serves k at addr until the test ends; it returns the address.
func serveKeeper(t *testing.T, addr string, k *keeperServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterCollectorServer(s, k)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// TestKeeperOutlivesARestart: a final report sent while the frontend is down reaches it
// once it is back; one the frontend refuses is not sent again.
func TestKeeperOutlivesARestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the frontend is down
	k := newKeeper("node1", newClients(grpc.WithTransportCredentials(insecure.NewCredentials())), zerolog.Nop())
	k.retryMin, k.retryMax, k.retryFor = 50*time.Millisecond, 200*time.Millisecond, time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.run(ctx)
	k.set(addr)
	k.keep(41, digest.Report{Schema: digest.SchemaVersion, JobID: 41})
	time.Sleep(1500 * time.Millisecond) // down through many more tries than 3 (the old keeper gave up after 3)
	up := &keeperServer{got: make(chan uint32, 10)}
	serveKeeper(t, addr, up) // back, at the same address
	select {
	case id := <-up.got:
		if id != 41 {
			t.Errorf("got job %d's report, want 41", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the report sent while the frontend was down never arrived")
	}

	refusing := &keeperServer{refuse: true, got: make(chan uint32, 10)}
	k.set(serveKeeper(t, "127.0.0.1:0", refusing))
	k.keep(42, digest.Report{Schema: digest.SchemaVersion, JobID: 42})
	<-refusing.got
	select {
	case id := <-refusing.got:
		t.Errorf("job %d's refused report was sent again", id)
	case <-time.After(400 * time.Millisecond): // two retry intervals
	}
}

// pushRecorder is a collector that takes every push and hands it to the test.
type pushRecorder struct {
	pb.UnimplementedCollectorServer
	got chan *pb.CycleRecords
}

func (r *pushRecorder) Push(_ context.Context, in *pb.CycleRecords) (*pb.Ack, error) {
	r.got <- in
	return &pb.Ack{Ok: true}, nil
}

// TestReroutedCycleTakesTheRoute: a cycle kept for a collector that does not answer goes
// to the collector the frontend routes the job to next, with that route's aggregation
// point, not the one it was made with (the old collector, which merges no parts).
func TestReroutedCycleTakesTheRoute(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nobody answers there
	rec := &pushRecorder{got: make(chan *pb.CycleRecords, 4)}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterCollectorServer(s, rec)
	go s.Serve(ln)
	defer s.Stop()
	live, agg := ln.Addr().String(), "127.0.0.1:7"

	up, err := New(Config{Node: "node1", Timeout: 300 * time.Millisecond, Retries: 1}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	route := func(to, agg string) {
		if err := up.SetRoutes(&pb.Routes{Routes: []*pb.Route{{JobId: 7, NodeCollector: map[string]string{"node1": to}, AggregationPoint: agg}}}); err != nil {
			t.Fatal(err)
		}
	}
	route(dead, dead) // the job whole at one collector
	up.Send(7, time.Unix(1_800_000_000, 0), 60, recs(time.Unix(1_800_000_000, 0), 50), 1, sample.Energy{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	up.flush(ctx) // the collector does not answer: the cycle is kept
	route(live, agg)
	up.flush(ctx) // the kept cycle is rerouted
	up.flush(ctx) // and sent
	select {
	case in := <-rec.got:
		if in.JobId != 7 || in.AggregationPoint != agg {
			t.Errorf("the rerouted cycle: job %d, aggregation point %q; want job 7 and %s", in.JobId, in.AggregationPoint, agg)
		}
	case <-ctx.Done():
		t.Fatal("the kept cycle never reached the job's new collector")
	}
}
