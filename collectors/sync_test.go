package collectors

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/quantile"
	"github.com/persyst/persyst/sample"
)

// testTree runs real agents on loopback: collectors (with their forwarders), sync
// agents, node route servers with shippers, and a frontend serving as aggregation point.
type testTree struct {
	t        *testing.T
	ctx      context.Context
	eng      *properties.Engine
	cols     map[string]string // name → address
	colObjs  map[string]*Collector
	colStop  map[string]func()
	syncs    map[string]string
	syncSt   map[string]*store.Store
	syncStop map[string]func()
	ships    map[string]*uplink.Uplink
	nodeAddr map[string]string
	front    *Frontend
	frontSt  *store.Store
	frontAt  string
	// assumeMax makes frontend balance on the assumed maximum loads.
	assumeMax bool
}

func newTestTree(t *testing.T, ctx context.Context, collectors, syncs, nodes []string) *testTree {
	t.Helper()
	eng := propertiestest.Engine(t)
	tt := &testTree{t: t, ctx: ctx, eng: eng, cols: map[string]string{}, colObjs: map[string]*Collector{}, colStop: map[string]func(){},
		syncs: map[string]string{}, syncSt: map[string]*store.Store{}, syncStop: map[string]func(){},
	}
	for _, name := range collectors {
		ln := listen(t)
		st := openStore(t, ctx, name)
		c, err := New(Config{Name: name, Store: st, Engine: eng, Self: ln.Addr().String(), Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		tt.cols[name], tt.colObjs[name] = ln.Addr().String(), c
		tt.colStop[name] = serveUntil(t, ctx, ln, c, c.Run)
	}
	for _, name := range syncs {
		ln := listen(t)
		st := openStore(t, ctx, name)
		// The tests send their cycles in bursts, not a minute apart: a collector may
		// forward all of a job's cycles before the other forwards one.
		s, err := NewSync(SyncConfig{Name: name, Store: st, Engine: eng, Log: zerolog.Nop(), Keep: 16})
		if err != nil {
			t.Fatal(err)
		}
		tt.syncs[name], tt.syncSt[name] = ln.Addr().String(), st
		tt.syncStop[name] = serveUntil(t, ctx, ln, s, nil)
	}
	tt.ships, tt.nodeAddr = serveNodes(t, ctx, nodes, uplink.Config{Timeout: 500 * time.Millisecond, Retries: 1})
	return tt
}

// serveNodes runs, for every node, a shipper (cfg with the node's name) behind a real
// node route server on loopback, until the test's end.
func serveNodes(t *testing.T, ctx context.Context, nodes []string, cfg uplink.Config) (map[string]*uplink.Uplink, map[string]string) {
	t.Helper()
	ships, addrs := map[string]*uplink.Uplink{}, map[string]string{}
	for _, n := range nodes {
		c := cfg
		c.Node = n
		sh, err := uplink.New(c, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		ships[n] = sh
		ln := listen(t)
		addrs[n] = ln.Addr().String()
		nctx, ncancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { uplink.Serve(nctx, ln, &uplink.NodeServer{Node: n, Ship: sh}); close(done) }()
		t.Cleanup(func() { ncancel(); <-done })
	}
	return ships, addrs
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func openStore(t *testing.T, ctx context.Context, name string) *store.Store {
	t.Helper()
	st := storetest.Open(t, store.Options{})
	return st
}

// serveUntil serves srv on ln (and runs run, if any) until the returned stop or the test's
// end.
func serveUntil(t *testing.T, ctx context.Context, ln net.Listener, srv pb.CollectorServer, run func(context.Context)) func() {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { Serve(sctx, ln, srv); close(done) }()
	if run != nil {
		go run(sctx)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// frontend starts the frontend over the tree with the given jobs source.
func (tt *testTree) frontend(tree *balance.Tree, lmax int, jobs func() []balance.Job) {
	t := tt.t
	ln := listen(t)
	tt.frontAt = ln.Addr().String()
	tt.frontSt = openStore(t, tt.ctx, "frontend")
	f, err := NewFrontend(FrontendConfig{
		Collectors: tt.cols, Syncs: tt.syncs, Tree: tree,
		NodeAddr: func(n string) string { return tt.nodeAddr[n] },
		Jobs:     func(context.Context) ([]balance.Job, error) { return jobs(), nil },
		Balance:  balance.Config{LMax: lmax}, AssumeMaxLoads: tt.assumeMax, Timeout: 500 * time.Millisecond,
		Self: tt.frontAt, Engine: tt.eng, Store: tt.frontSt, Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	tt.front = f
	serveUntil(t, tt.ctx, ln, f, nil)
}

// send has every node send one cycle of job: per CPU of the node a cycles-per-instruction
// value from cpi(node, cpu), the node's CPU share in user code (the mean over its CPUs,
// divided by 100) and a write size.
func (tt *testTree) send(job uint32, ts time.Time, nodes []string, cpus int, cpi func(k, cpu int) float64) map[string][]float64 {
	all := map[string][]float64{}
	for k, n := range nodes {
		var recs []properties.Record
		mean := 0.0
		for c := 0; c < cpus; c++ {
			v := cpi(k, c)
			mean += v / float64(cpus)
			recs = append(recs, properties.Record{Key: "cpi", Device: fmt.Sprintf("cpu%d", c), Value: v, Severity: math.Min(1, math.Max(0, v/80-0.5))})
			all["cpi"] = append(all["cpi"], v)
		}
		recs = append(recs, properties.Record{Key: "cpu_user_pct", Device: "node", Value: mean, Severity: math.Max(0, 1-mean/80)})
		all["cpu_user_pct"] = append(all["cpu_user_pct"], mean)
		size := float64(512 * (k + 1))
		recs = append(recs, properties.Record{Key: "io_write_request_size", Device: "node", Value: size, Severity: 1 - size/(256<<10)})
		all["io_write_request_size"] = append(all["io_write_request_size"], size)
		tt.ships[n].Send(job, ts, 60, recs, 0, sample.Energy{})
		if err := tt.ships[n].FlushJob(tt.ctx, job); err != nil {
			tt.t.Fatal(err)
		}
	}
	return all
}

// drain waits until no collector has a cycle summary left to forward.
func (tt *testTree) drain(names ...string) {
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range names {
		for tt.colObjs[n].Forwarding() > 0 {
			if time.Now().After(deadline) {
				tt.t.Fatalf("collector %s still has %d cycle summaries to forward", n, tt.colObjs[n].Forwarding())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestSplitJobMergedAtTheSyncAgent: frontend → sync agent → 2 collectors → 4 nodes, l_max
// 2. The 4-node job is split over both collectors; its aggregation point is the sync agent
// where they meet. Each cycle both collectors forward their summary of the job's cycle
// there (PushPartial), and the sync agent stores the merged cycle: counts, extremes and
// severities exact, deciles within the sketch's 1 %. At the job's end the batch host asks
// the sync agent, which merges the collectors' parts: all 4 nodes and the imbalance
// between them. When the sync agent dies, the next cycle names the frontend instead, and
// the collectors' summaries go there.
func TestSplitJobMergedAtTheSyncAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := []string{"n1", "n2", "n3", "n4"}
	tt := newTestTree(t, ctx, []string{"col1", "col2"}, []string{"s1"}, nodes)
	tree, err := balance.ParseTreeSpec(strings.NewReader(
		"Frontend=fe Syncs=s1\nSync=s1 Collectors=col[1-2]\nCollector=col1 Nodes=n[1-2]\nCollector=col2 Nodes=n[3-4]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tt.frontend(tree, 2, func() []balance.Job { return []balance.Job{{ID: "40", Nodes: nodes}} })

	res, err := tt.front.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := res.ByJob[40]
	wantHolders := []string{tt.cols["col1"], tt.cols["col2"]}
	if wantHolders[0] > wantHolders[1] {
		wantHolders[0], wantHolders[1] = wantHolders[1], wantHolders[0]
	}
	if r.AggregationPoint != tt.syncs["s1"] || !cmp.Equal(r.Holders, wantHolders) {
		t.Fatalf("job 40: aggregation point %s holders %v; want the sync agent %s and both collectors %v",
			r.AggregationPoint, r.Holders, tt.syncs["s1"], wantHolders)
	}
	// n4 idles; the other nodes' CPUs are busy to different degrees.
	user := func(k, c int) float64 {
		if k == 3 {
			return 2 + float64(c)
		}
		return 60 + 10*float64(k) + float64(c)
	}
	var exact []map[string][]float64
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < 5; i++ {
		exact = append(exact, tt.send(40, t0.Add(time.Duration(i)*time.Minute), nodes, 8, user))
	}
	tt.drain("col1", "col2")

	// The sync agent's merged cycles.
	for _, key := range []string{"cpi", "cpu_user_pct", "io_write_request_size"} {
		cs, err := tt.syncSt["s1"].Cycles(ctx, 40, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 5 {
			t.Fatalf("%s: the sync agent stored %d cycles, want 5", key, len(cs))
		}
		for i, c := range cs {
			want, _ := quantile.Summarize(exact[i][key], 10)
			if c.Summary.Count != want.Count || c.Summary.Min != want.Min || c.Summary.Max != want.Max || math.Abs(c.Summary.Sum-want.Sum) > 1e-9 {
				t.Errorf("%s cycle %d: count/min/max/sum %d %v %v %v, exact %d %v %v %v", key, i,
					c.Summary.Count, c.Summary.Min, c.Summary.Max, c.Summary.Sum, want.Count, want.Min, want.Max, want.Sum)
			}
			for k, q := range c.Summary.Quantiles {
				if math.Abs(q-want.Quantiles[k]) > 0.01*math.Abs(want.Quantiles[k])+1e-9 {
					t.Errorf("%s cycle %d decile %d = %v, exact %v: beyond the sketch's 1 %%", key, i, k, q, want.Quantiles[k])
				}
			}
		}
	}
	cs, _ := tt.syncSt["s1"].Cycles(ctx, 40, "cpi")
	severe := 0
	for _, v := range exact[0]["cpi"] {
		if v/80-0.5 > 0 {
			severe++
		}
	}
	if got := cs[0].Severity.Total() - cs[0].Severity.Counts[0]; got != int64(severe) || cs[0].Devices != 32 {
		t.Errorf("merged severities: %d severe of %d devices, want %d of 32", got, cs[0].Devices, severe)
	}

	// The job's end: the batch host asks its aggregation point.
	wide, err := tt.ships["n1"].Fetch(ctx, tt.ships["n1"].Aggregation(40), 40)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(wide.Nodes, nodes) || wide.Samples != 5 {
		t.Errorf("the sync agent's report covers %v with %d samples", wide.Nodes, wide.Samples)
	}
	found := false
	for _, p := range wide.Properties {
		found = found || (p.Key == "inter_node_imbalance" && p.Finding)
	}
	if !found {
		t.Errorf("no imbalance between nodes in the sync agent's report: %+v", wide.Properties)
	}
	if rep, err := tt.syncSt["s1"].Report(ctx, 40); err != nil || rep == nil || len(rep.Nodes) != 4 {
		t.Errorf("the sync agent did not keep the job's report: %v %v", rep, err)
	}

	// The sync agent dies: within one cycle the job's aggregation point is the frontend,
	// and the collectors' summaries of the next cycle reach it.
	tt.syncStop["s1"]()
	res, err = tt.front.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.ByJob[40].AggregationPoint; got != tt.frontAt || len(res.Syncs) != 0 {
		t.Fatalf("after the sync agent died: aggregation point %s (live syncs %v), want the frontend %s", got, res.Syncs, tt.frontAt)
	}
	tt.send(40, t0.Add(5*time.Minute), nodes, 8, user)
	tt.drain("col1", "col2")
	fc, err := tt.frontSt.Cycles(ctx, 40, "cpi")
	if err != nil || len(fc) != 1 || fc[0].Summary.Count != 32 {
		t.Fatalf("the frontend's merged cycles after the reroute: %+v %v", fc, err)
	}
	wide, err = tt.ships["n1"].Fetch(ctx, tt.ships["n1"].Aggregation(40), 40)
	if err != nil || len(wide.Nodes) != 4 || wide.Samples != 6 {
		t.Fatalf("the frontend's report after the reroute: %+v %v", wide, err)
	}
}

// TestMovedJobMergedAtItsCollector: a 2-node job is exact on col1, then a bigger job on
// the same nodes takes col1 and the job moves to col2. Its route names col2 as the
// aggregation point and both collectors as holders; at its end col2 merges col1's part,
// so the report covers every cycle, not only those since the move.
func TestMovedJobMergedAtItsCollector(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := []string{"n1", "n2", "n3", "n4"}
	tt := newTestTree(t, ctx, []string{"col1", "col2"}, nil, nodes)
	tree, err := balance.ParseTreeSpec(strings.NewReader("Collector=col1 Nodes=n[1-2]\nCollector=col2 Nodes=n[3-4]\n"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := []balance.Job{{ID: "50", Nodes: []string{"n1", "n2"}}}
	tt.frontend(tree, 4, func() []balance.Job { return jobs })
	res, err := tt.front.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.ByJob[50]; r.AggregationPoint != tt.cols["col1"] || !cmp.Equal(r.Holders, []string{tt.cols["col1"]}) {
		t.Fatalf("job 50 first: aggregation %s holders %v, want exact on col1 %s", r.AggregationPoint, r.Holders, tt.cols["col1"])
	}
	user := func(k, c int) float64 { return 50 + float64(10*k+c) }
	t0 := time.Unix(1_800_000_000, 0)
	tt.send(50, t0, jobs[0].Nodes, 4, user)
	tt.send(50, t0.Add(time.Minute), jobs[0].Nodes, 4, user)

	jobs = append(jobs, balance.Job{ID: "51", Nodes: []string{"n1", "n2"}, LoadPerNode: 2})
	if res, err = tt.front.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	r := res.ByJob[50]
	if r.AggregationPoint != tt.cols["col2"] || len(r.Holders) != 2 {
		t.Fatalf("job 50 after the move: aggregation %s holders %v, want col2 %s and both collectors", r.AggregationPoint, r.Holders, tt.cols["col2"])
	}
	tt.send(50, t0.Add(2*time.Minute), jobs[0].Nodes, 4, user)
	tt.drain("col1", "col2")
	wide, err := tt.ships["n1"].Fetch(ctx, tt.ships["n1"].Aggregation(50), 50)
	if err != nil {
		t.Fatal(err)
	}
	if wide.Samples != 3 || len(wide.Nodes) != 2 {
		t.Errorf("col2's report of the moved job: %d samples on %v, want 3 on 2 nodes", wide.Samples, wide.Nodes)
	}
	// Neither collector forwarded anything: the job was exact wherever it was.
	if fc, _ := tt.frontSt.Cycles(ctx, 50, "cpi"); len(fc) != 0 {
		t.Errorf("an exact job's cycles were forwarded to the frontend: %+v", fc)
	}
}

func TestMergeCycle(t *testing.T) {
	rec := func(node string, vals ...float64) []properties.Record {
		var out []properties.Record
		for i, v := range vals {
			out = append(out, properties.Record{Key: "cpu_user_pct", Device: fmt.Sprintf("%s/cpu%d", node, i), Value: v, Severity: math.Max(0, 1-v/80)})
		}
		return out
	}
	a := rec("n1", 10, 20, 30, 40, 50)
	b := rec("n2", 60, 70, 80, 90, 100, 110)
	pa, err := CyclePartial(7, 100, "col1", []string{"n1"}, a, 10)
	if err != nil {
		t.Fatal(err)
	}
	pb2, _ := CyclePartial(7, 100, "col2", []string{"n2"}, b, 10)
	exact, _ := store.Summarize(append(append([]properties.Record{}, a...), b...), 10)

	t.Run("one part is exact", func(t *testing.T) {
		got, err := MergeCycle([]*pb.PartialCycle{pa}, 10)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := store.Summarize(a, 10)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("-want +got\n%s", diff)
		}
	})
	t.Run("sketches", func(t *testing.T) {
		got, err := MergeCycle([]*pb.PartialCycle{pa, pb2}, 10)
		if err != nil {
			t.Fatal(err)
		}
		g, w := got[0], exact[0]
		if g.Summary.Count != 11 || g.Summary.Min != 10 || g.Summary.Max != 110 || g.Devices != 11 || g.Severity != w.Severity || g.TimeShare != w.TimeShare {
			t.Errorf("exact fields: got %+v, want %+v", g, w)
		}
		for k, q := range g.Summary.Quantiles {
			if math.Abs(q-w.Summary.Quantiles[k]) > 0.01*w.Summary.Quantiles[k] {
				t.Errorf("decile %d = %v, exact %v", k, q, w.Summary.Quantiles[k])
			}
		}
	})
	t.Run("without sketches: PerSyst's estimation", func(t *testing.T) {
		na, nb := cloneNoSketch(pa), cloneNoSketch(pb2)
		got, err := MergeCycle([]*pb.PartialCycle{na, nb}, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := quantile.MergeEstimate([]quantile.Summary{mustSum(t, a), mustSum(t, b)})
		if diff := cmp.Diff(want.Quantiles, got[0].Summary.Quantiles); diff != "" {
			t.Errorf("-want +got\n%s", diff)
		}
	})
	t.Run("bad parts are refused with their origin", func(t *testing.T) {
		bad := cloneNoSketch(pa)
		bad.Summaries[0].Sketch = []byte("junk")
		if _, err := MergeCycle([]*pb.PartialCycle{bad, pb2}, 10); err == nil || !strings.Contains(err.Error(), "col1") {
			t.Errorf("junk sketch: %v", err)
		}
		bad = cloneNoSketch(pa)
		bad.Summaries[0].SeverityBins = []int64{1}
		if err := checkPartialCycle(bad); err == nil || !strings.Contains(err.Error(), "severity bins") {
			t.Errorf("short severity bins: %v", err)
		}
	})
}

func cloneNoSketch(p *pb.PartialCycle) *pb.PartialCycle {
	out := &pb.PartialCycle{JobId: p.JobId, Ts: p.Ts, From: p.From, Nodes: p.Nodes}
	for _, s := range p.Summaries {
		c := proto.Clone(s).(*pb.PropertySummary)
		c.Sketch = nil
		out.Summaries = append(out.Summaries, c)
	}
	return out
}

func mustSum(t *testing.T, recs []properties.Record) quantile.Summary {
	var v []float64
	for _, r := range recs {
		v = append(v, r.Value)
	}
	s, err := quantile.Summarize(v, 10)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestForwardToACollectorIsDropped: a collector whose route names another collector as a
// job's aggregation point (a wrong --self) drops the cycle summaries instead of retrying
// them forever.
func TestForwardToACollectorIsDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tt := newTestTree(t, ctx, []string{"col1", "col2"}, nil, nil)
	c := tt.colObjs["col1"]
	recs := []*pb.Record{{Key: "cpi", Device: "cpu0", Value: 1.2}}
	ack, err := c.Push(ctx, &pb.CycleRecords{JobId: 60, Node: "n1", Ts: 1_800_000_000, Seconds: 60, Records: recs, AggregationPoint: tt.cols["col2"]})
	if err != nil || !ack.Ok {
		t.Fatalf("push: %v %v", ack, err)
	}
	tt.drain("col1")
}

// TestSyncRefusesPartsOfForgottenCycles: a part of a cycle older than the cycles kept for
// merging is refused, not merged alone over the stored merge of the other parts.
func TestSyncRefusesPartsOfForgottenCycles(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	eng := propertiestest.Engine(t)
	s, err := NewSync(SyncConfig{Name: "s1", Store: st, Engine: eng, Log: zerolog.Nop(), Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	part := func(from string, ts int64) *pb.Ack {
		ack, err := s.PushPartial(ctx, &pb.PartialCycle{JobId: 5, Ts: ts, From: from})
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	for _, ts := range []int64{100, 160, 220} {
		if ack := part("col1", ts); !ack.Ok {
			t.Fatalf("col1's cycle %d: %s", ts, ack.Error)
		}
	}
	if ack := part("col2", 100); ack.Ok || !strings.Contains(ack.Error, "older than the 2 cycles kept") {
		t.Errorf("col2's part of a forgotten cycle: %+v", ack)
	}
	if ack := part("col2", 160); !ack.Ok {
		t.Errorf("col2's part of a kept cycle: %s", ack.Error)
	}
}
