package phases_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/phases"
)

// TestCompare: nodes of synthetic jobs, each found its phases alone; the node that
// behaved unlike most is named with its stretch and what it did.
func TestCompare(t *testing.T) {
	type want struct {
		unlike  []string
		stretch [2]int // the first unlike node's, in intervals from t0
		writes  bool   // the first unlike node wrote then, the others not
	}
	node := func(i int, runs ...run) phases.NodePhases {
		o := phases.Options{NCPUs: 1}
		return phases.NodePhases{Node: fmt.Sprintf("node%d", i), NCPUs: 1, Phases: phases.Find(job(uint64(100+i), runs...), o)}
	}
	alike := func(n int, runs ...run) []phases.NodePhases {
		var out []phases.NodePhases
		for i := 1; i <= n; i++ {
			out = append(out, node(i, runs...))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		nodes []phases.NodePhases
		want  *want // nil: not compared
	}{
		{"two nodes: neither is the odd one", append(alike(1, run{compute, 60}), node(2, run{smallWrites, 20}, run{compute, 40})), nil},
		{"four alike, one behaviour", alike(4, run{compute, 60}), &want{}},
		{"four alike, two phases", alike(4, run{smallWrites, 15}, run{compute, 45}), &want{}},
		{"one node writes while three compute",
			append(alike(3, run{compute, 60}), node(4, run{smallWrites, 20}, run{compute, 40})),
			&want{unlike: []string{"node4"}, stretch: [2]int{0, 20}, writes: true}},
		{"one node computes while seven read",
			append(alike(7, run{reading, 50}), node(8, run{compute, 50})),
			&want{unlike: []string{"node8"}, stretch: [2]int{0, 50}}},
		{"a node two intervals behind the others is alike",
			append(alike(3, run{smallWrites, 15}, run{compute, 45}), node(4, run{smallWrites, 17}, run{compute, 43})), &want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := phases.Compare(tc.nodes)
			if tc.want == nil {
				if a != nil {
					t.Errorf("Compare = %+v, want nil", a)
				}
				return
			}
			if a == nil {
				t.Fatalf("Compare = nil, want a comparison of %d nodes", len(tc.nodes))
			}
			got := want{}
			for _, u := range a.Unlike {
				got.unlike = append(got.unlike, u.Node)
			}
			if len(a.Unlike) > 0 {
				u := a.Unlike[0]
				got.stretch = [2]int{int(u.Stretch.From.Sub(t0).Round(interval) / interval), int(u.Stretch.To.Sub(t0).Round(interval) / interval)}
				got.writes = u.Traits.WriteCalls > 1000 && u.Others.WriteCalls < 10
				t.Logf("%s: alike %.2f, %+v", u.Node, u.Alike, u.Stretch)
			}
			if diff := cmp.Diff(*tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("unlike nodes (-want +got):\n%s", diff)
			}
			if a.Nodes != len(tc.nodes) {
				t.Errorf("compared %d nodes, want %d", a.Nodes, len(tc.nodes))
			}
			if len(tc.want.unlike) == 0 && a.Score < 0.9 {
				t.Errorf("score %.2f for alike nodes, want ≥ 0.9", a.Score)
			}
			if len(tc.want.unlike) > 0 && a.Score > 0.95 {
				t.Errorf("score %.2f with a node unlike the rest, want below 0.95", a.Score)
			}
		})
	}
}
