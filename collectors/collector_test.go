package collectors

import (
	"context"
	"encoding/json"
	"math"
	"math/rand"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/quantile"
)

// startCollector serves a collector on a loopback TCP port and returns a client.
func startCollector(t *testing.T) (pb.CollectorClient, *store.Store) {
	t.Helper()
	st := storetest.Open(t, store.Options{})
	c, err := New(Config{Name: "c1", Store: st, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return clientOf(t, c, nil), st
}

// clientOf serves c on a loopback TCP port with the server options srv until the
// test ends, and returns a client dialed with the options dial.
func clientOf(t *testing.T, c *Collector, srv []grpc.ServerOption, dial ...grpc.DialOption) pb.CollectorClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, c, srv...) }()
	conn, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return pb.NewCollectorClient(conn)
}

// TestCollectorExactQuantiles: two nodes push a job's cycle over real gRPC; the
// collector, holding the whole job, stores exact deciles over both nodes' devices, and a
// late node's repeated push replaces its records instead of adding them twice.
func TestCollectorExactQuantiles(t *testing.T) {
	cl, _ := startCollector(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rng := rand.New(rand.NewSource(7))
	const ts = 1_800_000_060
	var all []float64
	push := func(node string, n int) {
		in := &pb.CycleRecords{JobId: 42, Node: node, Ts: ts, Seconds: 60}
		for i := 0; i < n; i++ {
			v := rng.NormFloat64()*10 + 100
			all = append(all, v)
			in.Records = append(in.Records, &pb.Record{Key: "cpi", Device: "cpu" + strconv.Itoa(i), Value: v, Severity: 0})
		}
		ack, err := cl.Push(ctx, in)
		if err != nil || !ack.Ok {
			t.Fatalf("push from %s: %v %v", node, err, ack.GetError())
		}
	}
	push("node1", 32)
	push("node2", 32)
	sum, err := cl.Summary(ctx, &pb.JobSummaryRequest{JobId: 42})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Cycles) != 1 || len(sum.Cycles[0].Summaries) != 1 {
		t.Fatalf("summary: %v", sum)
	}
	got := sum.Cycles[0].Summaries[0]
	want, _ := quantile.Summarize(all, 10)
	if got.Count != 64 || !cmp.Equal(got.Quantiles, want.Quantiles) {
		t.Errorf("deciles over both nodes: count %d\n got %v\nwant %v", got.Count, got.Quantiles, want.Quantiles)
	}
	if got.Devices != 64 {
		t.Errorf("devices %d, want 64 (32 CPUs on each of 2 nodes)", got.Devices)
	}
	// node2 pushes its cycle again (a retry): still 64 values.
	all = all[:32]
	push("node2", 32)
	sum, _ = cl.Summary(ctx, &pb.JobSummaryRequest{JobId: 42})
	want, _ = quantile.Summarize(all, 10)
	if got := sum.Cycles[0].Summaries[0]; got.Count != 64 || !cmp.Equal(got.Quantiles, want.Quantiles) {
		t.Errorf("after a repeated push: count %d, deciles %v, want %v", got.Count, got.Quantiles, want.Quantiles)
	}
	hb, err := cl.Ping(ctx, &pb.Heartbeat{Name: "frontend", Role: "frontend", Ts: ts})
	if err != nil || hb.Name != "c1" || hb.Role != "collector" || hb.Load != 2 {
		t.Errorf("ping: %v %v", hb, err)
	}
}

func TestCollectorRejectsBadPushes(t *testing.T) {
	cl, _ := startCollector(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, in := range map[string]*pb.CycleRecords{
		"no job":       {Node: "n", Ts: 60},
		"no node":      {JobId: 1, Ts: 60},
		"bad key":      {JobId: 1, Node: "n", Ts: 60, Records: []*pb.Record{{Key: "Bad Key", Device: "node"}}},
		"bad severity": {JobId: 1, Node: "n", Ts: 60, Records: []*pb.Record{{Key: "cpi", Device: "cpu0", Severity: 2}}},
	} {
		ack, err := cl.Push(ctx, in)
		if err != nil || ack.Ok || ack.Error == "" {
			t.Errorf("%s: ack %v err %v, want a refusal naming the field", name, ack, err)
		}
	}
}

// TestJobWideReport: a collector holding both nodes of a job makes the job-wide results:
// deciles over both nodes' records, shares of the whole job, and the imbalance between
// the nodes (one busy, one idle), which no single node can see.
func TestJobWideReport(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	eng := propertiestest.Engine(t, properties.Settings{MinSeconds: 1})
	c, _ := New(Config{Name: "c1", Store: st, Engine: eng, Log: zerolog.Nop()})
	for i := int64(0); i < 6; i++ {
		ts := 1_800_000_000 + 60*i
		for _, n := range []struct {
			node string
			user float64
			wsz  float64
		}{{"node1", 95, 4096}, {"node2", 8, 64}} {
			in := &pb.CycleRecords{JobId: 9, Node: n.node, Ts: ts, Seconds: 60, Records: []*pb.Record{
				{Key: "cpu_user_pct", Device: "node", Value: n.user, Severity: max(0, 1-n.user/80)},
				{Key: "io_write_request_size", Device: "node", Value: n.wsz, Severity: 1 - n.wsz/(256<<10)},
			}}
			if ack, err := c.Push(ctx, in); err != nil || !ack.Ok {
				t.Fatalf("push: %v %v", err, ack)
			}
			// A retried push is counted once.
			c.Push(ctx, in)
		}
	}
	sum, err := c.Summary(ctx, &pb.JobSummaryRequest{JobId: 9})
	if err != nil {
		t.Fatal(err)
	}
	var rep digest.Report
	if err := json.Unmarshal(sum.ReportJson, &rep); err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(rep.Nodes, []string{"node1", "node2"}) || rep.Samples != 6 {
		t.Errorf("report covers %v with %d samples", rep.Nodes, rep.Samples)
	}
	got := map[string]properties.Result{}
	for _, r := range rep.Properties {
		got[r.Key] = r
	}
	inter := got["inter_node_imbalance"]
	if !inter.Assessed || !inter.Finding || math.Abs(inter.Median()-0.87) > 1e-9 {
		t.Errorf("inter_node_imbalance: %+v", inter)
	}
	w := got["io_write_request_size"]
	if w.Count != 12 || w.Deciles[0] != 64 || w.Deciles[10] != 4096 || math.Abs(w.TimeShare-1) > 1e-9 {
		t.Errorf("io_write_request_size over both nodes: count %d deciles %v share %v", w.Count, w.Deciles, w.TimeShare)
	}
	// The report is kept in the database for `persyst report --db`.
	if stored, err := st.Report(ctx, 9); err != nil || len(stored.Nodes) != 2 {
		t.Errorf("stored report: %v %v", stored, err)
	}
	// One node idle the whole job: the imbalance between nodes leads.
	if len(rep.Findings) != 2 || rep.Findings[0].Key != "inter_node_imbalance" || rep.Findings[1].Key != "io_write_request_size" {
		t.Errorf("findings %v", rep.Findings)
	}
}

// TestCollectorRefusesLatePushes: a push of a cycle the collector summarized and let go
// (older than the Keep cycles it holds) is refused as late and counted: taken, it was
// let go at once, unsummarized, and lost while acknowledged. A late node of a cycle still
// held refines it. Refusals are counted by reason.
func TestCollectorRefusesLatePushes(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	reg := prometheus.NewRegistry()
	c, err := New(Config{Name: "c1", Store: st, Log: zerolog.Nop(), Metrics: exporter.NewCollector(reg, func() int { return 0 })})
	if err != nil {
		t.Fatal(err)
	}
	const t0 = 1_800_000_000
	push := func(node string, ts int64) *pb.Ack {
		in := &pb.CycleRecords{JobId: 5, Node: node, Ts: ts, Seconds: 60}
		for i := range 4 {
			in.Records = append(in.Records, &pb.Record{Key: "cpi", Device: "cpu" + strconv.Itoa(i), Value: 1})
		}
		ack, err := c.Push(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	for i := range int64(5) { // cycles 0 to 4: the collector holds 2, 3 and 4
		for _, n := range []string{"node1", "node2"} {
			if ack := push(n, t0+60*i); !ack.Ok {
				t.Fatalf("cycle %d from %s: %s", i, n, ack.Error)
			}
		}
	}
	c.settle(ctx, 0)
	if ack := push("node3", t0+60); ack.Ok || !strings.Contains(ack.Error, "came late") {
		t.Errorf("node3's push of cycle 1, let go: %v, want refused as late", ack)
	}
	if ack := push("node3", t0+120); !ack.Ok {
		t.Errorf("node3's push of cycle 2, still held: %v", ack)
	}
	c.settle(ctx, 0)
	c.Push(ctx, &pb.CycleRecords{JobId: 5, Node: "node1", Ts: t0, Records: []*pb.Record{{Key: "Bad Key", Device: "node"}}})
	cycles, err := st.Cycles(ctx, 5, "cpi")
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]int64{}
	for _, cy := range cycles {
		got[cy.Time.Unix()-t0] = cy.Summary.Count
	}
	if want := map[int64]int64{0: 8, 60: 8, 120: 12, 180: 8, 240: 8}; !cmp.Equal(got, want) {
		t.Errorf("records per stored cycle (s after the first: count) %v, want %v", got, want)
	}
	if got, want := refusedPushes(reg), map[string]float64{"late": 1, "malformed": 1}; !cmp.Equal(got, want) {
		t.Errorf("refused pushes by reason %v, want %v", got, want)
	}
}

// refusedPushes are a collector's refused pushes by reason, from its metrics.
func refusedPushes(reg *prometheus.Registry) map[string]float64 {
	refused := map[string]float64{}
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == "persyst_collector_refused_pushes_total" {
			for _, m := range f.Metric {
				refused[m.Label[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return refused
}

// TestOversizedPushCounted: a push over gRPC's message limit, refused by gRPC before the
// collector reads it, is counted as a refused push all the same.
func TestOversizedPushCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := storetest.Open(t, store.Options{})
	reg := prometheus.NewRegistry()
	m := exporter.NewCollector(reg, func() int { return 0 })
	c, err := New(Config{Name: "c1", Store: st, Log: zerolog.Nop(), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	cl := clientOf(t, c, []grpc.ServerOption{countOversized(m)}, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	big := &pb.CycleRecords{JobId: 1, Node: "n", Ts: 60, Records: []*pb.Record{{Key: "cpi", Device: strings.Repeat("x", 5<<20)}}}
	if _, err := cl.Push(ctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a push of 5 MiB: %v, want refused by gRPC (ResourceExhausted)", err)
	}
	for deadline := time.Now().Add(5 * time.Second); refusedPushes(reg)["malformed"] != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("refused pushes %v, want the oversized one counted as malformed", refusedPushes(reg))
		}
	}
}
