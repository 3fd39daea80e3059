package collectors

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/properties/propertiestest"
)

func newBoundCollector(t testing.TB, now *time.Time) *Collector {
	t.Helper()
	st := storetest.Open(t, store.Options{})
	eng := propertiestest.Engine(t)
	c, err := New(Config{Name: "c1", Store: st, Engine: eng, Log: zerolog.Nop(), Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cyclePush(job uint32, node string, ts int64, n int) *pb.CycleRecords {
	in := &pb.CycleRecords{JobId: job, Node: node, Ts: ts, Seconds: 60}
	for i := 0; i < n; i++ {
		in.Records = append(in.Records, &pb.Record{Key: "cpu_user_pct", Device: "cpu" + strconv.Itoa(i), Value: float64(i % 100)})
	}
	return in
}

// TestCollectorForgetsIdleJobs: 5,000 jobs that stop pushing are forgotten after JobIdle,
// and the memory they took is given back.
func TestCollectorForgetsIdleJobs(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := newBoundCollector(t, &now)
	ctx := context.Background()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for job := uint32(1); job <= 5000; job++ {
		if ack, _ := c.Push(ctx, cyclePush(job, "node1", now.Unix(), 16)); !ack.Ok {
			t.Fatalf("push of job %d: %s", job, ack.Error)
		}
	}
	held := heap()
	if c.Jobs() != 5000 {
		t.Fatalf("%d jobs held, want 5000", c.Jobs())
	}
	now = now.Add(JobIdle + time.Second)
	c.forgetIdle()
	after := heap()
	t.Logf("heap: %d KiB before, %d KiB with 5,000 jobs, %d KiB after they were forgotten", before>>10, held>>10, after>>10)
	if c.Jobs() != 0 {
		t.Errorf("%d jobs held after JobIdle, want 0", c.Jobs())
	}
	if after > before+(held-before)/10 {
		t.Errorf("heap %d KiB after forgetting, want close to %d KiB (was %d KiB)", after>>10, before>>10, held>>10)
	}
}

// TestCollectorCaps: a push beyond MaxPushRecords, a cycle beyond MaxCycleRecords and a
// job beyond MaxJobs are refused with a reason; malformed pushes too.
func TestCollectorCaps(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := newBoundCollector(t, &now)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		in   *pb.CycleRecords
		want string
	}{
		{"too many records", cyclePush(1, "node1", now.Unix(), MaxPushRecords+1), "more than 65536"},
		{"bad node name", cyclePush(1, "node 1\x1b[31m", now.Unix(), 1), "bad node name"},
		{"interval", func() *pb.CycleRecords { in := cyclePush(1, "n", now.Unix(), 1); in.Seconds = -1; return in }(), "interval"},
	} {
		if ack, _ := c.Push(ctx, tc.in); ack.Ok || !strings.Contains(ack.Error, tc.want) {
			t.Errorf("%s: ack %v, want refused with %q", tc.name, ack, tc.want)
		}
	}
	refused := ""
	for i := 0; refused == "" && i < MaxCycleRecords/MaxPushRecords+2; i++ {
		if ack, _ := c.Push(ctx, cyclePush(2, fmt.Sprintf("node%d", i), now.Unix(), MaxPushRecords)); !ack.Ok {
			refused = ack.Error
		}
	}
	if !strings.Contains(refused, "more than 4194304") {
		t.Errorf("a cycle's records beyond MaxCycleRecords: %q", refused)
	}
	for job := uint32(10); c.Jobs() < MaxJobs; job++ {
		c.Push(ctx, cyclePush(job, "node1", now.Unix(), 1))
	}
	if ack, _ := c.Push(ctx, cyclePush(999999, "node1", now.Unix(), 1)); ack.Ok || !strings.Contains(ack.Error, "jobs already") {
		t.Errorf("job beyond MaxJobs: %v", ack)
	}
}

// TestCollectorSummarizesOnce: a burst of 300 nodes' pushes of one cycle is summarized
// once when settled, not once per push.
func TestCollectorSummarizesOnce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := newBoundCollector(t, &now)
	ctx := context.Background()
	for n := 0; n < 300; n++ {
		if ack, _ := c.Push(ctx, cyclePush(7, fmt.Sprintf("node%d", n), now.Unix(), 100)); !ack.Ok {
			t.Fatal(ack.Error)
		}
	}
	c.settle(ctx, 0)
	if c.sums != 1 {
		t.Errorf("%d summaries of the cycle, want 1", c.sums)
	}
	sum, err := c.Summary(ctx, &pb.JobSummaryRequest{JobId: 7})
	if err != nil || len(sum.Cycles) != 1 || sum.Cycles[0].Summaries[0].Count != 30000 {
		t.Errorf("summary: %v %v", sum, err)
	}
}

// BenchmarkCycleIngest: one cycle of a 300-node job, 1,000 records a node, pushed and
// summarized (go test -run XXX -bench CycleIngest ./collectors/).
func BenchmarkCycleIngest(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	c := newBoundCollector(b, &now)
	ctx := context.Background()
	pushes := make([]*pb.CycleRecords, 300)
	for n := range pushes {
		pushes[n] = cyclePush(7, fmt.Sprintf("node%d", n), 0, 1000)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ts := now.Unix() + int64(i)*60
		for _, in := range pushes {
			in.Ts = ts
			if ack, _ := c.Push(ctx, in); !ack.Ok {
				b.Fatal(ack.Error)
			}
		}
		c.settle(ctx, 0)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*300*1000)*1000, "ns/record")
}

// BenchmarkCycleIngestGRPC: one cycle of a job, 1,000 records a node, pushed over gRPC on
// loopback by one connection per node (8 pushing at a time) and summarized, for 75, 150
// and 300 nodes: ns/record should not grow with the job (go test -run XXX -bench
// CycleIngestGRPC ./collectors/).
func BenchmarkCycleIngestGRPC(b *testing.B) {
	for _, nodes := range []int{75, 150, 300} {
		b.Run(fmt.Sprintf("%d_nodes", nodes), func(b *testing.B) {
			now := time.Unix(1_800_000_000, 0)
			c := newBoundCollector(b, &now)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go Serve(ctx, ln, c)
			clients := make([]pb.CollectorClient, nodes)
			pushes := make([]*pb.CycleRecords, nodes)
			for n := range clients {
				conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				clients[n] = pb.NewCollectorClient(conn)
				pushes[n] = cyclePush(7, fmt.Sprintf("node%d", n), 0, 1000)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ts := now.Unix() + int64(i)*60
				var wg sync.WaitGroup
				sem := make(chan struct{}, 8)
				for n := range pushes {
					pushes[n].Ts = ts
					wg.Add(1)
					sem <- struct{}{}
					go func() {
						defer func() { <-sem; wg.Done() }()
						if ack, err := clients[n].Push(ctx, pushes[n]); err != nil || !ack.Ok {
							b.Error(err, ack.GetError())
						}
					}()
				}
				wg.Wait()
				c.settle(ctx, 0)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nodes*1000), "ns/record")
		})
	}
}
