package balance

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fig52 recreates Figure 5.2 of the thesis. The figure itself is not in the
// text, only its three distances; this labelling is one tree consistent
// with them: 12 and 13 are sibling collectors under sync agent 2, 15 is a
// node under collector 12, and 30 is a node under the other sync agent 3.
const fig52 = `
Frontend=1 Syncs=2,3
Sync=2 Collectors=12,13
Sync=3 Collectors=20,21
Collector=12 Nodes=14,15
Collector=13 Nodes=16,17
Collector=20 Nodes=30,31
Collector=21 Nodes=32
`

func mustSpec(t testing.TB, spec string) *Tree {
	t.Helper()
	tr, err := ParseTreeSpec(strings.NewReader(spec))
	if err != nil {
		t.Fatalf("ParseTreeSpec: %v", err)
	}
	return tr
}

func TestFigure52Distances(t *testing.T) {
	tr := mustSpec(t, fig52)
	tests := []struct {
		a, b string
		want int
	}{
		{"13", "15", 2}, // stated in §5.3
		{"12", "15", 1}, // stated in §5.3
		{"15", "30", 3}, // stated in §5.3
		{"15", "15", 0},
		{"14", "15", 1},
		{"12", "13", 1},
		{"13", "30", 3},
		{"1", "30", 3},
		{"2", "3", 1},
	}
	for _, tc := range tests {
		for _, pair := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			got, err := tr.Distance(pair[0], pair[1])
			if err != nil {
				t.Fatalf("Distance(%s, %s): %v", pair[0], pair[1], err)
			}
			if got != tc.want {
				t.Errorf("Distance(%s, %s) = %d, want %d", pair[0], pair[1], got, tc.want)
			}
		}
	}
	if _, err := tr.Distance("15", "99"); err == nil {
		t.Error("Distance with an unknown agent: no error")
	}
	lca, err := tr.LCA("15", "17")
	if err != nil || lca != "2" {
		t.Errorf("LCA(15, 17) = %q, %v; want 2", lca, err)
	}
}

func TestTreeShape(t *testing.T) {
	tr := mustSpec(t, fig52)
	type agent struct {
		Name, Parent string
		Kind         Kind
		Depth        int
	}
	var got []agent
	for i := 0; i < tr.Len(); i++ {
		n := tr.name[i]
		p, _ := tr.Parent(n)
		k, _ := tr.Kind(n)
		d, _ := tr.Depth(n)
		got = append(got, agent{n, p, k, d})
	}
	want := []agent{
		{"1", "", KindFrontend, 0},
		{"2", "1", KindSync, 1},
		{"12", "2", KindCollector, 2},
		{"14", "12", KindNode, 3},
		{"15", "12", KindNode, 3},
		{"13", "2", KindCollector, 2},
		{"16", "13", KindNode, 3},
		{"17", "13", KindNode, 3},
		{"3", "1", KindSync, 1},
		{"20", "3", KindCollector, 2},
		{"30", "20", KindNode, 3},
		{"31", "20", KindNode, 3},
		{"21", "3", KindCollector, 2},
		{"32", "21", KindNode, 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agents (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"12", "13", "20", "21"}, tr.Collectors()); diff != "" {
		t.Errorf("Collectors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"2", "3"}, tr.Agents(KindSync)); diff != "" {
		t.Errorf("syncs (-want +got):\n%s", diff)
	}
	if tr.Root() != "1" || tr.Height() != 3 || len(tr.Nodes()) != 7 {
		t.Errorf("root %q height %d nodes %d", tr.Root(), tr.Height(), len(tr.Nodes()))
	}
}

// slowDistance is the reference: walk both agents to the root, find the
// lowest common ancestor by comparing the paths.
func slowDistance(t *Tree, a, b int32) int {
	path := func(v int32) []int32 {
		var p []int32
		for ; v >= 0; v = t.parent[v] {
			p = append([]int32{v}, p...)
		}
		return p
	}
	pa, pb := path(a), path(b)
	common := 0
	for common < len(pa) && common < len(pb) && pa[common] == pb[common] {
		common++
	}
	return max(len(pa), len(pb)) - common
}

// randomTree builds a random tree with uneven depths: a random number of
// sync levels above each collector.
func randomTree(rng *rand.Rand, maxInner, maxFan int) *Tree {
	var entries []entry
	nodeN := 0
	var grow func(name string, depth int)
	grow = func(name string, depth int) {
		e := entry{name: name, line: len(entries) + 1}
		idx := len(entries)
		entries = append(entries, e)
		if depth > 0 && (depth > 5 || len(entries) > maxInner || rng.Intn(3) == 0) {
			for k := 0; k < 1+rng.Intn(maxFan); k++ {
				nodeN++
				entries[idx].nodes = append(entries[idx].nodes, fmt.Sprintf("n%d", nodeN))
			}
			return
		}
		for k := 0; k < 1+rng.Intn(maxFan); k++ {
			child := fmt.Sprintf("%s.%d", name, k)
			entries[idx].subs = append(entries[idx].subs, child)
			grow(child, depth+1)
		}
	}
	grow("r", 0)
	tr, err := build("random", entries)
	if err != nil {
		panic(err)
	}
	return tr
}

func TestDistanceMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(52))
	for trial := 0; trial < 50; trial++ {
		tr := randomTree(rng, 10+rng.Intn(60), 1+rng.Intn(5))
		n := int32(tr.Len())
		for q := 0; q < 500; q++ {
			a, b := rng.Int31n(n), rng.Int31n(n)
			if got, want := int(tr.dist(a, b)), slowDistance(tr, a, b); got != want {
				t.Fatalf("trial %d: dist(%s, %s) = %d, reference %d", trial, tr.name[a], tr.name[b], got, want)
			}
		}
	}
}

func TestKindString(t *testing.T) {
	got := []string{KindNode.String(), KindCollector.String(), KindSync.String(), KindFrontend.String(), Kind(9).String()}
	want := []string{"node", "collector", "sync", "frontend", "Kind(9)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
