package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/quantile"
)

// refQuantile is the type-7 quantile at k/q by the textbook formula on a
// sorted copy, independent of the quantile package.
func refQuantile(values []float64, k, q int) float64 {
	s := slices.Clone(values)
	slices.Sort(s)
	h := float64(len(s)-1) * float64(k) / float64(q)
	j := int(math.Floor(h))
	if j >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[j] + (h-float64(j))*(s[j+1]-s[j])
}

func TestSummarize(t *testing.T) {
	// One cycle of a 2-node job, 4 CPUs per node ("hostN/cpuM" labels):
	//   busy (CPU domain) on all 8 CPUs, values 0..7 (n-1 = 7: deciles between ranks)
	//   stall (CPU domain) refined onto 2 CPUs
	//   mem (node domain) on both nodes
	//   ipc (core domain) with 21 values: deciles fall on ranks exactly
	var recs []properties.Record
	rec := func(key, dev string, v, sev float64) {
		recs = append(recs, properties.Record{Time: T0, Key: key, Device: dev, Value: v, Severity: sev})
	}
	sevs := []float64{0, 0.1, 0.25, 0.3, 0.5, 0.6, 0.75, 1}
	for i := range 8 {
		rec("busy", fmt.Sprintf("host%d/cpu%d", i/4, i%4), float64(7-i), sevs[i])
	}
	rec("stall", "host0/cpu1", 3, 0.9)
	rec("stall", "host1/cpu2", 5, 0)
	rec("mem", "host0/node", 100, 0)
	rec("mem", "host1/node", 300, 2) // an invalid severity
	for i := range 21 {
		rec("ipc", fmt.Sprintf("host%d/core0.%d", i%2, i), float64(i*i), 0.2)
	}

	got, err := Summarize(recs, 10)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(got))
	for i, r := range got {
		keys[i] = r.Key
	}
	if d := cmp.Diff([]string{"busy", "ipc", "mem", "stall"}, keys); d != "" {
		t.Fatalf("keys (-want +got):\n%s", d)
	}
	byKey := map[string]CycleResult{}
	for _, r := range got {
		byKey[r.Key] = r
	}

	busy := byKey["busy"]
	if busy.Devices != 8 || busy.TimeShare != 7.0/8 {
		t.Errorf("busy: devices %d, share %v", busy.Devices, busy.TimeShare)
	}
	if want := (quantile.Severity{Counts: [5]int64{1, 2, 2, 2, 1}}); busy.Severity != want {
		t.Errorf("busy severity %+v, want %+v", busy.Severity, want)
	}
	stall := byKey["stall"]
	if stall.Devices != 8 || stall.TimeShare != 1.0/8 {
		t.Errorf("stall: a refined property's base is the whole domain: devices %d, share %v", stall.Devices, stall.TimeShare)
	}
	mem := byKey["mem"]
	if mem.Devices != 2 || mem.Severity.Invalid != 1 || mem.TimeShare != 0 {
		t.Errorf("mem: %+v", mem)
	}
	ipc := byKey["ipc"]
	if ipc.Devices != 21 || ipc.TimeShare != 1 {
		t.Errorf("ipc: devices %d, share %v", ipc.Devices, ipc.TimeShare)
	}
	// Exact deciles: on ranks (ipc: x_{2k} = (2k)²) and between ranks (busy).
	for k := range 11 {
		if want := float64(4 * k * k); ipc.Summary.Quantiles[k] != want {
			t.Errorf("ipc decile %d = %v, want %v", k, ipc.Summary.Quantiles[k], want)
		}
	}
	if d := cmp.Diff([]float64{0, 0.7, 1.4, 2.1, 2.8, 3.5, 4.2, 4.9, 5.6, 6.3, 7}, busy.Summary.Quantiles, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("busy deciles (-want +got):\n%s", d)
	}
	if s := busy.Summary; s.Count != 8 || s.Min != 0 || s.Max != 7 || s.Mean != 3.5 || s.Sum != 28 {
		t.Errorf("busy summary %+v", s)
	}

	// Against the reference on random populations of every size up to 300,
	// deciles and percentiles.
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 300; n++ {
		recs = recs[:0]
		values := make([]float64, n)
		for i := range values {
			values[i] = math.Exp(r.NormFloat64()) * 1e3
			rec("p", fmt.Sprintf("cpu%d", i), values[i], r.Float64())
		}
		for _, q := range []int{10, 100} {
			got, err := Summarize(recs, q)
			if err != nil || len(got) != 1 || got[0].Summary.Count != int64(n) || got[0].Summary.Q() != q {
				t.Fatalf("n=%d q=%d: %+v, %v", n, q, got, err)
			}
			for k := 0; k <= q; k++ {
				want := refQuantile(values, k, q)
				if g := got[0].Summary.Quantiles[k]; math.Abs(g-want) > 1e-12*math.Abs(want) {
					t.Fatalf("n=%d q=%d k=%d: %v, reference %v", n, q, k, g, want)
				}
			}
		}
	}

	if rs, err := Summarize(nil, 10); err != nil || len(rs) != 0 {
		t.Errorf("no records: %v, %v", rs, err)
	}
	for _, q := range []int{0, quantile.MaxQ + 1} {
		if _, err := Summarize(recs, q); err == nil {
			t.Errorf("q=%d accepted", q)
		}
	}
}

func TestDomainOf(t *testing.T) {
	for in, want := range map[string]string{
		"cpu3": "cpu", "core0.12": "core", "node": "node", "host7/cpu31": "cpu",
		"a/b/core1.2": "core", "node12/node": "node", "gpu0": "gpu",
	} {
		if got := DomainOf(in); got != want {
			t.Errorf("domainOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestQuantilesJSON(t *testing.T) {
	in := []float64{0, -0.0, 1, -1.5, 1e-300, 5e-324, math.MaxFloat64, 1.0 / 3, math.NaN(), math.Inf(1), math.Inf(-1), 123456789012345678}
	b := appendQuantiles(nil, in)
	got, err := parseQuantiles(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, got, cmpopts.EquateNaNs()); d != "" {
		t.Errorf("%s (-in +out):\n%s", b, d)
	}
	for _, bad := range []string{"", "{}", `["a"]`, "[1,", "[1e9999999999]x"} {
		if _, err := parseQuantiles(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
