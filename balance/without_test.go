package balance

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWithout(t *testing.T) {
	tree, err := ParseTopologyConf(strings.NewReader(`
SwitchName=leaf1 Nodes=n[1-2]
SwitchName=leaf2 Nodes=n[3-4]
SwitchName=leaf3 Nodes=n[5-6]
SwitchName=spine1 Switches=leaf[1-2]
SwitchName=spine2 Switches=leaf3
SwitchName=top Switches=spine[1-2]
`))
	if err != nil {
		t.Fatal(err)
	}
	// leaf1 dies: its nodes go to leaf2, its sibling under spine1, not to leaf3.
	got, err := Without(tree, map[string]bool{"leaf1": true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"leaf2", "leaf3"}, got.Collectors()); diff != "" {
		t.Errorf("collectors (-want +got):\n%s", diff)
	}
	nodes, _ := got.Children("leaf2")
	if diff := cmp.Diff([]string{"n3", "n4", "n1", "n2"}, nodes); diff != "" {
		t.Errorf("leaf2's nodes (-want +got):\n%s", diff)
	}
	before, _ := tree.Distance("leaf2", "leaf3")
	if d, _ := got.Distance("leaf2", "leaf3"); d != before {
		t.Errorf("distance leaf2-leaf3 = %d, was %d: the rest of the tree must be kept", d, before)
	}
	if near, _ := tree.Distance("leaf1", "leaf2"); near >= before {
		t.Fatalf("fixture: leaf2 (%d) is not nearer to leaf1 than leaf3 (%d)", near, before)
	}
	// leaf3 dies: spine2 is left empty and dropped; n5, n6 go to the nearest (leaf1, tree order).
	got, err = Without(tree, map[string]bool{"leaf3": true})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Kind("spine2"); ok {
		t.Errorf("spine2 kept without children")
	}
	nodes, _ = got.Children("leaf1")
	if diff := cmp.Diff([]string{"n1", "n2", "n5", "n6"}, nodes); diff != "" {
		t.Errorf("leaf1's nodes (-want +got):\n%s", diff)
	}
	if _, err := Without(tree, map[string]bool{"leaf1": true, "leaf2": true, "leaf3": true}); err == nil {
		t.Errorf("no collector left: no error")
	}
	if same, _ := Without(tree, nil); same != tree {
		t.Errorf("nothing dead: a different tree")
	}
}
