package collectors

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/sample"
)

// TestPeersGatherAJob: without a collector tree, the batch host of a 3-node job gathers
// the other nodes' parts from their daemons over gRPC and merges them with its own: the
// report covers the nodes that answered, with the imbalance between them, and names the
// node whose daemon did not answer (within the wait) and why.
func TestPeersGatherAJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng := propertiestest.Engine(t, properties.Settings{MinSeconds: 1})
	nodes := []string{"n1", "n2", "n3"}
	addrs := map[string]string{}
	peers := map[string]*Peers{}
	for _, n := range nodes {
		p, err := NewPeers(PeersConfig{Node: n, Engine: eng, Log: zerolog.Nop(), Wait: 500 * time.Millisecond,
			Nodes: func(context.Context, uint32) ([]string, error) { return nodes, nil },
			Addrs: func(context.Context) (map[string]string, error) { return addrs, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		peers[n] = p
		if n == "n3" {
			// A node whose daemon does not answer: a listener that never accepts.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			addrs[n] = ln.Addr().String()
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[n] = ln.Addr().String()
		go uplink.Serve(ctx, ln, &uplink.NodeServer{Node: n, Parts: p})
	}
	// n1 computes, n2 idles; n3's part never arrives.
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < 5; i++ {
		for k, n := range nodes {
			user := 95.0
			if k == 1 {
				user = 5
			}
			recs := []properties.Record{{Key: "cpu_user_pct", Device: "node", Value: user, Severity: 0}}
			for c := 0; c < 2; c++ {
				recs = append(recs, properties.Record{Key: "cpi", Device: fmt.Sprintf("cpu%d", c), Value: 1 + float64(k), Severity: 0})
			}
			peers[n].Send(7, t0.Add(time.Duration(i)*time.Minute), 60, recs, 0, sample.Energy{})
		}
	}
	wide, err := peers["n1"].JobWide(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"n1", "n2"}, wide.Nodes); diff != "" {
		t.Errorf("nodes covered (-want +got):\n%s", diff)
	}
	want := []digest.MissingNode{{Node: "n3", Why: "its persyst daemon did not answer in time"}}
	if wide.Coverage == nil || !cmp.Equal(want, wide.Coverage.Missing) {
		t.Errorf("missing nodes %+v, want %+v", wide.Coverage, want)
	}
	found := false
	for _, p := range wide.Properties {
		if p.Key == "inter_node_imbalance" {
			found = p.Finding
		}
		if p.Key == "cpi" && p.Count != 20 {
			t.Errorf("cpi: %d values, want 20 (2 nodes × 2 CPUs × 5 cycles)", p.Count)
		}
	}
	if !found {
		t.Errorf("no imbalance between a busy and an idle node: %+v", wide.Findings)
	}
	// A node forgets its part a while after the job ended there, not at once: the
	// batch host may ask after the job's end on other nodes.
	peers["n2"].Forget(7)
	if p := peers["n2"].Part(7); len(p.Nodes) != 1 {
		t.Errorf("part right after the job ended: %+v", p)
	}
	if p := peers["n1"].Part(99); len(p.Nodes) != 0 || !strings.Contains(p.From, "n1") {
		t.Errorf("part of an unknown job: %+v", p)
	}
}

// TestPeersAlone: a job Slurm runs on one node only keeps no part there (no other node
// will ask for it), while its records still go to the collector tree; once it ended,
// the same job id is kept again.
func TestPeersAlone(t *testing.T) {
	eng := propertiestest.Engine(t)
	p, err := NewPeers(PeersConfig{Node: "n1", Engine: eng, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tree := &countingTree{}
	p.UseTree(tree)
	recs := []properties.Record{{Key: "cpu_user_pct", Device: "node", Value: 50}}
	t0 := time.Unix(1_800_000_000, 0)
	p.Alone(7)
	p.Send(7, t0, 60, recs, 1, sample.Energy{})
	p.Send(8, t0, 60, recs, 1, sample.Energy{})
	if got := p.Part(7); len(got.Nodes) != 0 {
		t.Errorf("part of a job alone on its node: %+v, want none", got)
	}
	if got := p.Part(8); len(got.Nodes) != 1 {
		t.Errorf("part of a job not known to be alone: %+v, want this node's", got)
	}
	if tree.sent != 2 {
		t.Errorf("the tree got %d cycles, want 2 (a job alone on its node still goes there)", tree.sent)
	}
	p.Forget(7)
	p.Send(7, t0.Add(time.Minute), 60, recs, 1, sample.Energy{})
	if got := p.Part(7); len(got.Nodes) != 1 {
		t.Errorf("part of a later job with the id: %+v, want this node's", got)
	}
}

// countingTree counts the cycles Peers hands to the tree.
type countingTree struct{ sent int }

func (c *countingTree) Send(uint32, time.Time, float64, []properties.Record, int, sample.Energy) {
	c.sent++
}
func (c *countingTree) JobWide(context.Context, uint32) (*digest.Report, error) {
	return nil, fmt.Errorf("no tree")
}
func (c *countingTree) Forget(uint32)              {}
func (c *countingTree) Aggregation(uint32) string  { return "" }
func (c *countingTree) Pending() int               { return 0 }
func (c *countingTree) Keep(uint32, digest.Report) {}
func (c *countingTree) KeepNotice(digest.Notice)   {}

// TestTreeCoverageCompleted: the collector tree's job-wide report covers the nodes whose
// data reached it; the job's other nodes are asked why not, so that a part that ended
// before it could be measured is short (no gap) and a node that measured nothing says
// why in its own words.
func TestTreeCoverageCompleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng := propertiestest.Engine(t, properties.Settings{MinSeconds: 1})
	nodes := []string{"n1", "n2", "n3", "n4"}
	explain := map[string]func(uint32) (string, bool){
		"n3": func(uint32) (string, bool) { return "its part ended before it could be measured", true },
		"n4": func(uint32) (string, bool) {
			return "its persyst daemon could not measure the job (its log says why)", false
		},
	}
	batch := servePeers(t, ctx, eng, nodes, func(n string, p *Peers) {
		if why := explain[n]; why != nil {
			p.Explain(why)
		}
	})["n1"]
	batch.UseTree(&fixedTree{wide: digest.Report{JobID: 7, Nodes: []string{"n1", "n2"}}})
	wide, err := batch.JobWide(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := &digest.Coverage{
		Missing: []digest.MissingNode{{Node: "n4", Why: "its persyst daemon could not measure the job (its log says why)"}},
		Short:   []string{"n3"},
	}
	if diff := cmp.Diff(want, wide.Coverage); diff != "" {
		t.Errorf("coverage -want +got:\n%s", diff)
	}
}

// servePeers makes a node daemon's Peers for each node, prepared by setup, and serves
// each on a loopback port (closed with the test).
func servePeers(t *testing.T, ctx context.Context, eng *properties.Engine, nodes []string, setup func(node string, p *Peers)) map[string]*Peers {
	t.Helper()
	addrs := map[string]string{}
	peers := map[string]*Peers{}
	for _, n := range nodes {
		p, err := NewPeers(PeersConfig{Node: n, Engine: eng, Log: zerolog.Nop(), Wait: 2 * time.Second,
			Nodes: func(context.Context, uint32) ([]string, error) { return nodes, nil },
			Addrs: func(context.Context) (map[string]string, error) { return addrs, nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		peers[n] = p
		setup(n, p)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[n] = ln.Addr().String()
		go uplink.Serve(ctx, ln, &uplink.NodeServer{Node: n, Parts: p})
	}
	return peers
}

// fixedTree is a collector tree that holds one job-wide report.
type fixedTree struct {
	countingTree
	wide digest.Report
}

func (f *fixedTree) Aggregation(uint32) string { return "collector" }
func (f *fixedTree) JobWide(context.Context, uint32) (*digest.Report, error) {
	w := f.wide
	return &w, nil
}

// TestPeersCompareNodes: each node's daemon sends its phases with its part; the batch
// host compares them, names the node unlike the rest, takes the job's interference from
// the node that lost the most, and leaves out phases a node sent for another node.
func TestPeersCompareNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng := propertiestest.Engine(t, properties.Settings{MinSeconds: 1})
	t0 := time.Unix(1_800_000_000, 0)
	compute := []float64{0.49, 0, 0, 0, 0, 0, 0, 0.4, 0, 0.1}
	writes := []float64{0.2, 0.3, 0, 0.8, 0, 0.9, 0, 0.2, 0, 0.2}
	stretch := func(from, to int) []phases.Stretch {
		return []phases.Stretch{{From: t0.Add(time.Duration(from) * time.Minute), To: t0.Add(time.Duration(to) * time.Minute)}}
	}
	one := func(node string, lost float64) phases.NodePhases {
		return phases.NodePhases{Node: node, NCPUs: 2, Phases: []phases.Phase{{N: 1, Stretches: stretch(0, 60), Seconds: 3600, Share: 1, Centroid: compute}},
			Interference: &phases.Interference{Seconds: 3600, Share: lost, LostSeconds: lost * 3600, Class: phases.Class(lost)}}
	}
	sent := map[string]phases.NodePhases{"n1": one("n1", 0.01), "n2": one("n2", 0), "n3": one("n3", 0.2),
		"n4": {Node: "n4", NCPUs: 2, Phases: []phases.Phase{
			{N: 1, Stretches: stretch(0, 20), Seconds: 1200, Share: 1.0 / 3, Centroid: writes, Traits: phases.Traits{WriteCalls: 5e4}},
			{N: 2, Stretches: stretch(20, 60), Seconds: 2400, Share: 2.0 / 3, Centroid: compute}}},
		// n5 sends phases as n2's, which were nothing like n2's own.
		"n5": {Node: "n2", NCPUs: 2, Phases: []phases.Phase{{N: 1, Stretches: stretch(0, 60), Seconds: 3600, Share: 1, Centroid: writes}}},
	}
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	peers := servePeers(t, ctx, eng, nodes, func(n string, p *Peers) {
		b, err := json.Marshal(sent[n])
		if err != nil {
			t.Fatal(err)
		}
		p.NodePhases(func(uint32) []byte { return b })
		for i := 0; i < 5; i++ {
			p.Send(8, t0.Add(time.Duration(i)*time.Minute), 60, []properties.Record{{Key: "cpu_user_pct", Device: "node", Value: 90}}, 0, sample.Energy{})
		}
	})
	// Without a tree, then with one (which carries records, not phases: the batch host
	// asks the nodes for their phases itself).
	for _, tree := range []bool{false, true} {
		if tree {
			peers["n1"].UseTree(&fixedTree{wide: digest.Report{JobID: 8, Nodes: nodes}})
		}
		wide, err := peers["n1"].JobWide(ctx, 8)
		if err != nil {
			t.Fatal(err)
		}
		a := wide.Alike
		if a == nil {
			t.Fatalf("tree %v: no comparison of the nodes in %+v", tree, wide)
		}
		var unlike []string
		for _, u := range a.Unlike {
			unlike = append(unlike, u.Node)
		}
		if diff := cmp.Diff([]string{"n4"}, unlike); diff != "" || a.Nodes != 4 {
			t.Errorf("tree %v: compared %d nodes (want 4: n5's are n2's), unlike (-want +got):\n%s", tree, a.Nodes, diff)
		}
		if len(a.Unlike) > 0 && (math.Abs(a.Unlike[0].Alike-2.0/3) > 0.01 || a.Unlike[0].Traits.WriteCalls != 5e4) {
			t.Errorf("tree %v: n4: %+v, want alike 2/3 of its time, writing then", tree, a.Unlike[0])
		}
		if wide.InterferenceNode != "n3" || wide.Interference == nil || wide.Interference.Share != 0.2 {
			t.Errorf("tree %v: interference %+v on %q, want n3's 20 %%", tree, wide.Interference, wide.InterferenceNode)
		}
	}
}
