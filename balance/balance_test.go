package balance

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// twoSyncs: frontend → s1 (c1, c2), s2 (c3, c4); 4 nodes per collector.
const twoSyncs = `
Frontend=fe Syncs=s[1-2]
Sync=s1 Collectors=c[1-2]
Sync=s2 Collectors=c[3-4]
Collector=c1 Nodes=n[1-4]
Collector=c2 Nodes=n[5-8]
Collector=c3 Nodes=n[9-12]
Collector=c4 Nodes=n[13-16]
`

func sends(to string, nodes ...string) []Send {
	out := make([]Send, len(nodes))
	for i, n := range nodes {
		out[i] = Send{Node: n, To: to}
	}
	return out
}

func hl(t testing.TB, expr string) []string {
	t.Helper()
	tr := mustSpec(t, "Collector=x Nodes="+expr)
	return tr.Nodes()
}

func TestBalanceSingleJobs(t *testing.T) {
	tr := mustSpec(t, twoSyncs)
	tests := []struct {
		name     string
		job      Job
		want     Route
		balanced int // tree nodes used, balanced
		topology int // tree nodes used, up the topology
	}{
		{
			name:     "one-node job is processed locally",
			job:      Job{ID: "1", Nodes: []string{"n3"}},
			want:     Route{JobID: "1", Load: 1, Level: KindNode, Aggregator: "n3", Sends: sends("n3", "n3")},
			balanced: 0, topology: 3,
		},
		{
			name: "medium job over two collectors goes whole to the closer one",
			job:  Job{ID: "2", Nodes: []string{"n4", "n5", "n6"}},
			// c1: 1+2+2 = 5, c2: 2+1+1 = 4.
			want:     Route{JobID: "2", Load: 3, Level: KindCollector, Aggregator: "c2", Collectors: []string{"c2"}, Sends: sends("c2", "n4", "n5", "n6")},
			balanced: 1, topology: 4,
		},
		{
			name: "big job is split and merged at the sync agent",
			job:  Job{ID: "3", Nodes: hl(t, "n[1-6]")},
			want: Route{JobID: "3", Load: 6, Level: KindSync, Aggregator: "s1", Collectors: []string{"c1", "c2"},
				Sends: append(sends("c1", "n1", "n2", "n3", "n4"), sends("c2", "n5", "n6")...)},
			balanced: 3, topology: 4,
		},
		{
			name: "rest of a big job goes to the least-loaded chosen collector",
			// n_c = 2: c2 (distance 14) takes n5-n8, then c1 and c3 tie at
			// 8 and c1 (lower index) takes n3, n4; the rest n9, n10 goes to
			// c1 (load 2 < 4), so the job merges at s1, not the frontend.
			job: Job{ID: "4", Nodes: hl(t, "n[3-10]")},
			want: Route{JobID: "4", Load: 8, Level: KindSync, Aggregator: "s1", Collectors: []string{"c2", "c1"},
				Sends: append(sends("c1", "n3", "n4"), append(sends("c2", "n5", "n6", "n7", "n8"), sends("c1", "n9", "n10")...)...)},
			balanced: 3, topology: 6,
		},
		{
			name: "job on two sync agents merges at the frontend",
			job:  Job{ID: "5", Nodes: hl(t, "n[1-4,13-16]")},
			want: Route{JobID: "5", Load: 8, Level: KindFrontend, Aggregator: "fe", Collectors: []string{"c1", "c4"},
				Sends: append(sends("c1", "n1", "n2", "n3", "n4"), sends("c4", "n13", "n14", "n15", "n16")...)},
			balanced: 5, topology: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Balance(tr, []Job{tc.job}, Config{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Route{tc.want}, res.Routes); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			if res.Stats.TreeNodesBalanced != tc.balanced || res.Stats.TreeNodesTopology != tc.topology {
				t.Errorf("tree nodes balanced/topology = %d/%d, want %d/%d",
					res.Stats.TreeNodesBalanced, res.Stats.TreeNodesTopology, tc.balanced, tc.topology)
			}
			if got, want := res.Routes[0].Exact(), tc.want.Level <= KindCollector; got != want {
				t.Errorf("Exact() = %v, want %v", got, want)
			}
		})
	}
}

// TestOverflowPolicies covers the ambiguity of Algorithm 2 lines 22–25.
// Two collectors of 4 nodes, l_max 4. Jobs 1 and 2 (3 nodes each) fill c1
// and c2 to 3; job 3 has one node under each. Both collectors have the
// minimum load 3 and the same distance, so c1 is chosen; it takes its child
// n4 (load 4) and the rest, n8, does not fit.
func TestOverflowPolicies(t *testing.T) {
	tr := mustSpec(t, "Frontend=fe Collectors=c[1-2]\nCollector=c1 Nodes=n[1-4]\nCollector=c2 Nodes=n[5-8]\n")
	jobs := []Job{
		{ID: "3", Nodes: []string{"n4", "n8"}},
		{ID: "2", Nodes: []string{"n5", "n6", "n7"}},
		{ID: "1", Nodes: []string{"n1", "n2", "n3"}},
	}
	first := []Route{
		{JobID: "2", Load: 3, Level: KindCollector, Aggregator: "c2", Collectors: []string{"c2"}, Sends: sends("c2", "n5", "n6", "n7")},
		{JobID: "1", Load: 3, Level: KindCollector, Aggregator: "c1", Collectors: []string{"c1"}, Sends: sends("c1", "n1", "n2", "n3")},
	}
	tests := []struct {
		policy    Overflow
		job3      Route
		loads     []int
		overJobs  int
		overColls int
	}{
		{
			// As printed: the medium job stays exact, c1 goes above l_max.
			policy: OverflowAllow,
			job3:   Route{JobID: "3", Load: 2, Level: KindCollector, Aggregator: "c1", Collectors: []string{"c1"}, Sends: sends("c1", "n4", "n8")},
			loads:  []int{5, 3}, overJobs: 1, overColls: 1,
		},
		{
			// The variant: acquire c2, which takes its child n8; split job.
			policy: OverflowSpill,
			job3: Route{JobID: "3", Load: 2, Level: KindFrontend, Aggregator: "fe", Collectors: []string{"c1", "c2"},
				Sends: []Send{{"n4", "c1"}, {"n8", "c2"}}},
			loads: []int{4, 4}, overJobs: 0, overColls: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.policy.String(), func(t *testing.T) {
			res, err := Balance(tr, jobs, Config{Overflow: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			want := append([]Route{tc.job3}, first...)
			if diff := cmp.Diff(want, res.Routes); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.loads, res.CollectorLoad); diff != "" {
				t.Errorf("collector loads (-want +got):\n%s", diff)
			}
			s := res.Stats
			if s.JobsOverLMax != tc.overJobs || s.CollectorsOverLMax != tc.overColls || s.LMax != 4 {
				t.Errorf("over l_max: jobs %d collectors %d (l_max %d), want %d %d (4)", s.JobsOverLMax, s.CollectorsOverLMax, s.LMax, tc.overJobs, tc.overColls)
			}
		})
	}
}

func TestBiggestJobFirst(t *testing.T) {
	tr := mustSpec(t, "Frontend=fe Collectors=c[1-2]\nCollector=c1 Nodes=n[1-4]\nCollector=c2 Nodes=n[5-8]\n")
	// Both jobs prefer c1 by distance. The big one (listed last) is placed
	// first and gets c1; the small one then goes to the empty c2.
	jobs := []Job{
		{ID: "small", Nodes: []string{"n1", "n2"}},
		{ID: "big", Nodes: []string{"n3", "n4", "n5"}},
	}
	res, err := Balance(tr, jobs, Config{LMax: 8})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{res.Routes[0].Aggregator, res.Routes[1].Aggregator}
	if diff := cmp.Diff([]string{"c2", "c1"}, got); diff != "" {
		t.Errorf("aggregators (-want +got):\n%s", diff)
	}
}

func TestStatistics(t *testing.T) {
	tr := mustSpec(t, twoSyncs)
	jobs := []Job{
		{ID: "1", Nodes: []string{"n1"}},                         // local, load 2
		{ID: "2", Nodes: []string{"n2", "n3"}},                   // c1, load 4
		{ID: "3", Nodes: hl(t, "n[9-12,13-14]")},                 // split c3+c4, load 12
		{ID: "4", Nodes: []string{"n5"}, LoadPerNode: 3},         // local, load 3
		{ID: "5", Nodes: []string{"n6", "n7"}, LoadPerNode: 1},   // load 2
		{ID: "6", Nodes: hl(t, "n[1-16]"), LoadPerNode: 0},       // shared nodes, load 32
		{ID: "7", Nodes: []string{"n8", "n16"}, LoadPerNode: 20}, // load 40 > l_max 8: n_c 5
	}
	res, err := Balance(tr, jobs, Config{LoadPerNode: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Stats
	got := []int{s.Jobs, s.LocalJobs, s.CollectorJobs, s.SyncJobs + s.FrontendJobs, s.TotalLoad, s.LMax, s.Collectors}
	want := []int{7, 2, 2, 3, 2 + 4 + 12 + 3 + 2 + 32 + 40, 8, 4}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s.ExactShareJobs != 4.0/7 {
		t.Errorf("exact share (jobs) = %v, want 4/7", s.ExactShareJobs)
	}
	if want := float64(2+4+3+2) / 95; s.ExactShareLoad != want {
		t.Errorf("exact share (load) = %v, want %v", s.ExactShareLoad, want)
	}
	sum := 0
	for _, l := range res.CollectorLoad {
		sum += l
	}
	if sum != 95-2-3 || s.MeanCollectorLoad != float64(sum)/4 {
		t.Errorf("collector loads %v mean %v", res.CollectorLoad, s.MeanCollectorLoad)
	}
	if s.RequiredCollectors != (90+7)/8 {
		t.Errorf("required collectors %d", s.RequiredCollectors)
	}
	// Job 7 has load 40 on 2 nodes with l_max 8: n_c = 5 is clamped to the
	// 4 collectors, and each node's load alone exceeds l_max.
	if r := res.Routes[6]; len(r.Collectors) != 2 || r.Exact() {
		t.Errorf("job 7 route %+v", r)
	}
}

func TestBalanceErrors(t *testing.T) {
	tr := mustSpec(t, twoSyncs)
	tests := []struct {
		name string
		jobs []Job
		cfg  Config
		want string
	}{
		{"unknown node", []Job{{ID: "1", Nodes: []string{"n1", "x9"}}}, Config{}, `job 1: node "x9" is not in the agent tree`},
		{"agent as node", []Job{{ID: "1", Nodes: []string{"c1"}}}, Config{}, `"c1" is a collector`},
		{"node twice", []Job{{ID: "1", Nodes: []string{"n1", "n1"}}}, Config{}, `node "n1" listed twice`},
		{"duplicate id", []Job{{ID: "7", Nodes: []string{"n1"}}, {ID: "7", Nodes: []string{"n2"}}}, Config{}, "job 7 given twice"},
		{"no id", []Job{{Nodes: []string{"n1"}}}, Config{}, "no id"},
		{"no nodes", []Job{{ID: "1"}}, Config{}, "no nodes"},
		{"negative load", []Job{{ID: "1", Nodes: []string{"n1"}, LoadPerNode: -1}}, Config{}, "load per node -1"},
		{"negative config", nil, Config{LMax: -3}, "l_max -3"},
		{"bad policy", nil, Config{Overflow: 7}, "overflow policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Balance(tr, tc.jobs, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Balance(nil, nil, Config{}); err == nil {
		t.Error("nil tree: no error")
	}
	res, err := Balance(tr, nil, Config{})
	if err != nil || len(res.Routes) != 0 || res.Stats.Jobs != 0 {
		t.Errorf("no jobs: %+v, %v", res, err)
	}
}

func TestCompareIDs(t *testing.T) {
	ids := []string{"10", "9", "009", "abc", "1_2", "100", "ab"}
	got := append([]string(nil), ids...)
	for i := range got { // insertion sort with compareIDs
		for j := i; j > 0 && compareIDs(got[j-1], got[j]) > 0; j-- {
			got[j-1], got[j] = got[j], got[j-1]
		}
	}
	want := []string{"9", "009", "10", "100", "1_2", "ab", "abc"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// randomJobs draws jobs on the tree's nodes; nodes may be shared by jobs.
func randomJobs(rng *rand.Rand, tr *Tree, n int) []Job {
	nodes := tr.Nodes()
	jobs := make([]Job, n)
	for i := range jobs {
		size := 1 + rng.Intn(min(len(nodes), 1+rng.Intn(3)*rng.Intn(20)+rng.Intn(4)))
		perm := rng.Perm(len(nodes))[:size]
		jobs[i].ID = fmt.Sprint(rng.Intn(5), "-", i) // ties in load and prefix
		for _, p := range perm {
			jobs[i].Nodes = append(jobs[i].Nodes, nodes[p])
		}
		if rng.Intn(4) == 0 {
			jobs[i].LoadPerNode = 1 + rng.Intn(3)
		}
	}
	return jobs
}

func TestBalanceProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for trial := 0; trial < 300; trial++ {
		tr := randomTree(rng, 3+rng.Intn(20), 1+rng.Intn(6))
		jobs := randomJobs(rng, tr, rng.Intn(40))
		cfg := Config{LoadPerNode: rng.Intn(3), LMax: rng.Intn(12), Overflow: Overflow(rng.Intn(2))}
		res, err := Balance(tr, jobs, cfg)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		name := fmt.Sprintf("trial %d (%s)", trial, cfg.Overflow)
		checkResult(t, name, tr, jobs, cfg, res)

		// Same input, same result.
		again, err := Balance(tr, jobs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(res, again); diff != "" {
			t.Fatalf("%s: second run differs (-first +second):\n%s", name, diff)
		}
		// Input order does not matter (job ids are unique, so the sort is total).
		perm := rng.Perm(len(jobs))
		shuffled := make([]Job, len(jobs))
		for i, p := range perm {
			shuffled[i] = jobs[p]
		}
		res2, err := Balance(tr, shuffled, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range perm {
			if diff := cmp.Diff(res.Routes[p], res2.Routes[i]); diff != "" {
				t.Fatalf("%s: job %s routed differently after shuffling (-want +got):\n%s", name, jobs[p].ID, diff)
			}
		}
		if diff := cmp.Diff(res.Stats, res2.Stats); diff != "" {
			t.Fatalf("%s: statistics differ after shuffling (-want +got):\n%s", name, diff)
		}
	}
}

func checkResult(t *testing.T, name string, tr *Tree, jobs []Job, cfg Config, res *Result) {
	t.Helper()
	if len(res.Routes) != len(jobs) {
		t.Fatalf("%s: %d routes for %d jobs", name, len(res.Routes), len(jobs))
	}
	la := max(cfg.LoadPerNode, 1)
	lmax := res.Stats.LMax
	loads := make([]int, len(tr.collectors))
	total := 0
	for i, j := range jobs {
		r := res.Routes[i]
		l := la
		if j.LoadPerNode > 0 {
			l = j.LoadPerNode
		}
		if r.JobID != j.ID || r.Load != l*len(j.Nodes) || len(r.Sends) != len(j.Nodes) {
			t.Fatalf("%s: job %s: route %+v", name, j.ID, r)
		}
		for k, s := range r.Sends {
			if s.Node != j.Nodes[k] {
				t.Fatalf("%s: job %s: send %d is for %s, want %s", name, j.ID, k, s.Node, j.Nodes[k])
			}
		}
		if len(j.Nodes) == 1 {
			if r.Level != KindNode || r.Aggregator != j.Nodes[0] || r.Sends[0].To != j.Nodes[0] || r.Collectors != nil {
				t.Fatalf("%s: one-node job %s not local: %+v", name, j.ID, r)
			}
			continue
		}
		total += r.Load
		seen := map[string]bool{}
		for _, s := range r.Sends {
			if k, _ := tr.Kind(s.To); k != KindCollector {
				t.Fatalf("%s: job %s: %s sends to %s, a %s", name, j.ID, s.Node, s.To, k)
			}
			seen[s.To] = true
			loads[tr.colSlot[tr.index[s.To]]] += l
		}
		if len(seen) != len(r.Collectors) {
			t.Fatalf("%s: job %s: collectors %v, sends to %v", name, j.ID, r.Collectors, seen)
		}
		agg := r.Collectors[0]
		for _, c := range r.Collectors {
			if !seen[c] {
				t.Fatalf("%s: job %s: collector %s listed but unused", name, j.ID, c)
			}
			agg, _ = tr.LCA(agg, c)
		}
		if k, _ := tr.Kind(agg); r.Aggregator != agg || r.Level != k {
			t.Fatalf("%s: job %s: aggregator %s (%s), want %s (%s)", name, j.ID, r.Aggregator, r.Level, agg, k)
		}
		if r.Exact() != (len(r.Collectors) == 1) {
			t.Fatalf("%s: job %s: exact %v with %d collectors", name, j.ID, r.Exact(), len(r.Collectors))
		}
		if cfg.Overflow == OverflowAllow && r.Load <= lmax && !r.Exact() {
			t.Fatalf("%s: medium job %s (load %d ≤ %d) split: %+v", name, j.ID, r.Load, lmax, r)
		}
	}
	if diff := cmp.Diff(loads, res.CollectorLoad); diff != "" {
		t.Fatalf("%s: collector loads (-from routes +reported):\n%s", name, diff)
	}
	s := res.Stats
	if s.CollectorsOverLMax > 0 && s.JobsOverLMax == 0 {
		t.Fatalf("%s: %d collectors above l_max but no job counted", name, s.CollectorsOverLMax)
	}
	// With the spill policy and unit loads, a collector only goes above
	// l_max when every collector is full.
	unit := cfg.LoadPerNode <= 1
	for _, j := range jobs {
		unit = unit && j.LoadPerNode <= 1
	}
	if cfg.Overflow == OverflowSpill && unit && total < len(loads)*lmax && s.MaxCollectorLoad > lmax {
		t.Fatalf("%s: spill policy: load %d < capacity %d but max collector load %d > l_max %d", name, total, len(loads)*lmax, s.MaxCollectorLoad, lmax)
	}
	if s.LocalJobs+s.CollectorJobs+s.SyncJobs+s.FrontendJobs != s.Jobs {
		t.Fatalf("%s: job counts %+v", name, s)
	}
}

func TestParseOverflow(t *testing.T) {
	for in, want := range map[string]Overflow{"allow": OverflowAllow, "Spill": OverflowSpill, "": OverflowAllow} {
		got, err := ParseOverflow(in)
		if err != nil || got != want {
			t.Errorf("ParseOverflow(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseOverflow("maybe"); err == nil {
		t.Error("ParseOverflow(maybe): no error")
	}
}
