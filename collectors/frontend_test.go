package collectors

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/persyst/persyst/balance"
	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/collectors/uplink"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/properties/propertiestest"
	"github.com/persyst/persyst/quantile"
	"github.com/persyst/persyst/sample"
)

// serveCollector runs a real collector on a loopback port until the returned stop.
func serveCollector(t *testing.T, name string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := storetest.Open(t, store.Options{})
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
	ships, addrs := serveNodes(t, ctx, nodes, uplink.Config{})
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

// TestSplitJobMergedAtTheFrontend: a 4-node job larger than one collector (l_max 2) is
// split over both collectors; its batch host asks the frontend, the job's aggregation
// point, which merges the collectors' parts: all 4 nodes, value quantiles from the
// merged sketches within their 1 % error, and the imbalance between nodes that no
// single collector sees.
func TestSplitJobMergedAtTheFrontend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng := propertiestest.Engine(t)
	var addrs []string
	for _, name := range []string{"col1", "col2"} {
		st := storetest.Open(t, store.Options{})
		c, _ := New(Config{Name: name, Store: st, Engine: eng, Log: zerolog.Nop()})
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		sctx, scancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { Serve(sctx, ln, c); close(done) }()
		t.Cleanup(func() { scancel(); <-done; st.Close() })
		addrs = append(addrs, ln.Addr().String())
	}
	nodes := []string{"n1", "n2", "n3", "n4"}
	ships, nodeAddrs := serveNodes(t, ctx, nodes, uplink.Config{})
	fln, _ := net.Listen("tcp", "127.0.0.1:0")
	f, err := NewFrontend(FrontendConfig{
		Collectors: map[string]string{"col1": addrs[0], "col2": addrs[1]},
		NodeAddr:   func(n string) string { return nodeAddrs[n] },
		Nodes:      nodes,
		Jobs: func(context.Context) ([]balance.Job, error) {
			return []balance.Job{{ID: "20", Nodes: nodes}}, nil
		},
		Balance: balance.Config{LMax: 2},
		Self:    fln.Addr().String(),
		Engine:  eng,
		Log:     zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fsrv := grpc.NewServer()
	pb.RegisterCollectorServer(fsrv, f)
	go fsrv.Serve(fln)
	defer fsrv.Stop()

	res, err := f.Cycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := res.ByJob[20]
	used := map[string]bool{}
	for _, a := range r.NodeCollector {
		used[a] = true
	}
	if len(used) != 2 || r.AggregationPoint != fln.Addr().String() {
		t.Fatalf("job 20 route %v: want it split over both collectors, aggregated at the frontend", r)
	}
	// Every node sends 5 cycles; n4 idles, the others are busy; write sizes differ by node.
	var all []float64
	for i := 0; i < 5; i++ {
		ts := time.Unix(1_800_000_000+60*int64(i), 0)
		for k, n := range nodes {
			user := 95.0
			if n == "n4" {
				user = 3
			}
			size := float64(512 * (k + 1))
			all = append(all, size)
			ships[n].Send(20, ts, 60, []properties.Record{
				{Key: "cpu_user_pct", Device: "node", Value: user, Severity: math.Max(0, 1-user/80)},
				{Key: "io_write_request_size", Device: "node", Value: size, Severity: 1 - size/(256<<10)},
			}, 0, sample.Energy{})
			if err := ships[n].FlushJob(ctx, 20); err != nil {
				t.Fatal(err)
			}
		}
	}
	agg := ships["n1"].Aggregation(20)
	wide, err := ships["n1"].Fetch(ctx, agg, 20)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(wide.Nodes, nodes) || wide.Samples != 5 {
		t.Errorf("merged report covers %v with %d samples", wide.Nodes, wide.Samples)
	}
	got := map[string]properties.Result{}
	for _, p := range wide.Properties {
		got[p.Key] = p
	}
	w := got["io_write_request_size"]
	exact, _ := quantile.Summarize(all, 10)
	for i, q := range w.Deciles {
		if math.Abs(q-exact.Quantiles[i]) > 0.02*exact.Quantiles[i] {
			t.Errorf("decile %d = %v, exact %v: beyond the sketch's error", i, q, exact.Quantiles[i])
		}
	}
	if w.Count != 20 || math.Abs(w.TimeShare-1) > 1e-9 {
		t.Errorf("io_write_request_size: count %d share %v", w.Count, w.TimeShare)
	}
	if in := got["inter_node_imbalance"]; !in.Finding {
		t.Errorf("the imbalance between nodes of different collectors is not found: %+v", in)
	}
}

// TestFrontendTopology: with a tree from topology.conf, a job's nodes go to their own
// leaf switch's collector, and when it dies, to the nearest live one.
func TestFrontendTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a1, stop1 := serveCollector(t, "col1")
	a2, _ := serveCollector(t, "col2")
	a3, _ := serveCollector(t, "col3")
	tree, err := balance.ParseTopologyConf(strings.NewReader(
		"SwitchName=col1 Nodes=n[1-2]\nSwitchName=col2 Nodes=n[3-4]\nSwitchName=col3 Nodes=n[5-6]\n" +
			"SwitchName=spine1 Switches=col[1-2]\nSwitchName=spine2 Switches=col3\nSwitchName=top Switches=spine[1-2]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ships, addrs := serveNodes(t, ctx, tree.Nodes(), uplink.Config{})
	f, err := NewFrontend(FrontendConfig{
		Collectors: map[string]string{"col1": a1, "col2": a2, "col3": a3},
		NodeAddr:   func(n string) string { return addrs[n] },
		Tree:       tree,
		Jobs: func(context.Context) ([]balance.Job, error) {
			return []balance.Job{{ID: "30", Nodes: []string{"n1", "n2"}}}, nil
		},
		Timeout: 500 * time.Millisecond,
		Log:     zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ships["n1"].Route(30); got != a1 {
		t.Errorf("job 30 on n1 goes to %s, want its own switch's collector col1 (%s)", got, a1)
	}
	stop1()
	if _, err := f.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ships["n1"].Route(30); got != a2 {
		t.Errorf("after col1 died, job 30 on n1 goes to %s, want the nearest live collector col2 (%s), not col3 (%s)", got, a2, a3)
	}
}

// keepingFrontend is a frontend of nodes n1-n3 that keeps reports and notices in st, with
// the job map's facts (a job not there is not known).
func keepingFrontend(t *testing.T, st *store.Store, facts map[string]*jobmap.Job) *Frontend {
	t.Helper()
	f, err := NewFrontend(FrontendConfig{Collectors: map[string]string{"c1": "127.0.0.1:1"}, Nodes: []string{"n1", "n2", "n3"},
		Self: "127.0.0.1:2", Store: st, Log: zerolog.Nop(), NodeAddr: func(string) string { return "127.0.0.1:3" },
		Jobs: func(context.Context) ([]balance.Job, error) { return nil, nil },
		Facts: func(_ context.Context, id string) (*jobmap.Job, error) {
			if j, ok := facts[id]; ok {
				return j, nil
			}
			return nil, jobmap.ErrNoJob
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// TestKeepReport: the frontend keeps a job's final report, with its user from the job map,
// when its batch host sends it; anything else is refused.
func TestKeepReport(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{})
	facts := map[string]*jobmap.Job{
		"7": {JobID: 7, User: "alice", Account: "chem", Partition: "gpu", QOS: "high", Nodes: []string{"n1", "n2"}, NodeList: "n[1-2]",
			BatchHost: "n2", State: "COMPLETED", Start: time.Unix(1_700_000_000, 0).UTC(), End: time.Unix(1_700_003_600, 0).UTC(),
			Alloc: []jobmap.NodeAlloc{{Node: "n1", MemoryMB: 1000}, {Node: "n2", MemoryMB: 1000}}},
		"8": {JobID: 8, User: "bob", Nodes: []string{"n3"}, NodeList: "n3", State: "RUNNING"}, // srun: first node
	}
	f := keepingFrontend(t, st, facts)
	report := func(id uint32) []byte {
		b, _ := json.Marshal(digest.Report{Schema: digest.SchemaVersion, JobID: id, Nodes: []string{"n1"}, Findings: []properties.Result{{Key: "idle_cores"}}})
		return b
	}
	cases := []struct {
		name string
		in   *pb.JobSummary
		want string // "" : kept
	}{
		{"from its batch host", &pb.JobSummary{JobId: 7, Nodes: []string{"n2"}, ReportJson: report(7)}, ""},
		{"from another node of the job", &pb.JobSummary{JobId: 7, Nodes: []string{"n1"}, ReportJson: report(7)}, "reports come from its batch host n2"},
		{"a job without a batch script, from its first node", &pb.JobSummary{JobId: 8, Nodes: []string{"n3"}, ReportJson: report(8)}, ""},
		{"another job's report", &pb.JobSummary{JobId: 8, Nodes: []string{"n3"}, ReportJson: report(7)}, "report of job 7"},
		{"not JSON", &pb.JobSummary{JobId: 8, Nodes: []string{"n3"}, ReportJson: []byte("{")}, "report:"},
		{"too big", &pb.JobSummary{JobId: 8, Nodes: []string{"n3"}, ReportJson: make([]byte, MaxKeptReport+1)}, "more than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ack, err := f.KeepReport(ctx, c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := ack.GetError(); (c.want == "") != ack.GetOk() || !strings.Contains(got, c.want) {
				t.Errorf("ack %v, want error %q", ack, c.want)
			}
		})
	}
	for id, user := range map[uint32]string{7: "alice", 8: "bob"} {
		j, err := st.Job(ctx, id)
		if err != nil || j.User != user {
			t.Errorf("job %d kept as %+v, %v; want user %s", id, j, err, user)
		}
		if _, err := st.Report(ctx, id); err != nil {
			t.Errorf("job %d's report not kept: %v", id, err)
		}
	}
	j, _ := st.Job(ctx, 7)
	want := store.Job{Key: j.Key, ID: 7, User: "alice", Account: "chem", Partition: "gpu", QOS: "high", State: "COMPLETED",
		Nodes: "n[1-2]", NNodes: 2, ReqMemMB: 2000, Start: facts["7"].Start, End: facts["7"].End, Updated: j.Updated}
	if d := cmp.Diff(want, *j); d != "" {
		t.Errorf("job 7's facts (-want +got):\n%s", d)
	}
	// Slurm gives id 7 to another job (slurmctld started again from FirstJobId): it is
	// kept beside the first, which stays whole.
	facts["7"] = &jobmap.Job{JobID: 7, User: "carol", Nodes: []string{"n2"}, NodeList: "n2", State: "FAILED",
		Start: time.Unix(1_710_000_000, 0).UTC(), End: time.Unix(1_710_000_600, 0).UTC()}
	if ack, err := f.KeepReport(ctx, &pb.JobSummary{JobId: 7, Nodes: []string{"n2"}, ReportJson: report(7)}); err != nil || !ack.GetOk() {
		t.Fatalf("the second job 7: %v, %v", ack, err)
	}
	js, err := st.Jobs(ctx, 7)
	if err != nil || len(js) != 2 || js[0].User != "carol" || js[1].User != "alice" {
		t.Errorf("jobs with id 7: %+v, %v; want carol's and alice's", js, err)
	}
	for _, j := range js {
		if _, err := st.ReportAt(ctx, j.Key); err != nil {
			t.Errorf("%s: no report: %v", j.Name(), err)
		}
	}
}

func TestAdvertised(t *testing.T) {
	host := func() (string, error) { return "fe1", nil }
	for in, want := range map[string]string{
		"":                  "",
		":16832":            "fe1:16832",
		"0.0.0.0:16832":     "fe1:16832",
		"[::]:16832":        "fe1:16832",
		"10.0.0.9:16832":    "10.0.0.9:16832",
		"frontend-a:16832":  "frontend-a:16832",
		"[2001:db8::1]:443": "[2001:db8::1]:443",
	} {
		if got := advertised(in, host); got != want {
			t.Errorf("advertised(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFrontendEpisodes: the node daemons answer their routes with their jobs' I/O
// stalls; when 3 of the site's 5 jobs stall in the same two minutes, the frontend finds
// a site-wide episode, keeps it for the site view, and sends it to the nodes of the
// jobs it stalled, and to no other job.
func TestFrontendEpisodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a1, _ := serveCollector(t, "col1")
	nodes := []string{"n1", "n2", "n3", "n4"}
	ships, addrs := serveNodes(t, ctx, nodes, uplink.Config{})
	jobs := []balance.Job{{ID: "21", Nodes: []string{"n1"}}, {ID: "22", Nodes: []string{"n2"}}, {ID: "23", Nodes: []string{"n3"}},
		{ID: "24", Nodes: []string{"n4"}}, {ID: "25", Nodes: []string{"n1"}}}
	st := storetest.Open(t, store.Options{})
	f, err := NewFrontend(FrontendConfig{
		Collectors: map[string]string{"col1": a1},
		NodeAddr:   func(n string) string { return addrs[n] },
		Nodes:      nodes,
		Jobs:       func(context.Context) ([]balance.Job, error) { return jobs, nil },
		Store:      st,
		Period:     time.Minute,
		Timeout:    500 * time.Millisecond,
		Log:        zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t0 := time.Unix(1_800_000_000, 0).Truncate(time.Minute)
	for c := 0; c < 4; c++ {
		for _, j := range jobs {
			id := map[string]uint32{"21": 21, "22": 22, "23": 23, "24": 24, "25": 25}[j.ID]
			sev := 0.0
			if id <= 23 && (c == 1 || c == 2) {
				sev = 0.8
			}
			ships[j.Nodes[0]].Send(id, t0.Add(time.Duration(c)*time.Minute), 60,
				[]properties.Record{{Key: uplink.StallKey, Device: "node", Value: 100 * sev, Severity: sev}, {Key: "cpu_user_pct", Device: "node", Value: 50}}, 0, sample.Energy{})
		}
	}
	// The first cycle gathers the stalls, the second sends the episode.
	for range 2 {
		if _, err := f.Cycle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		Job           uint32
		From, To      time.Time
		Jobs, Stalled int
	}
	var gots []got
	for _, j := range jobs {
		id := map[string]uint32{"21": 21, "22": 22, "23": 23, "24": 24, "25": 25}[j.ID]
		for _, e := range ships[j.Nodes[0]].Episodes(id) {
			gots = append(gots, got{id, e.From, e.To, e.Jobs, e.Stalled})
		}
	}
	var want []got
	for _, id := range []uint32{21, 22, 23} {
		want = append(want, got{id, t0, t0.Add(2 * time.Minute), 5, 3})
	}
	if diff := cmp.Diff(want, gots); diff != "" {
		t.Errorf("episodes the nodes were sent (-want +got):\n%s", diff)
	}
	kept, err := st.Episodes(ctx, t0.Add(-time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0].Stalled != 3 || !kept[0].From.Equal(t0) {
		t.Errorf("episodes kept for the site view: %+v, want the one", kept)
	}
}
