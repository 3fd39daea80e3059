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

var (
	nan  = math.NaN()
	inf  = math.Inf(1)
	ninf = math.Inf(-1)
)

// floatOpts compares floats to 1e-12 relative and treats NaN as equal to NaN.
var floatOpts = cmp.Options{cmpopts.EquateApprox(1e-12, 1e-12), cmpopts.EquateNaNs()}

func TestSummarizeHandWorked(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		q      int
		want   Summary
	}{
		{
			// h = 4k/10: 1, 1.4, 1.8, ..., 5.
			name: "1..5 deciles", values: []float64{5, 3, 1, 4, 2}, q: 10,
			want: Summary{Count: 5, Sum: 15, Min: 1, Max: 5, Mean: 3,
				Quantiles: []float64{1, 1.4, 1.8, 2.2, 2.6, 3, 3.4, 3.8, 4.2, 4.6, 5}},
		},
		{
			// The numpy.percentile (linear) example: 40% of
			// [15 20 35 40 50] is 29. h = 0.8k: 15, 19, 29, 37, 42, 50.
			name: "numpy example quintiles", values: []float64{15, 20, 35, 40, 50}, q: 5,
			want: Summary{Count: 5, Sum: 160, Min: 15, Max: 50, Mean: 32,
				Quantiles: []float64{15, 19, 29, 37, 42, 50}},
		},
		{
			// h = 0.75k: 1, 1.75, 2.5, 3.25, 4.
			name: "1..4 quartiles", values: []float64{4, 3, 2, 1}, q: 4,
			want: Summary{Count: 4, Sum: 10, Min: 1, Max: 4, Mean: 2.5,
				Quantiles: []float64{1, 1.75, 2.5, 3.25, 4}},
		},
		{
			name: "duplicates", values: []float64{3, 1, 2, 2}, q: 2,
			want: Summary{Count: 4, Sum: 8, Min: 1, Max: 3, Mean: 2,
				Quantiles: []float64{1, 2, 3}},
		},
		{
			name: "n=1", values: []float64{7}, q: 10,
			want: Summary{Count: 1, Sum: 7, Min: 7, Max: 7, Mean: 7,
				Quantiles: []float64{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}},
		},
		{
			name: "n=2", values: []float64{10, 0}, q: 10,
			want: Summary{Count: 2, Sum: 10, Min: 0, Max: 10, Mean: 5,
				Quantiles: []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		},
		{
			name: "negative and zero", values: []float64{-2, 0, 2}, q: 4,
			want: Summary{Count: 3, Sum: 0, Min: -2, Max: 2, Mean: 0,
				Quantiles: []float64{-2, -1, 0, 1, 2}},
		},
		{
			name: "non-finite skipped", values: []float64{nan, 1, inf, 3, ninf}, q: 2,
			want: Summary{Count: 2, NonFinite: 3, Sum: 4, Min: 1, Max: 3, Mean: 2,
				Quantiles: []float64{1, 2, 3}},
		},
		{
			name: "empty", values: nil, q: 2,
			want: Summary{Min: nan, Max: nan, Mean: nan, Quantiles: []float64{nan, nan, nan}},
		},
		{
			name: "only NaN", values: []float64{nan, nan}, q: 1,
			want: Summary{NonFinite: 2, Min: nan, Max: nan, Mean: nan, Quantiles: []float64{nan, nan}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.values)
			got, err := Summarize(in, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, floatOpts); diff != "" {
				t.Errorf("Summarize(%v, %d) (-want +got):\n%s", tt.values, tt.q, diff)
			}
			if diff := cmp.Diff(tt.values, in, cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("input modified (-want +got):\n%s", diff)
			}
			if got.Q() != tt.q {
				t.Errorf("Q() = %d, want %d", got.Q(), tt.q)
			}
		})
	}
}

// refType7 is the type-7 quantile as Hyndman & Fan write it (1-based):
// h = (n-1)p + 1, Q = x[⌊h⌋] + (h-⌊h⌋)(x[⌊h⌋+1] - x[⌊h⌋]), on a sorted copy.
func refType7(values []float64, p float64) float64 {
	x := slices.Clone(values)
	slices.Sort(x)
	x = append([]float64{0}, x...) // 1-based
	n := len(x) - 1
	h := float64(n-1)*p + 1
	lo := math.Floor(h)
	if int(lo) >= n {
		return x[n]
	}
	return x[int(lo)] + (h-lo)*(x[int(lo)+1]-x[int(lo)])
}

func TestSummarizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func() float64{
		"normal":    func() float64 { return r.NormFloat64() },
		"lognormal": func() float64 { return math.Exp(3 * r.NormFloat64()) },
		"ties":      func() float64 { return float64(r.IntN(4)) },
	}
	for name, gen := range gens {
		for _, n := range []int{1, 2, 3, 7, 10, 11, 48, 99, 100, 101, 1000} {
			for _, q := range []int{1, 2, 4, 10, 100} {
				values := make([]float64, n)
				for i := range values {
					values[i] = gen()
				}
				got, err := Summarize(values, q)
				if err != nil {
					t.Fatal(err)
				}
				want := make([]float64, q+1)
				var sum float64
				for k := range want {
					want[k] = refType7(values, float64(k)/float64(q))
				}
				for _, v := range values {
					sum += v
				}
				if diff := cmp.Diff(want, got.Quantiles, cmpopts.EquateApprox(1e-12, 1e-12)); diff != "" {
					t.Errorf("%s n=%d q=%d quantiles (-want +got):\n%s", name, n, q, diff)
				}
				if diff := cmp.Diff(sum/float64(n), got.Mean, cmpopts.EquateApprox(1e-12, 1e-12)); diff != "" {
					t.Errorf("%s n=%d q=%d mean (-want +got):\n%s", name, n, q, diff)
				}
				for k := range want {
					if a := QuantileAt(values, float64(k)/float64(q)); math.Abs(a-want[k]) > 1e-12*(1+math.Abs(a)) {
						t.Errorf("%s n=%d QuantileAt(%d/%d) = %v, want %v", name, n, k, q, a, want[k])
					}
				}
				if !slices.IsSorted(got.Quantiles) {
					t.Errorf("%s n=%d q=%d quantiles not monotone: %v", name, n, q, got.Quantiles)
				}
			}
		}
	}
}

func TestSummarizeBadQ(t *testing.T) {
	for _, q := range []int{-1, 0, MaxQ + 1} {
		if _, err := Summarize([]float64{1}, q); !errors.Is(err, ErrQ) {
			t.Errorf("Summarize(q=%d) error = %v, want ErrQ", q, err)
		}
	}
}

func TestQuantileAtEdges(t *testing.T) {
	tests := []struct {
		values []float64
		p      float64
		want   float64
	}{
		{nil, 0.5, nan},
		{[]float64{nan}, 0.5, nan},
		{[]float64{1, 2}, -0.1, nan},
		{[]float64{1, 2}, 1.1, nan},
		{[]float64{1, 2}, nan, nan},
		{[]float64{2, 1, inf}, 1, 2},
		{[]float64{1, 2}, 0.25, 1.25},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, QuantileAt(tt.values, tt.p), floatOpts); diff != "" {
			t.Errorf("QuantileAt(%v, %v) (-want +got):\n%s", tt.values, tt.p, diff)
		}
	}
}

func TestScratchReuseDoesNotAlias(t *testing.T) {
	var sc Scratch
	a, _ := sc.Summarize([]float64{1, 2, 3}, 2)
	b, _ := sc.Summarize([]float64{10, 20, 30, 40}, 2)
	if diff := cmp.Diff([]float64{1, 2, 3}, a.Quantiles); diff != "" {
		t.Errorf("first Summary changed by reuse (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{10, 25, 40}, b.Quantiles); diff != "" {
		t.Errorf("second Summary (-want +got):\n%s", diff)
	}
}

func TestProbabilities(t *testing.T) {
	if diff := cmp.Diff([]float64{0, 0.25, 0.5, 0.75, 1}, Probabilities(4)); diff != "" {
		t.Errorf("Probabilities(4) (-want +got):\n%s", diff)
	}
}
