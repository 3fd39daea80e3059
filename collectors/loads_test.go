package collectors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// TestPingReportsMeasuredLoads: a collector's heartbeat carries, per job, the node-cycle
// that sent the largest share of its maximum since the previous ping; a push without a
// maximum (an older daemon) says nothing, and the next ping starts afresh.
func TestPingReportsMeasuredLoads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, _ := startCollector(t)
	push := func(job uint32, node string, records, max int) {
		t.Helper()
		in := &pb.CycleRecords{JobId: job, Node: node, Ts: 1_800_000_000, Seconds: 60, MaxRecords: uint32(max)}
		for i := 0; i < records; i++ {
			in.Records = append(in.Records, &pb.Record{Key: "cpi", Device: fmt.Sprintf("cpu%d", i), Value: 1})
		}
		if ack, err := cl.Push(ctx, in); err != nil || !ack.Ok {
			t.Fatalf("push: %v %v", ack, err)
		}
	}
	push(1, "a", 4, 10) // 40 %
	push(1, "b", 6, 30) // 20 %: not the heaviest
	push(2, "a", 3, 0)  // unknown maximum
	push(3, "c", 9, 12) // 75 %
	push(3, "d", 6, 6)  // 100 %
	push(4, "e", 5, 3)  // more records than the maximum: stored, load not measured
	hb, err := cl.Ping(ctx, &pb.Heartbeat{Name: "frontend"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*pb.JobLoad{{JobId: 1, Records: 4, MaxRecords: 10}, {JobId: 3, Records: 6, MaxRecords: 6}}
	if diff := cmp.Diff(want, hb.Jobs, protocmp.Transform()); diff != "" {
		t.Errorf("job loads (-want +got):\n%s", diff)
	}
	if hb, err = cl.Ping(ctx, &pb.Heartbeat{Name: "frontend"}); err != nil || len(hb.Jobs) != 0 {
		t.Errorf("second ping: %v %v, want no job loads", hb.GetJobs(), err)
	}
}

// TestBalanceOnMeasuredLoads: frontend → 2 collectors of 2 nodes, l_max 2 nodes, all real
// gRPC on loopback. A 4-node job is charged the assumed maximum in its first cycle and
// split over both collectors (PerSyst's behaviour). Once its nodes have sent a cycle, the
// collectors report its measured load and the next cycle charges that: a job whose nodes
// sent at most half their maximum (2 nodes' worth) is moved whole onto one collector,
// exact; one whose busiest node sent 3/4 of it (3 nodes' worth) stays split; and with
// AssumeMaxLoads the light job stays split too.
func TestBalanceOnMeasuredLoads(t *testing.T) {
	tests := []struct {
		name      string
		sent      []int // records per node, of a maximum of 8
		assumeMax bool
		exact     bool
	}{
		{"light job moves onto one collector", []int{2, 4, 3, 1}, false, true},
		{"heavy node keeps the job split", []int{2, 6, 2, 2}, false, false},
		{"assumed maximum keeps it split", []int{2, 4, 3, 1}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes := []string{"n1", "n2", "n3", "n4"}
			tt := newTestTree(t, ctx, []string{"col1", "col2"}, nil, nodes)
			tt.assumeMax = tc.assumeMax
			tree, err := balance.ParseTreeSpec(strings.NewReader("Collector=col1 Nodes=n[1-2]\nCollector=col2 Nodes=n[3-4]\n"))
			if err != nil {
				t.Fatal(err)
			}
			tt.frontend(tree, 2, func() []balance.Job { return []balance.Job{{ID: "60", Nodes: nodes}} })
			res, err := tt.front.Cycle(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r := res.ByJob[60]; len(r.Holders) != 2 || r.AggregationPoint != tt.frontAt {
				t.Fatalf("first cycle: aggregation %s holders %v, want split over both collectors, merged at the frontend %s",
					r.AggregationPoint, r.Holders, tt.frontAt)
			}
			if _, ok := tt.front.Share(60); ok {
				t.Fatal("a share measured before any node sent")
			}
			ts := time.Unix(1_800_000_000, 0)
			for k, n := range nodes {
				var recs []properties.Record
				for i := 0; i < tc.sent[k]; i++ {
					recs = append(recs, properties.Record{Key: "cpi", Device: fmt.Sprintf("cpu%d", i), Value: float64(1 + i)})
				}
				tt.ships[n].Send(60, ts, 60, recs, 8, sample.Energy{})
				if err := tt.ships[n].FlushJob(ctx, 60); err != nil {
					t.Fatal(err)
				}
			}
			if res, err = tt.front.Cycle(ctx); err != nil {
				t.Fatal(err)
			}
			heaviest := 0
			for _, k := range tc.sent {
				heaviest = max(heaviest, k)
			}
			if share, ok := tt.front.Share(60); !ok || share != float64(heaviest)/8 {
				t.Errorf("measured share %v (%v), want %v", share, ok, float64(heaviest)/8)
			}
			r := res.ByJob[60]
			exact := len(r.Holders) == 2 && len(distinct(r.NodeCollector)) == 1 && r.AggregationPoint == r.NodeCollector["n1"]
			if exact != tc.exact {
				t.Errorf("second cycle: routes %v aggregation %s holders %v; exact on one collector = %v, want %v",
					r.NodeCollector, r.AggregationPoint, r.Holders, exact, tc.exact)
			}
			if !tc.exact && r.AggregationPoint != tt.frontAt {
				t.Errorf("second cycle: aggregation %s, want still the frontend %s", r.AggregationPoint, tt.frontAt)
			}
		})
	}
}

func distinct(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}
