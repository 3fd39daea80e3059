package balance

import (
	"fmt"
	"math/bits"
)

// Kind is the role of an agent in the tree.
type Kind uint8

const (
	// KindNode is a node agent (PerSyst Agent): a leaf, one per compute node.
	KindNode Kind = iota
	// KindCollector is a Collector: its children are node agents.
	KindCollector
	// KindSync is a SyncAgent in the middle layers.
	KindSync
	// KindFrontend is the root SyncAgent.
	KindFrontend
)

// String names the kind the way the thesis does.
func (k Kind) String() string {
	switch k {
	case KindNode:
		return "node"
	case KindCollector:
		return "collector"
	case KindSync:
		return "sync"
	case KindFrontend:
		return "frontend"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Tree is an immutable agent tree: frontend → sync agents → collectors → node
// agents. Agents are numbered 0..Len()-1; the numbering is deterministic for
// a given input (definition order, breadth-first from the root is NOT
// assumed). A Tree is safe for concurrent use once built.
type Tree struct {
	name   []string
	kind   []Kind
	parent []int32 // -1 for the root
	depth  []int32
	up     [][]int32 // binary lifting: up[k][v] = 2^k-th ancestor (root maps to itself)
	index  map[string]int32
	root   int32
	height int32

	nodes      []int32 // node agents, tree order
	collectors []int32 // collectors, tree order
	colSlot    []int32 // agent -> position in collectors, -1 if not a collector
	children   [][]int32
	addr       map[string]string // agent → gRPC address, from the tree description
}

// Addr returns an agent's address as the tree description gave it (Addr=).
func (t *Tree) Addr(name string) (string, bool) {
	a, ok := t.addr[name]
	return a, ok
}

// Len is the number of agents (all kinds).
func (t *Tree) Len() int { return len(t.name) }

// Root is the frontend's name ("" for an empty Tree).
func (t *Tree) Root() string {
	if len(t.name) == 0 {
		return ""
	}
	return t.name[t.root]
}

// Height is the largest depth of any agent (edges from the root).
func (t *Tree) Height() int { return int(t.height) }

// Nodes lists the compute nodes (node agents) in tree order.
func (t *Tree) Nodes() []string { return t.names(t.nodes) }

// Collectors lists the collectors in tree order. Result.CollectorLoad and
// the lowest-index tie-break of FindBestCollector use this order.
func (t *Tree) Collectors() []string { return t.names(t.collectors) }

// Agents lists the agents of one kind in index order.
func (t *Tree) Agents(k Kind) []string {
	var out []string
	for i, kk := range t.kind {
		if kk == k {
			out = append(out, t.name[i])
		}
	}
	return out
}

func (t *Tree) names(idx []int32) []string {
	out := make([]string, len(idx))
	for i, v := range idx {
		out[i] = t.name[v]
	}
	return out
}

// Kind reports the kind of the named agent.
func (t *Tree) Kind(name string) (Kind, bool) {
	i, ok := t.index[name]
	if !ok {
		return 0, false
	}
	return t.kind[i], true
}

// Parent reports the parent of the named agent ("" for the root).
func (t *Tree) Parent(name string) (string, bool) {
	i, ok := t.index[name]
	if !ok {
		return "", false
	}
	if t.parent[i] < 0 {
		return "", true
	}
	return t.name[t.parent[i]], true
}

// Children lists the children of the named agent in tree order.
func (t *Tree) Children(name string) ([]string, bool) {
	i, ok := t.index[name]
	if !ok {
		return nil, false
	}
	return t.names(t.children[i]), true
}

// Depth is the number of edges from the root to the named agent.
func (t *Tree) Depth(name string) (int, bool) {
	i, ok := t.index[name]
	if !ok {
		return 0, false
	}
	return int(t.depth[i]), true
}

// Distance is the tree distance of §5.3: the larger of the two edge counts from
// a and b up to the root of the smallest subtree holding both (their lowest
// common ancestor). Distance(x, x) is 0; a parent and its child are 1 apart.
// O(log h) with h the tree height.
func (t *Tree) Distance(a, b string) (int, error) {
	i, ok := t.index[a]
	if !ok {
		return 0, fmt.Errorf("tree distance: unknown agent %q", a)
	}
	j, ok := t.index[b]
	if !ok {
		return 0, fmt.Errorf("tree distance: unknown agent %q", b)
	}
	return int(t.dist(i, j)), nil
}

// LCA names the root of the smallest subtree holding both agents.
func (t *Tree) LCA(a, b string) (string, error) {
	i, ok := t.index[a]
	if !ok {
		return "", fmt.Errorf("lca: unknown agent %q", a)
	}
	j, ok := t.index[b]
	if !ok {
		return "", fmt.Errorf("lca: unknown agent %q", b)
	}
	return t.name[t.lca(i, j)], nil
}

func (t *Tree) dist(a, b int32) int32 {
	l := t.lca(a, b)
	return max(t.depth[a], t.depth[b]) - t.depth[l]
}

// lca by binary lifting: O(log h).
func (t *Tree) lca(a, b int32) int32 {
	if t.depth[a] < t.depth[b] {
		a, b = b, a
	}
	diff := t.depth[a] - t.depth[b]
	for k := 0; diff != 0; k++ {
		if diff&1 != 0 {
			a = t.up[k][a]
		}
		diff >>= 1
	}
	if a == b {
		return a
	}
	for k := len(t.up) - 1; k >= 0; k-- {
		if t.up[k][a] != t.up[k][b] {
			a, b = t.up[k][a], t.up[k][b]
		}
	}
	return t.parent[a]
}

// entry is one line of a tree description: an inner agent with either
// compute nodes (a collector) or child agents.
type entry struct {
	name     string
	line     int
	nodes    []string
	subs     []string
	frontend bool // declared frontend (explicit format)
}

// syntheticRoot is the name given to a frontend added above several roots.
const syntheticRoot = "frontend"

// build validates entries and makes a Tree. what names the source for
// errors ("topology.conf", "tree description"). If several entries have no
// parent, or the only one holds nodes, a frontend named "frontend" is added
// above them (unless an entry is declared frontend: then everything must hang
// below it).
func build(what string, entries []entry) (*Tree, error) {
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s: no agents defined", what)
	}
	byName := make(map[string]int, len(entries))
	for i, e := range entries {
		if p, dup := byName[e.name]; dup {
			return nil, fmt.Errorf("%s: line %d: %q already defined on line %d", what, e.line, e.name, entries[p].line)
		}
		byName[e.name] = i
	}
	parentOf := make([]int, len(entries))
	for i := range parentOf {
		parentOf[i] = -1
	}
	nodeOwner := make(map[string]int)
	for i, e := range entries {
		if len(e.nodes) > 0 && len(e.subs) > 0 {
			return nil, fmt.Errorf("%s: line %d: %q has both nodes and child agents; only leaf switches/collectors hold nodes", what, e.line, e.name)
		}
		if len(e.nodes) == 0 && len(e.subs) == 0 {
			return nil, fmt.Errorf("%s: line %d: %q has no nodes and no child agents", what, e.line, e.name)
		}
		for _, s := range e.subs {
			c, ok := byName[s]
			if !ok {
				return nil, fmt.Errorf("%s: line %d: %q refers to unknown agent %q", what, e.line, e.name, s)
			}
			if c == i {
				return nil, fmt.Errorf("%s: line %d: %q lists itself as a child", what, e.line, e.name)
			}
			if parentOf[c] >= 0 {
				if parentOf[c] == i {
					return nil, fmt.Errorf("%s: line %d: %q lists child %q twice", what, e.line, e.name, s)
				}
				return nil, fmt.Errorf("%s: line %d: %q is already a child of %q (line %d)", what, e.line, s, entries[parentOf[c]].name, entries[parentOf[c]].line)
			}
			if entries[c].frontend {
				return nil, fmt.Errorf("%s: line %d: frontend %q cannot be a child of %q", what, e.line, s, e.name)
			}
			parentOf[c] = i
		}
		for _, n := range e.nodes {
			if _, clash := byName[n]; clash {
				return nil, fmt.Errorf("%s: line %d: node %q has the same name as an agent", what, e.line, n)
			}
			if o, dup := nodeOwner[n]; dup {
				if o == i {
					return nil, fmt.Errorf("%s: line %d: node %q listed twice under %q", what, e.line, n, e.name)
				}
				return nil, fmt.Errorf("%s: line %d: node %q is already under %q (line %d); every node needs exactly one collector", what, e.line, n, entries[o].name, entries[o].line)
			}
			nodeOwner[n] = i
		}
	}
	var roots []int
	for i := range entries {
		if parentOf[i] < 0 {
			roots = append(roots, i)
		}
	}
	if len(roots) == 0 {
		return nil, fmt.Errorf("%s: line %d: cycle: every agent has a parent", what, entries[0].line)
	}
	// Reachability from the roots finds cycles (entries not reached).
	reached := make([]bool, len(entries))
	stack := append([]int(nil), roots...)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		reached[i] = true
		for _, s := range entries[i].subs {
			stack = append(stack, byName[s])
		}
	}
	for i, ok := range reached {
		if !ok {
			return nil, fmt.Errorf("%s: line %d: %q is part of a cycle", what, entries[i].line, entries[i].name)
		}
	}
	declared := -1
	for i, e := range entries {
		if e.frontend {
			declared = i
		}
	}
	if declared >= 0 && (len(roots) > 1 || roots[0] != declared) {
		for _, r := range roots {
			if r != declared {
				return nil, fmt.Errorf("%s: line %d: %q is not attached below frontend %q", what, entries[r].line, entries[r].name, entries[declared].name)
			}
		}
	}
	synth := len(roots) > 1 || len(entries[roots[0]].nodes) > 0
	if synth {
		if p, clash := byName[syntheticRoot]; clash {
			return nil, fmt.Errorf("%s: line %d: several top-level agents need a frontend named %q, but that name is taken", what, entries[p].line, syntheticRoot)
		}
		if _, clash := nodeOwner[syntheticRoot]; clash {
			return nil, fmt.Errorf("%s: several top-level agents need a frontend named %q, but a node has that name", what, syntheticRoot)
		}
	}

	total := len(entries) + len(nodeOwner)
	if synth {
		total++
	}
	t := &Tree{
		name:   make([]string, 0, total),
		kind:   make([]Kind, 0, total),
		parent: make([]int32, 0, total),
		depth:  make([]int32, 0, total),
		index:  make(map[string]int32, total),
	}
	add := func(name string, k Kind, parent int32) int32 {
		id := int32(len(t.name))
		t.name = append(t.name, name)
		t.kind = append(t.kind, k)
		t.parent = append(t.parent, parent)
		d := int32(0)
		if parent >= 0 {
			d = t.depth[parent] + 1
		}
		t.depth = append(t.depth, d)
		t.index[name] = id
		if d > t.height {
			t.height = d
		}
		return id
	}
	// Pre-order walk from the roots, children in definition order.
	var walk func(i int, parent int32)
	walk = func(i int, parent int32) {
		e := entries[i]
		k := KindSync
		switch {
		case len(e.nodes) > 0:
			k = KindCollector
		case parent < 0:
			k = KindFrontend
		}
		id := add(e.name, k, parent)
		if k == KindCollector {
			t.collectors = append(t.collectors, id)
			for _, n := range e.nodes {
				t.nodes = append(t.nodes, add(n, KindNode, id))
			}
			return
		}
		for _, s := range e.subs {
			walk(byName[s], id)
		}
	}
	if synth {
		r := add(syntheticRoot, KindFrontend, -1)
		for _, i := range roots {
			walk(i, r)
		}
	} else {
		walk(roots[0], -1)
	}
	t.finish()
	return t, nil
}

// finish fills the derived tables: children, collector slots, binary lifting.
func (t *Tree) finish() {
	n := len(t.name)
	t.root = 0
	t.children = make([][]int32, n)
	for i, p := range t.parent {
		if p >= 0 {
			t.children[p] = append(t.children[p], int32(i))
		} else {
			t.root = int32(i)
		}
	}
	t.colSlot = make([]int32, n)
	for i := range t.colSlot {
		t.colSlot[i] = -1
	}
	for s, c := range t.collectors {
		t.colSlot[c] = int32(s)
	}
	levels := bits.Len32(uint32(t.height))
	if levels == 0 {
		levels = 1
	}
	t.up = make([][]int32, levels)
	t.up[0] = make([]int32, n)
	for i, p := range t.parent {
		if p < 0 {
			p = int32(i)
		}
		t.up[0][i] = p
	}
	for k := 1; k < levels; k++ {
		t.up[k] = make([]int32, n)
		prev := t.up[k-1]
		for i := range prev {
			t.up[k][i] = prev[prev[i]]
		}
	}
}
