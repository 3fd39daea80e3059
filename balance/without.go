package balance

import (
	"fmt"
	"sort"
)

// Without returns the tree with the named collectors removed, for a cycle in which they
// do not answer: each one's nodes go to the live collector nearest to it in the tree
// (smallest tree distance, then the lowest tree order), and sync agents left without a
// child are dropped. The frontend and the rest of the tree are kept, so the remaining
// collectors' tree distances do not change. An error when no collector is left.
func Without(t *Tree, dead map[string]bool) (*Tree, error) {
	if len(dead) == 0 {
		return t, nil
	}
	var alive []string
	for _, c := range t.Collectors() {
		if !dead[c] {
			alive = append(alive, c)
		}
	}
	if len(alive) == 0 {
		return nil, fmt.Errorf("balance: no collector left")
	}
	extra := map[string][]string{} // live collector → nodes taken over
	for _, d := range t.Collectors() {
		if !dead[d] {
			continue
		}
		best, bestD := "", -1
		for _, c := range alive { // tree order: ties go to the first
			dist, err := t.Distance(d, c)
			if err != nil {
				return nil, err
			}
			if bestD < 0 || dist < bestD {
				best, bestD = c, dist
			}
		}
		nodes, _ := t.Children(d)
		extra[best] = append(extra[best], nodes...)
	}
	// Rebuild bottom-up: keep an agent if it is a live collector or has a kept child.
	keep := map[int32]bool{}
	var mark func(i int32) bool
	mark = func(i int32) bool {
		switch t.kind[i] {
		case KindNode:
			return false
		case KindCollector:
			keep[i] = !dead[t.name[i]]
			return keep[i]
		}
		any := false
		for _, c := range t.children[i] {
			if mark(c) {
				any = true
			}
		}
		keep[i] = any
		return any
	}
	mark(t.root)
	var entries []entry
	for i := range t.name {
		i := int32(i)
		if !keep[i] || t.kind[i] == KindNode {
			continue
		}
		e := entry{name: t.name[i], frontend: i == t.root}
		if t.kind[i] == KindCollector {
			e.nodes = append(t.names(t.children[i]), extra[t.name[i]]...)
		} else {
			for _, c := range t.children[i] {
				if keep[c] {
					e.subs = append(e.subs, t.name[c])
				}
			}
		}
		entries = append(entries, e)
	}
	sort.SliceStable(entries, func(a, b int) bool { return entries[a].frontend && !entries[b].frontend })
	return build("tree without dead collectors", entries)
}
