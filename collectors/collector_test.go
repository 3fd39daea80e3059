package collectors

import (
	"context"
	"math/rand"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/quantile"
)

// startCollector serves a collector on a loopback TCP port and returns a client.
func startCollector(t *testing.T) (pb.CollectorClient, *store.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Name: "c1", Store: st, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, c) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		st.Close()
	})
	return pb.NewCollectorClient(conn), st
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
