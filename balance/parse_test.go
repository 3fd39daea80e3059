package balance

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type shape struct {
	Root       string
	Syncs      []string
	Collectors []string
	Parents    map[string]string // of collectors and syncs
	Nodes      int
}

func shapeOf(tr *Tree) shape {
	s := shape{Root: tr.Root(), Syncs: tr.Agents(KindSync), Collectors: tr.Collectors(), Parents: map[string]string{}, Nodes: len(tr.Nodes())}
	for i, k := range tr.kind {
		if k == KindSync || k == KindCollector {
			p, _ := tr.Parent(tr.name[i])
			s.Parents[tr.name[i]] = p
		}
	}
	return s
}

func TestParseTopologyConf(t *testing.T) {
	tests := []struct {
		name string
		conf string
		want shape
	}{
		{
			name: "slurm docs example",
			conf: `# topology.conf
# Switch Configuration
SwitchName=s0 Nodes=tux[0-3]    LinkSpeed=900
SwitchName=s1 Nodes=tux[4-7]
SwitchName=s2 Nodes=tux[8-11]
SwitchName=s3 Nodes=tux[12-15]
SwitchName=s4 Switches=s[0-1]
SwitchName=s5 Switches=s[2-3]
switchname=s6 switches=s[4-5]
`,
			want: shape{
				Root: "s6", Syncs: []string{"s4", "s5"}, Collectors: []string{"s0", "s1", "s2", "s3"},
				Parents: map[string]string{"s0": "s4", "s1": "s4", "s2": "s5", "s3": "s5", "s4": "s6", "s5": "s6"},
				Nodes:   16,
			},
		},
		{
			name: "forest gets a frontend",
			conf: "SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n[3-4]\nSwitchName=top Switches=a\n",
			want: shape{
				Root: "frontend", Syncs: []string{"top"}, Collectors: []string{"b", "a"}, // pre-order: b is a root defined before top
				Parents: map[string]string{"top": "frontend", "a": "top", "b": "frontend"},
				Nodes:   4,
			},
		},
		{
			name: "single leaf switch",
			conf: "SwitchName=only Nodes=n[1-3]\n",
			want: shape{Root: "frontend", Collectors: []string{"only"}, Parents: map[string]string{"only": "frontend"}, Nodes: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ParseTopologyConf(strings.NewReader(tc.conf))
			if err != nil {
				t.Fatalf("ParseTopologyConf: %v", err)
			}
			if diff := cmp.Diff(tc.want, shapeOf(tr)); diff != "" {
				t.Errorf("shape (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTopologyConfErrors(t *testing.T) {
	tests := []struct {
		name, conf string
		want       []string // substrings of the error
	}{
		{"not key=value", "SwitchName=s1 Nodes=n1\nSwitchName=s2 junk\n", []string{"line 2", `"junk"`}},
		{"unknown key", "SwitchName=s1 Nodes=n1 Colour=red\n", []string{"line 1", "Colour="}},
		{"not a switch", "\n# c\nNodeName=n1\n", []string{"line 3", "expected SwitchName="}},
		{"block plugin", "BlockName=b1 Nodes=n[1-4]\n", []string{"line 1", "topology/block"}},
		{"bad hostlist", "SwitchName=s1 Nodes=n[1-\n", []string{"line 1", "Nodes=n[1-"}},
		{"empty nodes", "SwitchName=s1 Nodes=\n", []string{"line 1", "empty"}},
		{"unknown switch", "SwitchName=s1 Nodes=n1\nSwitchName=s2 Switches=s1,s9\n", []string{"line 2", `unknown agent "s9"`}},
		{"duplicate switch", "SwitchName=s1 Nodes=n1\nSwitchName=s1 Nodes=n2\n", []string{"line 2", "already defined on line 1"}},
		{"node twice", "SwitchName=s1 Nodes=n[1-3]\nSwitchName=s2 Nodes=n[3-4]\n", []string{"line 2", `node "n3"`, "line 1"}},
		{"two parents", "SwitchName=a Nodes=n1\nSwitchName=b Switches=a\nSwitchName=c Switches=a\n", []string{"line 3", `"a" is already a child of "b" (line 2)`}},
		{"cycle", "SwitchName=a Nodes=n1\nSwitchName=b Switches=a,c\nSwitchName=c Switches=b\n", []string{"line", "cycle"}},
		{"cycle beside a root", "SwitchName=r Nodes=n1\nSwitchName=x Switches=y\nSwitchName=y Switches=x\n", []string{"line 2", "cycle"}},
		{"self", "SwitchName=a Switches=a\n", []string{"line 1", "itself"}},
		{"both", "SwitchName=a Nodes=n1\nSwitchName=b Nodes=n2 Switches=a\n", []string{"line 2", "both"}},
		{"neither", "SwitchName=a LinkSpeed=1\n", []string{"line 1", "no nodes"}},
		{"node named like switch", "SwitchName=a Nodes=b\nSwitchName=b Switches=a\n", []string{"line 1", "same name"}},
		{"key twice", "SwitchName=a Nodes=n1 nodes=n2\n", []string{"line 1", "twice"}},
		{"empty", "# nothing\n", []string{"no agents"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopologyConf(strings.NewReader(tc.conf))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "topology.conf: ") {
				t.Errorf("error %q does not name topology.conf", err)
			}
		})
	}
}

func TestParseTreeSpec(t *testing.T) {
	spec := `
Frontend=fe Syncs=s[1-2]
Sync=s1 Collectors=c[1-2]
Sync=s2 Collectors=c3 Syncs=s3   # nested
Sync=s3 Collectors=c4
Collector=c1 Nodes=n[01-10]
Collector=c2 Nodes=n[11-20]
Collector=c3 Nodes=n[21-30]
collector=c4 nodes=gpu[1-4]
`
	tr, err := ParseTreeSpec(strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	want := shape{
		Root: "fe", Syncs: []string{"s1", "s2", "s3"}, Collectors: []string{"c1", "c2", "c3", "c4"},
		Parents: map[string]string{"s1": "fe", "s2": "fe", "s3": "s2", "c1": "s1", "c2": "s1", "c3": "s2", "c4": "s3"},
		Nodes:   34,
	}
	if diff := cmp.Diff(want, shapeOf(tr)); diff != "" {
		t.Errorf("shape (-want +got):\n%s", diff)
	}
	if d, _ := tr.Depth("gpu1"); d != 4 {
		t.Errorf("depth of gpu1 = %d, want 4", d)
	}
	// No Frontend= line: the single top sync becomes the frontend.
	tr, err = ParseTreeSpec(strings.NewReader("Sync=top Collectors=c1\nCollector=c1 Nodes=n[1-2]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := tr.Kind("top"); k != KindFrontend {
		t.Errorf("top is a %s, want frontend", k)
	}
	// Addresses.
	tr, err = ParseTreeSpec(strings.NewReader("Sync=top Collectors=c1 Addr=10.0.0.9:16833\nCollector=c1 Nodes=n[1-2] Addr=[fd00::1]:16830\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range []string{"top", "c1", "n1"} {
		if v, ok := tr.Addr(a); ok {
			got[a] = v
		}
	}
	if diff := cmp.Diff(map[string]string{"top": "10.0.0.9:16833", "c1": "[fd00::1]:16830"}, got); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
}

func TestParseTreeSpecErrors(t *testing.T) {
	tests := []struct {
		name, spec string
		want       []string
	}{
		{"unknown line", "Switch=s1\n", []string{"line 1", "expected Frontend="}},
		{"two frontends", "Frontend=a Collectors=c1\nFrontend=b Collectors=c1\n", []string{"line 2", "second Frontend="}},
		{"collector without nodes", "Collector=c1\n", []string{"line 1", "needs Nodes="}},
		{"nodes on sync", "Sync=s1 Nodes=n1\n", []string{"line 1", "Nodes= not allowed"}},
		{"syncs lists collector", "Sync=s1 Syncs=c1\nCollector=c1 Nodes=n1\n", []string{"line 1", `"c1", which is a collector`}},
		{"unknown ref", "Sync=s1 Collectors=c[1-2]\nCollector=c1 Nodes=n1\n", []string{"line 1", `unknown agent "c2"`}},
		{"hostlist name", "Collector=c[1-2] Nodes=n1\n", []string{"line 1", "one agent name per line"}},
		{"unattached below frontend", "Frontend=fe Collectors=c1\nCollector=c1 Nodes=n1\nCollector=c2 Nodes=n2\n", []string{"line 3", "not attached below frontend"}},
		{"frontend as child", "Frontend=fe Collectors=c1\nSync=s Syncs=fe\nCollector=c1 Nodes=n1\n", []string{"line 2"}},
		{"bad address", "Collector=c1 Nodes=n1 Addr=c1\n", []string{"line 1", "Addr=c1", "host:port"}},
		{"node under two collectors", "Sync=s Collectors=c[1-2]\nCollector=c1 Nodes=n[1-2]\nCollector=c2 Nodes=n2\n", []string{"line 3", `"n2"`, "exactly one collector"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTreeSpec(strings.NewReader(tc.spec))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFlatTree(t *testing.T) {
	nodes := make([]string, 10)
	for i := range nodes {
		nodes[i] = string(rune('a' + i))
	}
	tr, err := FlatTree(nodes, 3, 2) // 4 collectors of 2-3 nodes, 2 syncs
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, c := range tr.Collectors() {
		ch, _ := tr.Children(c)
		sizes = append(sizes, len(ch))
	}
	if diff := cmp.Diff([]int{2, 3, 2, 3}, sizes); diff != "" {
		t.Errorf("collector sizes (-want +got):\n%s", diff)
	}
	want := shape{
		Root: "frontend", Syncs: []string{"s1", "s2"}, Collectors: []string{"c1", "c2", "c3", "c4"},
		Parents: map[string]string{"s1": "frontend", "s2": "frontend", "c1": "s1", "c2": "s1", "c3": "s2", "c4": "s2"},
		Nodes:   10,
	}
	if diff := cmp.Diff(want, shapeOf(tr)); diff != "" {
		t.Errorf("shape (-want +got):\n%s", diff)
	}
	// Few collectors: directly below the frontend.
	tr, err = FlatTree(nodes, 5, 8)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := tr.Parent("c2"); p != "frontend" || len(tr.Agents(KindSync)) != 0 {
		t.Errorf("c2 parent %q, syncs %v", p, tr.Agents(KindSync))
	}
	for _, bad := range []struct {
		nodes []string
		per   int
	}{{nil, 3}, {nodes, 0}, {[]string{"a", "a"}, 1}} {
		if _, err := FlatTree(bad.nodes, bad.per, 2); err == nil {
			t.Errorf("FlatTree(%v, %d): no error", bad.nodes, bad.per)
		}
	}
}

func TestParseNameBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("expands millions of names")
	}
	var conf strings.Builder
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&conf, "SwitchName=s%d Nodes=n%d-[1-1000000]\n", i, i)
	}
	_, err := ParseTopologyConf(strings.NewReader(conf.String()))
	if err == nil || !strings.Contains(err.Error(), "line 5: more than") {
		t.Fatalf("error %v, want the name budget on line 5", err)
	}
}
