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
	tb := &treeBuilder{what: what, entries: entries}
	if err := tb.index(); err != nil {
		return nil, err
	}
	if err := tb.link(); err != nil {
		return nil, err
	}
	if err := tb.findRoots(); err != nil {
		return nil, err
	}
	if err := tb.checkFrontend(); err != nil {
		return nil, err
	}
	synth, err := tb.needsSyntheticRoot()
	if err != nil {
		return nil, err
	}
	return tb.assemble(synth), nil
}

// treeBuilder is what build learns about the entries while it checks them.
type treeBuilder struct {
	what      string // the source, for errors
	entries   []entry
	byName    map[string]int // entry index by agent name
	parentOf  []int          // entry index of each entry's parent, -1 for a top-level one
	nodeOwner map[string]int // entry index of each compute node's collector
	roots     []int          // the top-level entries, in definition order
}

// index maps the agents' names to their entries; a name defined twice is an error.
func (tb *treeBuilder) index() error {
	tb.byName = make(map[string]int, len(tb.entries))
	for i, e := range tb.entries {
		if p, dup := tb.byName[e.name]; dup {
			return fmt.Errorf("%s: line %d: %q already defined on line %d", tb.what, e.line, e.name, tb.entries[p].line)
		}
		tb.byName[e.name] = i
	}
	return nil
}

// link finds every entry's parent and every node's collector, entry by entry so
// that the first error in the description is the one reported. An entry holds
// either nodes or child agents, never both.
func (tb *treeBuilder) link() error {
	tb.parentOf = make([]int, len(tb.entries))
	for i := range tb.parentOf {
		tb.parentOf[i] = -1
	}
	tb.nodeOwner = make(map[string]int)
	for i, e := range tb.entries {
		if len(e.nodes) > 0 && len(e.subs) > 0 {
			return fmt.Errorf("%s: line %d: %q has both nodes and child agents; only leaf switches/collectors hold nodes", tb.what, e.line, e.name)
		}
		if len(e.nodes) == 0 && len(e.subs) == 0 {
			return fmt.Errorf("%s: line %d: %q has no nodes and no child agents", tb.what, e.line, e.name)
		}
		if err := tb.linkChildren(i); err != nil {
			return err
		}
		if err := tb.ownNodes(i); err != nil {
			return err
		}
	}
	return nil
}

// linkChildren makes entry i the parent of the agents it lists. Each agent has
// one parent, is not its own child, and a declared frontend is no one's child.
func (tb *treeBuilder) linkChildren(i int) error {
	e := tb.entries[i]
	for _, s := range e.subs {
		c, ok := tb.byName[s]
		if !ok {
			return fmt.Errorf("%s: line %d: %q refers to unknown agent %q", tb.what, e.line, e.name, s)
		}
		if c == i {
			return fmt.Errorf("%s: line %d: %q lists itself as a child", tb.what, e.line, e.name)
		}
		if p := tb.parentOf[c]; p >= 0 {
			if p == i {
				return fmt.Errorf("%s: line %d: %q lists child %q twice", tb.what, e.line, e.name, s)
			}
			return fmt.Errorf("%s: line %d: %q is already a child of %q (line %d)", tb.what, e.line, s, tb.entries[p].name, tb.entries[p].line)
		}
		if tb.entries[c].frontend {
			return fmt.Errorf("%s: line %d: frontend %q cannot be a child of %q", tb.what, e.line, s, e.name)
		}
		tb.parentOf[c] = i
	}
	return nil
}

// ownNodes makes entry i the collector of the nodes it lists. A node's name is
// not an agent's, and every node has exactly one collector.
func (tb *treeBuilder) ownNodes(i int) error {
	e := tb.entries[i]
	for _, n := range e.nodes {
		if _, clash := tb.byName[n]; clash {
			return fmt.Errorf("%s: line %d: node %q has the same name as an agent", tb.what, e.line, n)
		}
		if o, dup := tb.nodeOwner[n]; dup {
			if o == i {
				return fmt.Errorf("%s: line %d: node %q listed twice under %q", tb.what, e.line, n, e.name)
			}
			return fmt.Errorf("%s: line %d: node %q is already under %q (line %d); every node needs exactly one collector", tb.what, e.line, n, tb.entries[o].name, tb.entries[o].line)
		}
		tb.nodeOwner[n] = i
	}
	return nil
}

// findRoots finds the top-level entries and checks that every entry hangs below
// one of them: an entry they do not reach is part of a cycle.
func (tb *treeBuilder) findRoots() error {
	for i := range tb.entries {
		if tb.parentOf[i] < 0 {
			tb.roots = append(tb.roots, i)
		}
	}
	if len(tb.roots) == 0 {
		return fmt.Errorf("%s: line %d: cycle: every agent has a parent", tb.what, tb.entries[0].line)
	}
	reached := make([]bool, len(tb.entries))
	stack := append([]int(nil), tb.roots...)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		reached[i] = true
		for _, s := range tb.entries[i].subs {
			stack = append(stack, tb.byName[s])
		}
	}
	for i, ok := range reached {
		if !ok {
			return fmt.Errorf("%s: line %d: %q is part of a cycle", tb.what, tb.entries[i].line, tb.entries[i].name)
		}
	}
	return nil
}

// checkFrontend checks that, when an entry is declared frontend, it is the only
// top-level entry: every other agent hangs below it.
func (tb *treeBuilder) checkFrontend() error {
	declared := -1
	for i, e := range tb.entries {
		if e.frontend {
			declared = i
		}
	}
	if declared >= 0 && (len(tb.roots) > 1 || tb.roots[0] != declared) {
		for _, r := range tb.roots {
			if r != declared {
				return fmt.Errorf("%s: line %d: %q is not attached below frontend %q", tb.what, tb.entries[r].line, tb.entries[r].name, tb.entries[declared].name)
			}
		}
	}
	return nil
}

// needsSyntheticRoot says whether a frontend named syntheticRoot goes above the
// top-level entries (several of them, or a single collector), and checks that no
// agent or node has that name already.
func (tb *treeBuilder) needsSyntheticRoot() (bool, error) {
	if len(tb.roots) == 1 && len(tb.entries[tb.roots[0]].nodes) == 0 {
		return false, nil
	}
	if p, clash := tb.byName[syntheticRoot]; clash {
		return false, fmt.Errorf("%s: line %d: several top-level agents need a frontend named %q, but that name is taken", tb.what, tb.entries[p].line, syntheticRoot)
	}
	if _, clash := tb.nodeOwner[syntheticRoot]; clash {
		return false, fmt.Errorf("%s: several top-level agents need a frontend named %q, but a node has that name", tb.what, syntheticRoot)
	}
	return true, nil
}

// assemble numbers the agents in pre-order from the roots (below the synthetic
// frontend when synth), children in definition order and a collector's nodes
// right after it, and fills the Tree's tables.
func (tb *treeBuilder) assemble(synth bool) *Tree {
	total := len(tb.entries) + len(tb.nodeOwner)
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
	if synth {
		r := addAgent(t, syntheticRoot, KindFrontend, -1)
		for _, i := range tb.roots {
			tb.walk(t, i, r)
		}
	} else {
		tb.walk(t, tb.roots[0], -1)
	}
	t.finish()
	return t
}

// walk adds entry i below the agent parent (-1: as the root), then its nodes or,
// recursively, its child agents. An entry with nodes is a collector, a root
// without them the frontend, any other a sync agent.
func (tb *treeBuilder) walk(t *Tree, i int, parent int32) {
	e := tb.entries[i]
	k := KindSync
	switch {
	case len(e.nodes) > 0:
		k = KindCollector
	case parent < 0:
		k = KindFrontend
	}
	id := addAgent(t, e.name, k, parent)
	if k == KindCollector {
		t.collectors = append(t.collectors, id)
		for _, n := range e.nodes {
			t.nodes = append(t.nodes, addAgent(t, n, KindNode, id))
		}
		return
	}
	for _, s := range e.subs {
		tb.walk(t, tb.byName[s], id)
	}
}

// addAgent appends an agent to the tree being built and returns its index.
func addAgent(t *Tree, name string, k Kind, parent int32) int32 {
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
