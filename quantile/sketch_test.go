package quantile

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mustSketch(t testing.TB, alpha float64, values []float64) *Sketch {
	t.Helper()
	s, err := SketchOf(alpha, values)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// roundTrip encodes and decodes s.
func roundTrip(t testing.TB, s *Sketch) *Sketch {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeSketch(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSketchBound checks the guarantee stated on Sketch: each quantile of a
// merged (and wire round-tripped) sketch is within α·max(|x_j|, |x_{j+1}|)
// of the exact type-7 quantile, for positive, negative, zero-heavy and mixed
// data split into random parts.
func TestSketchBound(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	gens := map[string]func() float64{
		"lognormal": func() float64 { return math.Exp(2 * r.NormFloat64()) },
		"normal":    func() float64 { return r.NormFloat64() },
		"negative":  func() float64 { return -1 - 100*r.Float64() },
		"zeros": func() float64 {
			if r.IntN(3) == 0 {
				return 0
			}
			return r.NormFloat64()
		},
		"all zero": func() float64 { return 0 },
		"tiny":     func() float64 { return 1e-300 * r.Float64() },
		"huge":     func() float64 { return 1e300 * r.NormFloat64() },
	}
	for name, gen := range gens {
		for _, alpha := range []float64{0.01, 0.001} {
			for _, n := range []int{1, 2, 10, 48, 1000} {
				values := make([]float64, n)
				for i := range values {
					values[i] = gen()
				}
				merged, _ := NewSketch(alpha)
				for rest := values; len(rest) > 0; {
					m := 1 + r.IntN(len(rest))
					if err := merged.Merge(roundTrip(t, mustSketch(t, alpha, rest[:m]))); err != nil {
						t.Fatal(err)
					}
					rest = rest[m:]
				}
				got, err := roundTrip(t, merged).Summary(10)
				if err != nil {
					t.Fatal(err)
				}
				exact := mustSummarize(t, values, 10)
				sorted := slices.Sorted(slices.Values(values))
				for k := range exact.Quantiles {
					j := (n - 1) * k / 10
					bound := alpha * math.Abs(sorted[j])
					if j+1 < n {
						bound = max(bound, alpha*math.Abs(sorted[j+1]))
					}
					if e := math.Abs(got.Quantiles[k] - exact.Quantiles[k]); e > bound*(1+1e-9) {
						t.Errorf("%s α=%g n=%d decile %d: sketch %v exact %v error %g > bound %g",
							name, alpha, n, k, got.Quantiles[k], exact.Quantiles[k], e, bound)
					}
				}
				stats := func(s Summary) [5]float64 { return [5]float64{float64(s.Count), s.Sum, s.Min, s.Max, s.Mean} }
				if diff := cmp.Diff(stats(exact), stats(got), cmpopts.EquateApprox(1e-9, 1e-300)); diff != "" {
					t.Errorf("%s α=%g n=%d count, sum, min, max, mean (-want +got):\n%s", name, alpha, n, diff)
				}
				if q := merged.Quantile(0.5); q != got.Quantiles[5] {
					t.Errorf("%s α=%g n=%d Quantile(0.5) = %v, Summary's = %v", name, alpha, n, q, got.Quantiles[5])
				}
			}
		}
	}
}

// TestSketchHandWorked checks zero and negative handling on small tables.
func TestSketchHandWorked(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		q      int
		want   []float64 // exact type 7; the sketch must be within 1% of it
	}{
		{"zeros between negatives and positives", []float64{-5, 0, 0, 5}, 2, []float64{-5, 0, 5}},
		{"symmetric", []float64{-100, -1, 0, 1, 100}, 4, []float64{-100, -1, 0, 1, 100}},
		{"all negative", []float64{-4, -3, -2, -1}, 3, []float64{-4, -3, -2, -1}},
		{"all zero", []float64{0, 0, 0}, 2, []float64{0, 0, 0}},
		{"one value", []float64{-3}, 2, []float64{-3, -3, -3}},
		{"non-finite skipped", []float64{nan, 2, inf, ninf, 4}, 2, []float64{2, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustSketch(t, 0.01, tt.values)
			got, err := s.Summary(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.Quantiles, cmpopts.EquateApprox(0.01, 0)); diff != "" {
				t.Errorf("quantiles (-want +got):\n%s", diff)
			}
			for k, w := range tt.want {
				if w == 0 && got.Quantiles[k] != 0 {
					t.Errorf("quantile %d = %v, want exactly 0", k, got.Quantiles[k])
				}
			}
			exact := mustSummarize(t, tt.values, tt.q)
			if got.NonFinite != exact.NonFinite || got.Count != exact.Count {
				t.Errorf("count, non-finite = %d, %d, want %d, %d", got.Count, got.NonFinite, exact.Count, exact.NonFinite)
			}
		})
	}
}

func TestSketchEmpty(t *testing.T) {
	s := mustSketch(t, 0.01, []float64{nan})
	got, err := s.Summary(2)
	if err != nil {
		t.Fatal(err)
	}
	want := Summary{NonFinite: 1, Min: nan, Max: nan, Mean: nan, Quantiles: []float64{nan, nan, nan}}
	if diff := cmp.Diff(want, got, floatOpts); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, mustSummary(t, roundTrip(t, s), 2), floatOpts); diff != "" {
		t.Errorf("after round trip (-want +got):\n%s", diff)
	}
	if q := s.Quantile(0.5); !math.IsNaN(q) {
		t.Errorf("Quantile of empty = %v, want NaN", q)
	}
}

func mustSummary(t testing.TB, s *Sketch, q int) Summary {
	t.Helper()
	got, err := s.Summary(q)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestSketchErrors(t *testing.T) {
	for _, alpha := range []float64{0, 1, -0.5, nan} {
		if _, err := NewSketch(alpha); err == nil {
			t.Errorf("NewSketch(%v) succeeded, want error", alpha)
		}
	}
	a, b := mustSketch(t, 0.01, []float64{1}), mustSketch(t, 0.02, []float64{1})
	if err := a.Merge(b); err == nil {
		t.Error("merging sketches of different alpha succeeded")
	}
	if _, err := a.Summary(0); !errors.Is(err, ErrQ) {
		t.Errorf("Summary(0) error = %v, want ErrQ", err)
	}
	for _, p := range []float64{-0.1, 1.1, nan} {
		if q := a.Quantile(p); !math.IsNaN(q) {
			t.Errorf("Quantile(%v) = %v, want NaN", p, q)
		}
	}
	good, _ := a.MarshalBinary()
	for name, b := range map[string][]byte{
		"nil":       nil,
		"bad magic": append([]byte("XQS\x01"), good[4:]...),
		"version":   append([]byte("PQS\x02"), good[4:]...),
		"no count":  good[:4],
		"truncated": good[:len(good)-1],
	} {
		if _, err := DecodeSketch(b); !errors.Is(err, ErrSketchEncoding) {
			t.Errorf("DecodeSketch(%s) error = %v, want ErrSketchEncoding", name, err)
		}
	}
}

func TestSketchRoundTripKeepsEverything(t *testing.T) {
	s := mustSketch(t, 0.005, []float64{-2, 0, 1, 2, 3, nan, 1e6})
	want := mustSummary(t, s, 10)
	d := roundTrip(t, s)
	if diff := cmp.Diff(want, mustSummary(t, d, 10)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if d.Alpha() != s.Alpha() {
		t.Errorf("alpha = %v, want %v", d.Alpha(), s.Alpha())
	}
	// Decoded sketches keep merging.
	if err := d.Merge(s); err != nil {
		t.Fatal(err)
	}
	if d.Count() != 12 || d.NonFinite() != 2 {
		t.Errorf("after merge count, non-finite = %d, %d, want 12, 2", d.Count(), d.NonFinite())
	}
}

func FuzzDecodeSketch(f *testing.F) {
	for _, vs := range [][]float64{nil, {1}, {-1, 0, 1, 1e10}} {
		s, _ := SketchOf(0.01, vs)
		b, _ := s.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSketch(b)
		if err != nil {
			return
		}
		_, _ = s.Summary(10)
	})
}

func TestMergeSketches(t *testing.T) {
	a := mustSketch(t, 0.02, []float64{1, 2, nan})
	b := mustSketch(t, 0.02, []float64{3, 4})
	got, err := MergeSketches([]*Sketch{nil, a, b})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.Alpha()-0.02) > 1e-12 || got.Count() != 4 || got.NonFinite() != 1 {
		t.Errorf("alpha, count, non-finite = %v, %d, %d, want 0.02, 4, 1", got.Alpha(), got.Count(), got.NonFinite())
	}
	if a.Count() != 2 {
		t.Errorf("part modified: count %d", a.Count())
	}
	empty, err := MergeSketches(nil)
	if err != nil || math.Abs(empty.Alpha()-DefaultAlpha) > 1e-12 || empty.Count() != 0 {
		t.Errorf("MergeSketches(nil) = %v, %v", empty, err)
	}
	if _, err := MergeSketches([]*Sketch{a, mustSketch(t, 0.01, []float64{1})}); err == nil {
		t.Error("mixed alpha merged")
	}
}
