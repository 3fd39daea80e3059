// Package properties is persyst's knowledge base (the PerSyst thesis, chapter 3): property
// definitions, severity formulas, strategy trees and thresholds, and the engine that
// evaluates them on a job's samples and summarizes them at job end.
//
// Properties and strategies are data. The catalog (catalog.conf, embedded) defines each
// property in an INI-like block:
//
//	[io_write_request_size]
//	name = Mean write size
//	unit = bytes
//	domain = node                   # cpu, core, node or job
//	value = write_chars / write_syscalls
//	threshold = 2MiB                # a number (with K/M/G/KiB/MiB/GiB) or an expression
//	severity = formula2             # formula1, formula2, ratio, inverse, none
//	exponent = 1
//	condition = severe              # severe, always, positive, above, below
//	report = finding                # finding (may appear in the digest) or info
//	robust = long                   # long: only for jobs of at least DigestMinSeconds
//	rank = 1                        # weight when ordering findings (a general symptom < 1)
//	optional = psi_io_some_seconds  # names that count as 0 where not measured
//	recommendation = Write in large blocks ...
//
// Expressions are evaluated with github.com/expr-lang/expr over the metrics of
// daemon/measure (names with '-' or ':' written with '_': task_clock,
// syscalls_sys_enter_openat) and the derived values listed in Names. A property is "not
// assessed" in an interval when a metric its expressions use was not measured; the reason
// is the metric's.
//
// A strategy (default.strategy, embedded; an admin's StrategyFile= in persyst.conf
// replaces it) is a tree of property ids written by indentation: a child is evaluated
// only where its parent's condition holds (the PerSyst thesis, §3.1). Memory bandwidth appears as
// two replicas, memory_bw:memory_bound and memory_bw:compute_bound, whose conditions are
// "above" and "below" the same threshold.
package properties

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"

	"github.com/persyst/persyst/config"
)

//go:embed catalog.conf
var catalogConf string

//go:embed default.strategy
var defaultStrategy string

// Domain is where a property is evaluated.
type Domain string

const (
	CPU  Domain = "cpu"  // per CPU of the job (perf events per CPU)
	Core Domain = "core" // per physical core (hyperthreads added up)
	Node Domain = "node" // the job on one node
	Job  Domain = "job"  // the whole job, once, at its end (trends over time)
)

// Condition says when a property's children in the strategy are evaluated, and when a
// record is kept.
type Condition string

const (
	Severe   Condition = "severe"   // severity > 0
	Always   Condition = "always"   // always
	Positive Condition = "positive" // value > 0
	Above    Condition = "above"    // value > threshold (memory-bound replica)
	Below    Condition = "below"    // value ≤ threshold (compute-bound replica)
)

// Property is one property of the catalog.
type Property struct {
	ID      string // stable id, part of the interface ("io_write_request_size")
	Variant string // replica ("memory_bound"); Key() is "id:variant"
	Name    string
	Unit    string
	Domain  Domain
	Value   string // expression
	// Threshold is the default threshold expression (a number or an expression of
	// calibration values); persyst.conf Threshold.<id>= overrides it.
	Threshold string
	Severity  Formula
	Exponent  float64
	Condition Condition
	Finding   bool // may be reported in the digest (report = finding)
	LongOnly  bool // robust = long
	// Rank weighs the property's severity when findings are ordered (default 1): a
	// general symptom (kernel time) ranks below a specific cause (small writes, file
	// opens) of the same severity, a costly resource wasted (an idle GPU) above.
	Rank float64
	// Applies, if set, is a metric only some jobs have (gpus): for a job that has no
	// value of it and no reason why, the property does not apply and has no result (it is
	// not "not assessed").
	Applies string
	// Folds are the properties this one explains when it is a finding (its symptoms:
	// CPUs left idle make the load between CPUs unequal): they are not reported beside
	// it (Fold).
	Folds []string
	// KernelCalls, if set, counts the job's calls whose kernel time this cause explains
	// (an expression over the job's totals): it folds the kernel time (cpu_system_pct)
	// only when those calls, at the node's cost of a call (syscall_seconds), come to a
	// quarter of the job's kernel time or more. A Go or Java runtime's futex calls, a few
	// thousand a second, explain none of a storm of other system calls.
	KernelCalls string
	// Optional are names of the value that count as 0 where they were not measured (a
	// branch of the value that needs them falls silent); any other name that was not
	// measured leaves the property not assessed.
	Optional       []string
	Recommendation string
	Line           int // where it is defined

	value, threshold *vm.Program
	kernelCalls      *vm.Program // KernelCalls, over the job's totals (nil: none)
	needs            []string    // names the expressions use (sanitized)
	valueNames       []string    // names the value expression uses
}

// Key is the property's name in strategies: id, or id:variant for a replica.
func (p *Property) Key() string {
	if p.Variant != "" {
		return p.ID + ":" + p.Variant
	}
	return p.ID
}

// Needs returns the names the property's expressions use.
func (p *Property) Needs() []string { return p.needs }

// Catalog is a set of properties by key.
type Catalog struct {
	props map[string]*Property
	order []string
}

// Get returns the property with key k.
func (c *Catalog) Get(k string) (*Property, bool) {
	p, ok := c.props[k]
	return p, ok
}

// Keys returns the keys in definition order.
func (c *Catalog) Keys() []string { return c.order }

// DefaultCatalog parses the embedded catalog.
func DefaultCatalog() (*Catalog, error) {
	return ParseCatalog(strings.NewReader(catalogConf), "catalog.conf (built in)")
}

var (
	sectionRE = regexp.MustCompile(`^\[([a-z][a-z0-9_]*)(?::([a-z][a-z0-9_]*))?\]$`)
	idRE      = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// ParseCatalog reads a catalog; errors name the file and line.
// sectionKeyRE is a property key: id or id:variant.
var sectionKeyRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(:[a-z][a-z0-9_]*)?$`)

func ParseCatalog(r io.Reader, name string) (*Catalog, error) {
	c := &Catalog{props: map[string]*Property{}}
	var cur *Property
	seen := map[string]bool{}
	finish := func() error {
		if cur == nil {
			return nil
		}
		if err := cur.compile(); err != nil {
			return fmt.Errorf("%s:%d: [%s]: %w", name, cur.Line, cur.Key(), err)
		}
		c.props[cur.Key()] = cur
		c.order = append(c.order, cur.Key())
		return nil
	}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			if err := finish(); err != nil {
				return nil, err
			}
			m := sectionRE.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("%s:%d: bad section %q: want [id] or [id:variant] in lower case", name, n, line)
			}
			cur = &Property{ID: m[1], Variant: m[2], Line: n, Severity: Formula1, Exponent: 1, Condition: Severe, Finding: true, Domain: Node, Rank: 1}
			if c.props[cur.Key()] != nil {
				return nil, fmt.Errorf("%s:%d: [%s] defined twice (first on line %d)", name, n, cur.Key(), c.props[cur.Key()].Line)
			}
			seen = map[string]bool{}
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("%s:%d: %q outside a [property] section", name, n, line)
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%s:%d: want key = value, got %q", name, n, line)
		}
		if seen[k] {
			return nil, fmt.Errorf("%s:%d: [%s]: %s set twice", name, n, cur.Key(), k)
		}
		seen[k] = true
		if err := cur.set(k, v); err != nil {
			return nil, fmt.Errorf("%s:%d: [%s]: %s: %w", name, n, cur.Key(), k, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if err := finish(); err != nil {
		return nil, err
	}
	for _, k := range c.order {
		p := c.props[k]
		for _, f := range p.Folds {
			if c.props[f] == nil || f == k {
				return nil, fmt.Errorf("%s:%d: [%s]: folds: no other property %q", name, p.Line, k, f)
			}
		}
	}
	return c, nil
}

// set sets the property's key k to v, as a catalog's line "k = v" does; the error says
// what is wrong with v (or that k is no key).
func (p *Property) set(k, v string) error {
	var err error
	switch k {
	case "name":
		p.Name = v
	case "unit":
		p.Unit = v
	case "value":
		p.Value = v
	case "threshold":
		p.Threshold = v
	case "severity":
		p.Severity, err = parseFormula(v)
	case "exponent":
		p.Exponent, err = strconv.ParseFloat(v, 64)
		if err == nil && !(p.Exponent > 0) {
			err = fmt.Errorf("must be > 0, got %s", v)
		}
	case "domain", "condition", "report", "robust":
		return p.setChoice(k, v)
	case "recommendation":
		p.Recommendation = v
	case "kernel_calls":
		p.KernelCalls = v
	case "folds", "optional":
		return p.setList(k, v)
	case "applies":
		if v == "" || strings.ContainsAny(v, " \t,") {
			return fmt.Errorf("want one metric name, got %q", v)
		}
		p.Applies = v
	case "rank":
		p.Rank, err = strconv.ParseFloat(v, 64)
		if err == nil && !(p.Rank > 0 && p.Rank <= 10) {
			err = fmt.Errorf("want a number in (0, 10], got %s", v)
		}
	default:
		return fmt.Errorf("unknown key")
	}
	return err
}

// setChoice sets a key whose value is one of a few words (domain, condition, report,
// robust); any other word leaves the property as it was, and the error lists the words.
func (p *Property) setChoice(k, v string) error {
	switch k {
	case "domain":
		switch d := Domain(v); d {
		case CPU, Core, Node, Job:
			p.Domain = d
		default:
			return fmt.Errorf("unknown domain %q (want cpu, core, node or job)", v)
		}
	case "condition":
		switch c := Condition(v); c {
		case Severe, Always, Positive, Above, Below:
			p.Condition = c
		default:
			return fmt.Errorf("unknown condition %q (want severe, always, positive, above or below)", v)
		}
	case "report":
		switch v {
		case "finding":
			p.Finding = true
		case "info":
			p.Finding = false
		default:
			return fmt.Errorf("want finding or info, got %q", v)
		}
	case "robust":
		switch v {
		case "short":
			p.LongOnly = false
		case "long":
			p.LongOnly = true
		default:
			return fmt.Errorf("want short or long, got %q", v)
		}
	}
	return nil
}

// setList adds to a key whose value is a list separated by commas: folds (property
// keys) or optional (metric names).
func (p *Property) setList(k, v string) error {
	switch k {
	case "folds":
		for _, key := range strings.Split(v, ",") {
			if key = strings.TrimSpace(key); !sectionKeyRE.MatchString(key) {
				return fmt.Errorf("want property keys separated by commas, got %q", v)
			}
			p.Folds = append(p.Folds, strings.TrimSpace(key))
		}
	case "optional":
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name == "" || strings.ContainsAny(name, " \t") {
				return fmt.Errorf("want names separated by commas, got %q", v)
			}
			p.Optional = append(p.Optional, name)
		}
	}
	return nil
}

func (p *Property) compile() error {
	if p.Name == "" {
		return fmt.Errorf("name missing")
	}
	if p.Value == "" {
		return fmt.Errorf("value missing")
	}
	if p.Severity != None && p.Threshold == "" {
		return fmt.Errorf("threshold missing (severity %s needs one)", p.Severity)
	}
	if (p.Condition == Above || p.Condition == Below) && p.Threshold == "" {
		return fmt.Errorf("condition %s needs a threshold", p.Condition)
	}
	if p.Finding && p.Severity != None && p.Recommendation == "" {
		return fmt.Errorf("recommendation missing (a finding needs one)")
	}
	var err error
	var needs []string
	if p.value, needs, err = compileExpr(p.Value, p.Domain); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	p.needs = needs
	p.valueNames = append([]string(nil), needs...)
	if p.KernelCalls != "" {
		if !slices.Contains(p.Folds, KernelTime) {
			return fmt.Errorf("kernel_calls: the property does not fold %s", KernelTime)
		}
		if p.kernelCalls, _, err = compileExpr(p.KernelCalls, Job); err != nil {
			return fmt.Errorf("kernel_calls: %w", err)
		}
	}
	for _, o := range p.Optional {
		if !slices.Contains(needs, o) {
			return fmt.Errorf("optional: %s is not a name the value uses", o)
		}
	}
	if p.Threshold != "" {
		var tn []string
		if p.threshold, tn, err = compileThreshold(p.Threshold); err != nil {
			return fmt.Errorf("threshold: %w", err)
		}
		p.needs = append(p.needs, tn...)
	}
	sort.Strings(p.needs)
	return nil
}

// compileExpr compiles an expression over the names of a domain.
func compileExpr(src string, d Domain) (*vm.Program, []string, error) {
	env := envTemplate(d)
	prog, err := expr.Compile(src, expr.Env(env), expr.AsFloat64())
	if err != nil {
		return nil, nil, fmt.Errorf("%q: %s", src, firstLine(err.Error()))
	}
	return prog, identifiers(prog), nil
}

// compileThreshold accepts a number with an optional unit suffix, or an expression of
// calibration values.
func compileThreshold(src string) (*vm.Program, []string, error) {
	if v, ok := config.ParseQuantity(src); ok {
		src = strconv.FormatFloat(v, 'g', -1, 64)
	}
	prog, err := expr.Compile(src, expr.Env(calibrationTemplate()), expr.AsFloat64())
	if err != nil {
		return nil, nil, fmt.Errorf("%q: %s", src, firstLine(err.Error()))
	}
	return prog, identifiers(prog), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

type identVisitor struct{ names map[string]bool }

func (v *identVisitor) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok {
		v.names[id.Value] = true
	}
}

func identifiers(p *vm.Program) []string {
	v := &identVisitor{names: map[string]bool{}}
	node := p.Node()
	ast.Walk(&node, v)
	out := make([]string, 0, len(v.names))
	for n := range v.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Sanitize turns a metric name into an expression identifier: "task-clock" →
// "task_clock", "syscalls:sys_enter_openat" → "syscalls_sys_enter_openat".
func Sanitize(name string) string {
	clean := true
	for i := 0; i < len(name) && clean; i++ {
		c := name[i]
		clean = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
	}
	if clean {
		return name // most metric names: no copy (the daemon sanitizes every sample's)
	}
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ValidKey reports whether s can be a property key.
func ValidKey(s string) bool {
	id, variant, ok := strings.Cut(s, ":")
	return idRE.MatchString(id) && (!ok || idRE.MatchString(variant))
}
