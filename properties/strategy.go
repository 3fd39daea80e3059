package properties

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// Node of a strategy tree.
type StrategyNode struct {
	Prop     *Property
	Children []*StrategyNode
	Line     int
}

// Strategy is a forest of property trees.
type Strategy struct {
	Roots []*StrategyNode
	Name  string // file it came from
}

// DefaultStrategy parses the embedded strategy against c.
func DefaultStrategy(c *Catalog) (*Strategy, error) {
	return ParseStrategy(strings.NewReader(defaultStrategy), "default.strategy (built in)", c)
}

// LoadStrategy reads an admin's strategy file.
func LoadStrategy(path string, c *Catalog) (*Strategy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("strategy: %w", err)
	}
	defer f.Close()
	return ParseStrategy(f, path, c)
}

// ParseStrategy reads a strategy: one property key per line, children indented more
// than their parent (spaces; a tab counts as 8). Errors name the file, line and reason:
// an unknown key, inconsistent indentation, a key twice under the same parent, or a
// property of domain job under one of another domain (job properties are evaluated once
// at the end, so they cannot refine per-interval ones).
func ParseStrategy(r io.Reader, name string, c *Catalog) (*Strategy, error) {
	s := &Strategy{Name: name}
	type open struct {
		indent int
		node   *StrategyNode
	}
	var stack []open
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Text()
		if i := strings.IndexByte(raw, '#'); i >= 0 {
			raw = raw[:i]
		}
		if strings.TrimSpace(raw) == "" {
			continue
		}
		indent := 0
		for _, ch := range raw {
			if ch == ' ' {
				indent++
			} else if ch == '\t' {
				indent += 8
			} else {
				break
			}
		}
		key := strings.TrimSpace(raw)
		if strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("%s:%d: one property per line, got %q", name, n, key)
		}
		if !ValidKey(key) {
			return nil, fmt.Errorf("%s:%d: %q is not a property key (id or id:variant, lower case)", name, n, key)
		}
		p, ok := c.Get(key)
		if !ok {
			return nil, fmt.Errorf("%s:%d: unknown property %q", name, n, key)
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		node := &StrategyNode{Prop: p, Line: n}
		var siblings *[]*StrategyNode
		if len(stack) == 0 {
			if indent != 0 && len(s.Roots) == 0 {
				return nil, fmt.Errorf("%s:%d: the first property must not be indented", name, n)
			}
			siblings = &s.Roots
		} else {
			parent := stack[len(stack)-1].node
			if p.Domain == Job && parent.Prop.Domain != Job {
				return nil, fmt.Errorf("%s:%d: %s (domain job, evaluated once at the end) cannot refine %s (domain %s)", name, n, key, parent.Prop.Key(), parent.Prop.Domain)
			}
			siblings = &parent.Children
		}
		for _, sib := range *siblings {
			if sib.Prop == p {
				return nil, fmt.Errorf("%s:%d: %s already listed here on line %d", name, n, key, sib.Line)
			}
		}
		*siblings = append(*siblings, node)
		stack = append(stack, open{indent, node})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(s.Roots) == 0 {
		return nil, fmt.Errorf("%s: no properties", name)
	}
	return s, nil
}

// Properties returns every property in the strategy, each once, in tree order.
func (s *Strategy) Properties() []*Property {
	var out []*Property
	seen := map[*Property]bool{}
	var walk func([]*StrategyNode)
	walk = func(ns []*StrategyNode) {
		for _, n := range ns {
			if !seen[n.Prop] {
				seen[n.Prop] = true
				out = append(out, n.Prop)
			}
			walk(n.Children)
		}
	}
	walk(s.Roots)
	return out
}
