package properties

import (
	"math"

	"github.com/expr-lang/expr/ast"
)

// Every property is evaluated on every device of every job at every cycle: the node
// daemon's hottest loop. expr's VM over a map[string]any environment costs a map per
// device (each value boxed, each name sanitized and hashed) and a VM run per property.
// So a device's values live in slots (a float64 per name of the engine's name table,
// names), and the value expressions are compiled once into Go closures over the slots.
// The closures cover the arithmetic the catalog is written in (numbers, names, + - * /
// and ** or ^, comparisons, && || !, ?:, max, min, abs); an expression that uses anything
// else (an admin's catalog may) runs on expr's VM, with a map made from the slots: the
// same result, slower. TestFastMatchesExpr holds the closures to expr's results.

// names is an engine's name table: every name a value expression uses gets a slot.
type names struct {
	index map[string]int
	list  []string
}

func (n *names) add(name string) int {
	if i, ok := n.index[name]; ok {
		return i
	}
	n.index[name] = len(n.list)
	n.list = append(n.list, name)
	return len(n.list) - 1
}

// slot returns name's slot, -1 when no expression uses it.
func (n *names) slot(name string) int {
	if i, ok := n.index[name]; ok {
		return i
	}
	return -1
}

// slots are one device's values by the name table; has says which were set.
type slots struct {
	v   []float64
	has []bool
}

func newSlots(n int) slots { return slots{v: make([]float64, n), has: make([]bool, n)} }

func (s *slots) reset() { clear(s.has) }

// set sets slot i (nothing for -1: no expression uses the name).
func (s *slots) set(i int, x float64) {
	if i >= 0 {
		s.v[i], s.has[i] = x, true
	}
}

func (s *slots) get(i int) (float64, bool) {
	if i < 0 || !s.has[i] {
		return 0, false
	}
	return s.v[i], true
}

// env is the map expr's VM needs, made from the slots (for expressions the closures do
// not cover).
func (s *slots) env(n *names) map[string]any {
	m := make(map[string]any, len(n.list))
	for i, name := range n.list {
		if s.has[i] {
			m[name] = s.v[i]
		}
	}
	return m
}

type numFn func(v []float64) float64
type boolFn func(v []float64) bool

// compileFast compiles a checked expression (vm.Program.Node) into a closure over slots;
// ok is false when it uses anything the closures do not cover.
func compileFast(n ast.Node, tab *names) (numFn, bool) {
	c := fastCompiler{tab: tab}
	f := c.num(n)
	return f, f != nil && !c.failed
}

type fastCompiler struct {
	tab    *names
	failed bool
}

func (c *fastCompiler) fail() { c.failed = true }

// num compiles a numeric node (nil when it cannot).
func (c *fastCompiler) num(n ast.Node) numFn {
	switch n := n.(type) {
	case *ast.IdentifierNode:
		i := c.tab.add(n.Value)
		return func(v []float64) float64 { return v[i] }
	case *ast.IntegerNode:
		x := float64(n.Value)
		return func([]float64) float64 { return x }
	case *ast.FloatNode:
		x := n.Value
		return func([]float64) float64 { return x }
	case *ast.ConstantNode:
		return constant(n)
	case *ast.UnaryNode:
		return c.unary(n)
	case *ast.BinaryNode:
		return c.arithmetic(n)
	case *ast.ConditionalNode:
		return c.conditional(n)
	case *ast.BuiltinNode:
		return c.builtin(n)
	}
	c.fail()
	return nil
}

// constant compiles a value expr's optimizer folded into a constant: a number (nil: another
// kind of value).
func constant(n *ast.ConstantNode) numFn {
	var x float64
	switch k := n.Value.(type) {
	case int:
		x = float64(k)
	case float64:
		x = k
	default:
		return nil
	}
	return func([]float64) float64 { return x }
}

// unary compiles a sign: - or +.
func (c *fastCompiler) unary(n *ast.UnaryNode) numFn {
	a := c.num(n.Node)
	if a == nil {
		return nil
	}
	switch n.Operator {
	case "-":
		return func(v []float64) float64 { return -a(v) }
	case "+":
		return a
	}
	c.fail()
	return nil
}

// arithmetic compiles + - * / and ** or ^ (powers, as math.Pow).
func (c *fastCompiler) arithmetic(n *ast.BinaryNode) numFn {
	a, b := c.num(n.Left), c.num(n.Right)
	if a == nil || b == nil {
		return nil
	}
	switch n.Operator {
	case "+":
		return func(v []float64) float64 { return a(v) + b(v) }
	case "-":
		return func(v []float64) float64 { return a(v) - b(v) }
	case "*":
		return func(v []float64) float64 { return a(v) * b(v) }
	case "/":
		return func(v []float64) float64 { return a(v) / b(v) }
	case "**", "^":
		return func(v []float64) float64 { return math.Pow(a(v), b(v)) }
	}
	c.fail()
	return nil
}

// conditional compiles cond ? a : b.
func (c *fastCompiler) conditional(n *ast.ConditionalNode) numFn {
	cond, a, b := c.boolean(n.Cond), c.num(n.Exp1), c.num(n.Exp2)
	if cond == nil || a == nil || b == nil {
		return nil
	}
	return func(v []float64) float64 {
		if cond(v) {
			return a(v)
		}
		return b(v)
	}
}

// builtin compiles abs of one argument, and max and min of any (at least one).
func (c *fastCompiler) builtin(n *ast.BuiltinNode) numFn {
	args := make([]numFn, len(n.Arguments))
	for i, x := range n.Arguments {
		if args[i] = c.num(x); args[i] == nil {
			return nil
		}
	}
	switch {
	case n.Name == "abs" && len(args) == 1:
		a := args[0]
		return func(v []float64) float64 {
			if x := a(v); x < 0 {
				return -x
			} else {
				return x
			}
		}
	case (n.Name == "max" || n.Name == "min") && len(args) >= 1:
		// As expr's: the first argument, replaced by each later one that is greater
		// (max) or less (min).
		more := n.Name == "max"
		return func(v []float64) float64 {
			m := args[0](v)
			for _, a := range args[1:] {
				if x := a(v); more && m < x || !more && m > x {
					m = x
				}
			}
			return m
		}
	}
	c.fail()
	return nil
}

// boolean compiles a boolean node (nil when it cannot).
func (c *fastCompiler) boolean(n ast.Node) boolFn {
	switch n := n.(type) {
	case *ast.BoolNode:
		x := n.Value
		return func([]float64) bool { return x }
	case *ast.UnaryNode:
		if n.Operator == "!" || n.Operator == "not" {
			if a := c.boolean(n.Node); a != nil {
				return func(v []float64) bool { return !a(v) }
			}
		}
	case *ast.BinaryNode:
		switch n.Operator {
		case "&&", "and", "||", "or":
			a, b := c.boolean(n.Left), c.boolean(n.Right)
			if a == nil || b == nil {
				return nil
			}
			if n.Operator == "&&" || n.Operator == "and" {
				return func(v []float64) bool { return a(v) && b(v) }
			}
			return func(v []float64) bool { return a(v) || b(v) }
		}
		a, b := c.num(n.Left), c.num(n.Right)
		if a == nil || b == nil {
			return nil
		}
		switch n.Operator {
		case "<":
			return func(v []float64) bool { return a(v) < b(v) }
		case ">":
			return func(v []float64) bool { return a(v) > b(v) }
		case "<=":
			return func(v []float64) bool { return a(v) <= b(v) }
		case ">=":
			return func(v []float64) bool { return a(v) >= b(v) }
		case "==":
			return func(v []float64) bool { return a(v) == b(v) }
		case "!=":
			return func(v []float64) bool { return a(v) != b(v) }
		}
	}
	c.fail()
	return nil
}
