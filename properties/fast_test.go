package properties

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/expr-lang/expr"
	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/sample"
)

// TestFastMatchesExpr holds the compiled closures to expr's VM: every property of the
// built-in catalog compiles to a closure, and on random values (zeros, negatives, tiny
// and huge numbers, values at the thresholds' scale) both give the same number, bit for
// bit (or both NaN).
func TestFastMatchesExpr(t *testing.T) {
	cat, err := DefaultCatalog()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() float64 {
		switch rng.IntN(8) {
		case 0:
			return 0
		case 1:
			return -rng.Float64() * 100
		case 2:
			return rng.Float64() * 1e-9
		case 3:
			return rng.Float64() * 1e12
		case 4:
			return float64(rng.IntN(4))
		default:
			return rng.Float64() * 100
		}
	}
	for _, key := range cat.Keys() {
		p, _ := cat.Get(key)
		tab := names{index: map[string]int{}}
		f, ok := compileFast(p.value.Node(), &tab)
		if !ok {
			t.Errorf("%s: %q does not compile to a closure (the daemon would run it on the VM)", key, p.Value)
			continue
		}
		for _, n := range p.valueNames {
			tab.add(n)
		}
		sl := newSlots(len(tab.list))
		for range 2000 {
			env := map[string]any{}
			for i, n := range tab.list {
				sl.set(i, pick())
				env[n] = sl.v[i]
			}
			out, err := expr.Run(p.value, env)
			if err != nil {
				t.Fatalf("%s: expr: %v", key, err)
			}
			want, got := out.(float64), f(sl.v)
			if math.Float64bits(want) != math.Float64bits(got) && !(math.IsNaN(want) && math.IsNaN(got)) {
				t.Fatalf("%s: %q with %v: closure %v, expr %v", key, p.Value, env, got, want)
			}
		}
	}
}

// TestFastCoversOperators: each form the closures cover gives expr's result; the forms
// they do not cover are refused (and then run on the VM).
func TestFastCoversOperators(t *testing.T) {
	env := map[string]float64{"a": 7, "b": -2, "c": 0}
	tests := []struct {
		src  string
		fast bool
	}{
		{"a + b * 3 - a / b", true},
		{"-a + +b", true},
		{"a ** 2 + b ^ 3", true},
		{"a > b ? 1 : 2", true},
		{"a >= 7 && b <= -2 || !(c == 0) ? a : b", true},
		{"a != b and not (a < b) or c > 0 ? 1.5 : 0", true},
		{"max(a, b, 10) - min(a, b) + abs(b)", true},
		{"c / c", true}, // NaN, as expr gives
		{"a / c", true}, // +Inf
		{"ceil(a / 2)", false},
		{"float(int(a) % 2)", false},
		{"a in [1, 7] ? a : b", false},
	}
	for _, tc := range tests {
		prog, err := expr.Compile(tc.src, expr.Env(env), expr.AsFloat64())
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		tab := names{index: map[string]int{}}
		f, ok := compileFast(prog.Node(), &tab)
		if ok != tc.fast {
			t.Errorf("%q: compiled %v, want %v", tc.src, ok, tc.fast)
			continue
		}
		if !ok {
			continue
		}
		sl := newSlots(len(tab.list))
		anyEnv := map[string]any{}
		for k, v := range env {
			anyEnv[k] = v
			sl.set(tab.slot(k), v)
		}
		out, err := expr.Run(prog, anyEnv)
		if err != nil {
			t.Fatal(err)
		}
		if want, got := out.(float64), f(sl.v); math.Float64bits(want) != math.Float64bits(got) && !(math.IsNaN(want) && math.IsNaN(got)) {
			t.Errorf("%q: closure %v, expr %v", tc.src, got, want)
		}
	}
}

// TestSlowPathEvaluates: a property whose value the closures do not cover (an admin's
// catalog may use any of expr's language) is evaluated on the VM, with the same records.
func TestSlowPathEvaluates(t *testing.T) {
	src := `
[fast]
name = Fast
domain = node
value = write_chars / seconds
threshold = 10
severity = formula1
recommendation = fix it

[slow]
name = Slow
domain = node
value = ceil(write_chars / seconds)
threshold = 10
severity = formula1
recommendation = fix it
`
	cat, err := ParseCatalog(strings.NewReader(src), "t.conf")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStrategy(strings.NewReader("fast\nslow\n"), "t.strategy", cat)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(Config{Catalog: cat, Strategy: st})
	if err != nil {
		t.Fatal(err)
	}
	fast, _ := cat.Get("fast")
	slow, _ := cat.Get("slow")
	if e.evals[fast].fast == nil || e.evals[slow].fast != nil {
		t.Fatalf("fast compiled %v, slow compiled %v; want true, false", e.evals[fast].fast != nil, e.evals[slow].fast != nil)
	}
	acc := e.NewAccumulator(JobInfo{NCPUs: 1})
	t0 := time.Unix(1000, 0)
	recs := acc.Add(sample.Sample{Time: t0.Add(5 * time.Second), Seconds: 2, Job: map[string]float64{sample.WriteChars: 41}})
	got := map[string]float64{}
	for _, r := range recs {
		got[r.Key] = r.Value
	}
	if got["fast"] != 20.5 || got["slow"] != 21 {
		t.Errorf("records %v, want fast 20.5 and slow 21", got)
	}
}

// TestOptionalNames: a name listed in `optional =` counts as 0 where it was not measured
// (the branch that needs it falls silent), in the closures and in expr's VM alike, while
// it stays missing for other properties; a missing name that is not optional leaves the
// property not assessed.
func TestOptionalNames(t *testing.T) {
	src := `
[gate]
name = Gate
domain = node
value = max(write_chars / seconds, psi_io_some_seconds > 0 ? 1000 : 0)
optional = psi_io_some_seconds
threshold = 10
severity = formula1
report = info

[gate_vm]
name = Gate in the VM
domain = node
value = ceil(max(write_chars / seconds, psi_io_some_seconds > 0 ? 1000 : 0))
optional = psi_io_some_seconds
threshold = 10
severity = formula1
report = info

[strict]
name = Strict
domain = node
value = psi_io_some_seconds
threshold = 10
severity = formula1
report = info
`
	cat, err := ParseCatalog(strings.NewReader(src), "t.conf")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStrategy(strings.NewReader("gate\ngate_vm\nstrict\n"), "t.strategy", cat)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(Config{Catalog: cat, Strategy: st})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		job  map[string]float64
		want map[string]float64 // records by key
	}{
		{"PSI not measured", map[string]float64{sample.WriteChars: 40}, map[string]float64{"gate": 20, "gate_vm": 20}},
		{"PSI measured", map[string]float64{sample.WriteChars: 40, sample.PSIIOSomeSeconds: 0.5},
			map[string]float64{"gate": 1000, "gate_vm": 1000, "strict": 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acc := e.NewAccumulator(JobInfo{NCPUs: 1})
			recs := acc.Add(sample.Sample{Time: time.Unix(1005, 0), Seconds: 2, Job: tc.job})
			got := map[string]float64{}
			for _, r := range recs {
				got[r.Key] = r.Value
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ParseCatalog(strings.NewReader("[p]\nname = P\ndomain = node\nvalue = seconds\noptional = write_chars\nseverity = none\n"), "o.conf"); err == nil ||
		!strings.Contains(err.Error(), "optional: write_chars is not a name the value uses") {
		t.Errorf("an optional name the value does not use: %v", err)
	}
}
