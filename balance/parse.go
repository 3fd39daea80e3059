package balance

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/persyst/persyst/jobmap"
)

// maxLine bounds one line of a tree description (hostlists can be long).
const maxLine = 1 << 20

// MaxTreeNames bounds the names (nodes and agent references) one tree
// description may expand to, so that a hostile or mistyped hostlist
// ("n[1-99999999]" on every line) cannot exhaust memory. The largest
// clusters have a few hundred thousand nodes.
const MaxTreeNames = 1 << 22

type kv struct{ key, val string }

// scanLines calls fn for every non-blank line with comments ('#' to the end
// of the line) removed, split into Key=Value words. Keys are matched
// case-insensitively by the callers (Slurm convention).
func scanLines(what string, r io.Reader, fn func(line int, words []kv) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		words := make([]kv, 0, len(fields))
		for _, f := range fields {
			k, v, ok := strings.Cut(f, "=")
			if !ok || k == "" {
				return fmt.Errorf("%s: line %d: %q is not Key=Value", what, line, f)
			}
			words = append(words, kv{k, v})
		}
		if err := fn(line, words); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s: line %d: longer than %d bytes", what, line+1, maxLine)
		}
		return fmt.Errorf("%s: read after line %d: %w", what, line, err)
	}
	return nil
}

// expand expands a hostlist value, counting the names against *budget.
func expand(what string, line int, key, val string, budget *int) ([]string, error) {
	if strings.TrimSpace(val) == "" {
		return nil, fmt.Errorf("%s: line %d: %s= is empty", what, line, key)
	}
	names, err := jobmap.ExpandHostlist(val)
	if err != nil {
		return nil, fmt.Errorf("%s: line %d: %s=%s: %w", what, line, key, val, err)
	}
	*budget -= len(names)
	if *budget < 0 {
		return nil, fmt.Errorf("%s: line %d: more than %d names in the description", what, line, MaxTreeNames)
	}
	return names, nil
}

// ParseTopologyConf reads Slurm's topology.conf (topology/tree plugin syntax)
// and builds the agent tree that follows the network:
//
//	SwitchName=s1 Nodes=n[1-4]
//	SwitchName=s2 Nodes=n[5-8] LinkSpeed=100
//	SwitchName=s3 Switches=s[1-2]
//
// Every leaf switch (one with Nodes=) becomes a collector, every upper switch
// a sync agent, and the single top switch the frontend. When there are
// several top switches (Slurm allows a forest) or the only switch is a leaf
// switch, a frontend named "frontend" is added above them. LinkSpeed= is
// accepted and ignored; keys are case-insensitive; '#' starts a comment.
// Errors name the line: unknown keys, malformed hostlists, unknown switch
// references, switches with both or neither of Nodes=/Switches=, nodes under
// two switches, a switch with two parents, cycles.
func ParseTopologyConf(r io.Reader) (*Tree, error) {
	const what = "topology.conf"
	var entries []entry
	budget := MaxTreeNames
	err := scanLines(what, r, func(line int, words []kv) error {
		if !strings.EqualFold(words[0].key, "SwitchName") {
			if strings.EqualFold(words[0].key, "BlockName") || strings.EqualFold(words[0].key, "BlockSizes") {
				return fmt.Errorf("%s: line %d: %s= belongs to topology/block, not a tree; describe the agent tree explicitly instead", what, line, words[0].key)
			}
			return fmt.Errorf("%s: line %d: expected SwitchName=, got %s=", what, line, words[0].key)
		}
		e := entry{name: words[0].val, line: line}
		if e.name == "" {
			return fmt.Errorf("%s: line %d: SwitchName= is empty", what, line)
		}
		seen := map[string]bool{}
		for _, w := range words[1:] {
			key := strings.ToLower(w.key)
			if seen[key] {
				return fmt.Errorf("%s: line %d: %s= given twice", what, line, w.key)
			}
			seen[key] = true
			switch key {
			case "nodes":
				names, err := expand(what, line, w.key, w.val, &budget)
				if err != nil {
					return err
				}
				e.nodes = names
			case "switches":
				names, err := expand(what, line, w.key, w.val, &budget)
				if err != nil {
					return err
				}
				e.subs = names
			case "linkspeed":
			default:
				return fmt.Errorf("%s: line %d: unknown key %s=", what, line, w.key)
			}
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return build(what, entries)
}

// ParseTreeSpec reads persyst's explicit agent tree description, one agent
// per line, Slurm style (case-insensitive keys, hostlist expressions, '#'
// comments):
//
//	Frontend=fe Syncs=s[1-2]            # optional; at most one
//	Sync=s1 Collectors=c[1-2]
//	Sync=s2 Collectors=c3 Syncs=s3      # syncs may nest
//	Sync=s3 Collectors=c4
//	Collector=c1 Nodes=n[001-043] Addr=10.1.0.1:16830
//
// Frontend= and Sync= lines take Syncs= and/or Collectors=; Collector= lines
// take Nodes=. Any line may give the agent's gRPC address, Addr=host:port
// (Tree.Addr). Each line names one agent. Syncs= must name Sync agents and Collectors= must name
// collectors. Without a Frontend= line the single top Sync becomes the
// frontend; several top agents get a frontend named "frontend" above them.
// With a Frontend= line every other agent must hang below it.
func ParseTreeSpec(r io.Reader) (*Tree, error) {
	p := &specParser{budget: MaxTreeNames, declared: map[string]Kind{}, declaredLine: map[string]int{}, addrs: map[string]string{}}
	if err := scanLines(specWhat, r, p.line); err != nil {
		return nil, err
	}
	if err := p.checkRefs(); err != nil {
		return nil, err
	}
	t, err := build(specWhat, p.entries)
	if err != nil {
		return nil, err
	}
	t.addr = p.addrs
	return t, nil
}

// specWhat names a tree description in errors.
const specWhat = "tree description"

// specRef is one name listed in Syncs= or Collectors=, checked once every line is read
// (an agent may be listed before the line that defines it).
type specRef struct {
	from, to string
	kind     Kind // the kind it must name: KindSync for Syncs=, KindCollector for Collectors=
	line     int
}

// specParser is what ParseTreeSpec has read so far.
type specParser struct {
	entries      []entry
	budget       int // names the description may still expand to (MaxTreeNames)
	refs         []specRef
	declared     map[string]Kind
	declaredLine map[string]int
	addrs        map[string]string
	frontends    int
}

// line reads one agent's line: the agent's kind and name first, then its other keys.
func (p *specParser) line(line int, words []kv) error {
	k, err := p.kind(line, words[0].key)
	if err != nil {
		return err
	}
	e := entry{name: words[0].val, line: line, frontend: k == KindFrontend}
	if e.name == "" {
		return fmt.Errorf("%s: line %d: %s= is empty", specWhat, line, words[0].key)
	}
	if strings.ContainsAny(e.name, "[],") {
		return fmt.Errorf("%s: line %d: %s=%s: one agent name per line", specWhat, line, words[0].key, e.name)
	}
	if l, dup := p.declaredLine[e.name]; dup {
		return fmt.Errorf("%s: line %d: %q already defined on line %d", specWhat, line, e.name, l)
	}
	p.declared[e.name] = k
	p.declaredLine[e.name] = line
	seen := map[string]bool{}
	for _, w := range words[1:] {
		key := strings.ToLower(w.key)
		if seen[key] {
			return fmt.Errorf("%s: line %d: %s= given twice", specWhat, line, w.key)
		}
		seen[key] = true
		if err := p.attr(&e, k, line, words[0].key, w); err != nil {
			return err
		}
	}
	if k == KindCollector && len(e.nodes) == 0 {
		return fmt.Errorf("%s: line %d: collector %q needs Nodes=", specWhat, line, e.name)
	}
	p.entries = append(p.entries, e)
	return nil
}

// kind is the kind of agent a line's first key declares; a second Frontend= line is an error.
func (p *specParser) kind(line int, key string) (Kind, error) {
	switch strings.ToLower(key) {
	case "frontend":
		p.frontends++
		if p.frontends > 1 {
			return 0, fmt.Errorf("%s: line %d: second Frontend= line", specWhat, line)
		}
		return KindFrontend, nil
	case "sync":
		return KindSync, nil
	case "collector":
		return KindCollector, nil
	}
	return 0, fmt.Errorf("%s: line %d: expected Frontend=, Sync= or Collector=, got %s=", specWhat, line, key)
}

// attr reads one key after the first on the line of agent e, of kind k; head is the
// line's first key as written, for errors. Addr= goes on any line, Nodes= on a
// collector's, Syncs= and Collectors= on the others.
func (p *specParser) attr(e *entry, k Kind, line int, head string, w kv) error {
	key := strings.ToLower(w.key)
	switch {
	case key == "addr":
		if _, _, err := net.SplitHostPort(w.val); err != nil {
			return fmt.Errorf("%s: line %d: Addr=%s: want host:port", specWhat, line, w.val)
		}
		p.addrs[e.name] = w.val
	case key == "nodes" && k == KindCollector:
		names, err := expand(specWhat, line, w.key, w.val, &p.budget)
		if err != nil {
			return err
		}
		e.nodes = names
	case (key == "syncs" || key == "collectors") && k != KindCollector:
		names, err := expand(specWhat, line, w.key, w.val, &p.budget)
		if err != nil {
			return err
		}
		want := KindSync
		if key == "collectors" {
			want = KindCollector
		}
		for _, n := range names {
			p.refs = append(p.refs, specRef{from: e.name, to: n, kind: want, line: line})
		}
		e.subs = append(e.subs, names...)
	default:
		return fmt.Errorf("%s: line %d: key %s= not allowed on a %s= line", specWhat, line, w.key, head)
	}
	return nil
}

// checkRefs checks, once every line is read, that Syncs= names only Sync agents
// and Collectors= only collectors. build checks the rest of the tree's shape.
func (p *specParser) checkRefs() error {
	for _, rf := range p.refs {
		got, ok := p.declared[rf.to]
		if !ok {
			return fmt.Errorf("%s: line %d: %q refers to unknown agent %q", specWhat, rf.line, rf.from, rf.to)
		}
		if got != rf.kind {
			key := "Syncs="
			if rf.kind == KindCollector {
				key = "Collectors="
			}
			return fmt.Errorf("%s: line %d: %s lists %q, which is a %s", specWhat, rf.line, key, rf.to, got)
		}
	}
	return nil
}

// FlatTree builds the default tree for a cluster without topology
// information: the nodes, in the given order, are cut into
// ⌈len(nodes)/nodesPerCollector⌉ collectors of consecutive nodes, sizes
// evened out (they differ by at most one), named c1, c2, ...; the collectors
// are grouped the same way into ⌈collectors/collectorsPerSync⌉ sync agents
// s1, s2, ... below a frontend named "frontend". If all collectors fit in
// one group (or collectorsPerSync <= 0) they hang directly below the
// frontend. Choose nodesPerCollector ≈ l_max / properties per node so that a
// collector's own nodes are what it can take.
func FlatTree(nodes []string, nodesPerCollector, collectorsPerSync int) (*Tree, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("flat tree: no nodes")
	}
	if nodesPerCollector <= 0 {
		return nil, fmt.Errorf("flat tree: nodes per collector must be positive, got %d", nodesPerCollector)
	}
	nc := (len(nodes) + nodesPerCollector - 1) / nodesPerCollector
	ns := 0
	if collectorsPerSync > 0 && nc > collectorsPerSync {
		ns = (nc + collectorsPerSync - 1) / collectorsPerSync
	}
	return evenTree(nodes, nc, ns)
}

// evenTree splits nodes evenly over nc collectors and those evenly over ns
// sync agents (ns == 0: collectors directly under the frontend).
func evenTree(nodes []string, nc, ns int) (*Tree, error) {
	const what = "flat tree"
	if nc <= 0 || nc > len(nodes) {
		return nil, fmt.Errorf("%s: %d collectors for %d nodes", what, nc, len(nodes))
	}
	if ns < 0 || ns > nc {
		return nil, fmt.Errorf("%s: %d sync agents for %d collectors", what, ns, nc)
	}
	root := entry{name: syntheticRoot, frontend: true}
	cols := make([]entry, nc)
	for i := range cols {
		lo, hi := i*len(nodes)/nc, (i+1)*len(nodes)/nc
		cols[i] = entry{name: fmt.Sprintf("c%d", i+1), nodes: nodes[lo:hi]}
	}
	entries := make([]entry, 0, 1+ns+nc)
	if ns == 0 {
		for _, c := range cols {
			root.subs = append(root.subs, c.name)
		}
		entries = append(entries, root)
	} else {
		syncs := make([]entry, ns)
		for i := range syncs {
			syncs[i].name = fmt.Sprintf("s%d", i+1)
			for _, c := range cols[i*nc/ns : (i+1)*nc/ns] {
				syncs[i].subs = append(syncs[i].subs, c.name)
			}
			root.subs = append(root.subs, syncs[i].name)
		}
		entries = append(entries, root)
		entries = append(entries, syncs...)
	}
	entries = append(entries, cols...)
	for i := range entries {
		entries[i].line = i + 1
	}
	t, err := build(what, entries)
	if err != nil {
		return nil, err
	}
	return t, nil
}
