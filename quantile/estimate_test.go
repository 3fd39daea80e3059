package quantile

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRebuildThesisExample checks the rebuilt sets of the thesis's worked
// example (§5.2): D_a with N_a = 40 gets R(0,1) = 2 and R(k,k+1) = 3 random
// values, D_b with N_b = 20 gets 0 and 1.
func TestRebuildThesisExample(t *testing.T) {
	tests := []struct {
		name      string
		deciles   []float64
		n         int
		wantRanks []int // rank of each decile in the rebuilt set
	}{
		{
			name:      "D_a",
			deciles:   []float64{2, 40, 45, 60, 65, 67, 78, 90, 100, 113, 130},
			n:         40,
			wantRanks: []int{0, 3, 7, 11, 15, 19, 23, 27, 31, 35, 39},
		},
		{
			name:      "D_b",
			deciles:   []float64{8, 29, 40, 65, 80, 87, 92, 97, 106, 112, 134},
			n:         20,
			wantRanks: []int{0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19},
		},
		{
			// Not divisible: ⌈48k/10⌉-1.
			name:      "n=48",
			deciles:   []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
			n:         48,
			wantRanks: []int{0, 4, 9, 14, 19, 23, 28, 33, 38, 43, 47},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rebuildPart(nil, tt.deciles, tt.n, rand.New(rand.NewPCG(1, 1)))
			if len(got) != tt.n {
				t.Fatalf("rebuilt %d values, want %d", len(got), tt.n)
			}
			var gotRanks []int
			k := 0
			for j, v := range got {
				// Values between ranks of deciles k-1 and k lie in
				// [d_{k-1}, d_k].
				if k < len(tt.wantRanks) && j == tt.wantRanks[k] {
					if v != tt.deciles[k] {
						t.Errorf("rank %d = %v, want decile %d = %v", j, v, k, tt.deciles[k])
					}
					gotRanks = append(gotRanks, j)
					k++
					continue
				}
				if v < tt.deciles[k-1] || v > tt.deciles[k] {
					t.Errorf("rank %d = %v outside [%v, %v]", j, v, tt.deciles[k-1], tt.deciles[k])
				}
			}
			if diff := cmp.Diff(tt.wantRanks, gotRanks); diff != "" {
				t.Errorf("decile ranks (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRebuildSmallN(t *testing.T) {
	tests := []struct {
		values []float64
		want   []float64
	}{
		{[]float64{5}, []float64{5}},
		{[]float64{1, 2}, []float64{1, 2}},
		{[]float64{1, 2, 3}, []float64{1, 2, 3}},
		{[]float64{1, 2, 4, 8, 16, 32}, []float64{1, 2, 4, 8, 16, 32}}, // 5 divides q=10
		{[]float64{0, 3, 6, 9}, []float64{0, 3, 6, 9}},                 // linear: exact
		// Not exact: of 0 1 4 9, rank 1 (p = 1/3) is interpolated between
		// d3 = 0.9 and d4 = 1.6: 0.9 + (1/3)·0.7; rank 2 (p = 2/3) between
		// d6 = 3.4 and d7 = 4.5: 3.4 + (2/3)·1.1.
		{[]float64{0, 1, 4, 9}, []float64{0, 0.9 + 0.7/3, 3.4 + 2.2/3, 9}},
	}
	for _, tt := range tests {
		s, _ := Summarize(tt.values, 10)
		got := rebuildPart(nil, s.Quantiles, len(tt.values), nil)
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(1e-12, 1e-12)); diff != "" {
			t.Errorf("rebuild of %v (-want +got):\n%s", tt.values, diff)
		}
	}
}

func mustSummarize(t testing.TB, values []float64, q int) Summary {
	t.Helper()
	s, err := Summarize(values, q)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMergeEstimate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	normals := func(n int, mean float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = mean + r.NormFloat64()
		}
		return v
	}
	a, b := normals(100, 0), normals(100, 100)
	c := normals(300, 50)

	tests := []struct {
		name  string
		parts [][]float64
		q     []int
		check func(t *testing.T, got Summary)
	}{
		{
			// Disjoint ranges, equal counts: the median sits between A's
			// max and B's min, both kept, h = 99.5 → their midpoint.
			name: "disjoint halves", parts: [][]float64{a, b}, q: []int{10, 10},
			check: func(t *testing.T, got Summary) {
				want := (slices.Max(a) + slices.Min(b)) / 2
				if diff := cmp.Diff(want, got.Quantiles[5], cmpopts.EquateApprox(1e-12, 0)); diff != "" {
					t.Errorf("median (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "small parts are exact", parts: [][]float64{{1, 2, 3}, {4, 5}}, q: []int{10, 10},
			check: func(t *testing.T, got Summary) {
				want := mustSummarize(t, []float64{1, 2, 3, 4, 5}, 10)
				if diff := cmp.Diff(want, got, floatOpts); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "constant", parts: [][]float64{{7, 7, 7}, {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}}, q: []int{10, 10},
			check: func(t *testing.T, got Summary) {
				for k, v := range got.Quantiles {
					if v != 7 {
						t.Errorf("quantile %d = %v, want 7", k, v)
					}
				}
			},
		},
		{
			name: "one part is returned exactly", parts: [][]float64{nil, c, nil}, q: []int{10, 10, 10},
			check: func(t *testing.T, got Summary) {
				if diff := cmp.Diff(mustSummarize(t, c, 10), got, floatOpts); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "different q: result has the largest", parts: [][]float64{a, c}, q: []int{4, 10},
			check: func(t *testing.T, got Summary) {
				if got.Q() != 10 {
					t.Errorf("Q() = %d, want 10", got.Q())
				}
			},
		},
		{
			// Estimated quantiles are close to the exact ones of the union
			// (a loose sanity bound; §7.5 measures the error).
			name: "three parts near exact", parts: [][]float64{a, b, c}, q: []int{10, 10, 10},
			check: func(t *testing.T, got Summary) {
				want := mustSummarize(t, slices.Concat(a, b, c), 10)
				if diff := cmp.Diff(want.Quantiles, got.Quantiles, cmpopts.EquateApprox(0, 1.5)); diff != "" {
					t.Errorf("quantiles (-want +got):\n%s", diff)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []Summary
			var all []float64
			for i, p := range tt.parts {
				parts = append(parts, mustSummarize(t, p, tt.q[i]))
				all = append(all, p...)
			}
			got := MergeEstimate(parts)
			// Exact fields, always.
			want := mustSummarize(t, all, 10)
			exact := func(s Summary) [5]float64 { return [5]float64{float64(s.Count), s.Sum, s.Min, s.Max, s.Mean} }
			if diff := cmp.Diff(exact(want), exact(got), cmpopts.EquateApprox(1e-12, 1e-9)); diff != "" {
				t.Errorf("count, sum, min, max, mean (-want +got):\n%s", diff)
			}
			if got.Quantiles[0] != got.Min || got.Quantiles[got.Q()] != got.Max {
				t.Errorf("quantile ends %v, %v != min, max %v, %v",
					got.Quantiles[0], got.Quantiles[got.Q()], got.Min, got.Max)
			}
			if !slices.IsSorted(got.Quantiles) {
				t.Errorf("quantiles not monotone: %v", got.Quantiles)
			}
			tt.check(t, got)
			// Deterministic.
			if diff := cmp.Diff(got, MergeEstimate(parts)); diff != "" {
				t.Errorf("second MergeEstimate differs (-first +second):\n%s", diff)
			}
		})
	}
}

func TestMergeEstimateEdges(t *testing.T) {
	empty2 := mustSummarize(t, nil, 2)
	tests := []struct {
		name  string
		parts []Summary
		want  Summary
	}{
		{
			name:  "no parts",
			parts: nil,
			want:  mustSummarize(t, nil, DefaultQ),
		},
		{
			name:  "only empty parts keep NonFinite",
			parts: []Summary{{NonFinite: 2, Min: nan, Max: nan, Mean: nan, Quantiles: []float64{nan, nan, nan}}, empty2},
			want:  Summary{NonFinite: 2, Min: nan, Max: nan, Mean: nan, Quantiles: []float64{nan, nan, nan}},
		},
		{
			// A part without quantiles is rebuilt from [Min, Max] (q = 1,
			// n = 2: just the ends). The other part sets q = 2; the union
			// {0, 4, 10, 10} has median (4+10)/2.
			name: "malformed part without quantiles",
			parts: []Summary{
				{Count: 2, Sum: 4, Min: 0, Max: 4},
				mustSummarize(t, []float64{10, 10}, 2),
			},
			want: Summary{Count: 4, Sum: 24, Min: 0, Max: 10, Mean: 6, Quantiles: []float64{0, 7, 10}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, MergeEstimate(tt.parts), floatOpts); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeEstimateHugeCounts(t *testing.T) {
	a := Summary{Count: 1 << 40, Sum: 1 << 39, Min: 0, Max: 1, Mean: 0.5, Quantiles: []float64{0, 0.5, 1}}
	b := Summary{Count: 1 << 40, Sum: 3 << 39, Min: 1, Max: 2, Mean: 1.5, Quantiles: []float64{1, 1.5, 2}}
	got := MergeEstimate([]Summary{a, b})
	want := Summary{Count: 1 << 41, Sum: 1 << 41, Min: 0, Max: 2, Mean: 1, Quantiles: []float64{0, 1, 2}}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-3)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
