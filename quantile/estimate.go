package quantile

import (
	"math"
	"math/rand/v2"
	"slices"
)

// MaxRebuild bounds the size of the population MergeEstimate rebuilds. If
// the parts' counts add up to more, each part is rebuilt with its count
// scaled by MaxRebuild/total (rounded, at least 1), which keeps the parts'
// weights; Count, Sum, Min, Max and Mean of the result stay exact. It
// protects against absurd counts from the wire; real jobs (10^5 cores) are
// at or below it.
const MaxRebuild = 1 << 20

// estimateSeed seeds the generator of MergeEstimate so that the same parts
// always give the same estimate.
const estimateSeed = 0x9e3779b97f4a7c15

// MergeEstimate merges the Summaries of disjoint sub-populations into the
// Summary of their union with PerSyst's percentile estimation (thesis §5.2):
// each part is rebuilt from its quantiles and count, the rebuilt sets are
// joined, and the quantiles of the join are computed (type 7). Count, Sum,
// NonFinite, Min, Max and Mean are exact; the inner quantiles are estimates.
//
// Rebuilding a part with count N and quantiles p_0..p_q (N > q): the quantile
// values themselves are kept, p_k at 0-based rank r_0 = 0, r_k = ⌈N·k/q⌉-1
// (k >= 1), and the r_{k+1}-r_k-1 ranks between neighbouring quantiles are
// filled with values drawn uniformly at random from [p_k, p_{k+1}]. When q
// divides N this is exactly the thesis's R(0,1) = N/q-2 and R(k,k+1) = N/q-1
// (formulas 5.5, 5.6); the ceiling generalizes it to any N > q. See the
// package documentation for this and the other details the thesis leaves
// open (N <= q, one part, different q).
//
// The result has q = the largest q among the parts. Empty parts are ignored;
// with no non-empty part the result is the empty Summary with that q
// (DefaultQ if parts is empty). The random generator has a fixed seed, so the
// result is a deterministic function of parts (including their order).
func MergeEstimate(parts []Summary) Summary {
	return MergeEstimateRand(parts, rand.New(rand.NewPCG(estimateSeed, estimateSeed>>1)))
}

// MergeEstimateRand is MergeEstimate drawing the rebuilt values from r.
func MergeEstimateRand(parts []Summary, r *rand.Rand) Summary {
	q := 0
	var total, nonFinite int64
	nonEmpty := -1
	for i, p := range parts {
		q = max(q, p.Q())
		nonFinite += p.NonFinite
		if p.Count > 0 {
			total = satAdd(total, p.Count)
			if nonEmpty == -1 {
				nonEmpty = i
			} else {
				nonEmpty = -2
			}
		}
	}
	if q < 1 {
		q = DefaultQ
	}
	if total == 0 {
		s := summarizeSorted(nil, q)
		s.NonFinite = nonFinite
		return s
	}
	if nonEmpty >= 0 && parts[nonEmpty].Q() == q {
		// One population: its Summary is exact, keep it.
		s := parts[nonEmpty]
		s.Quantiles = slices.Clone(s.Quantiles)
		s.NonFinite = nonFinite
		return s
	}

	scale := 1.0
	if total > MaxRebuild {
		scale = float64(MaxRebuild) / float64(total)
	}
	rebuilt := make([]float64, 0, min(total, MaxRebuild+int64(len(parts))))
	var sum float64
	minV, maxV := math.Inf(1), math.Inf(-1)
	for _, p := range parts {
		if p.Count <= 0 {
			continue
		}
		sum += p.Sum
		minV, maxV = min(minV, p.Min), max(maxV, p.Max)
		n := p.Count
		if scale < 1 {
			n = max(1, int64(math.Round(float64(n)*scale)))
		}
		rebuilt = rebuildPart(rebuilt, partQuantiles(p), int(n), r)
	}
	slices.Sort(rebuilt)
	s := summarizeSorted(rebuilt, q)
	s.Count = total
	s.NonFinite = nonFinite
	s.Sum = sum
	s.Mean = sum / float64(total)
	s.Min, s.Max = minV, maxV
	s.Quantiles[0], s.Quantiles[q] = minV, maxV
	return s
}

// partQuantiles returns the quantiles of a non-empty part, falling back to
// [Min, Max] (q = 1) for a malformed part without them.
func partQuantiles(p Summary) []float64 {
	if len(p.Quantiles) >= 2 {
		return p.Quantiles
	}
	return []float64{p.Min, p.Max}
}

// rebuildPart appends n >= 1 values rebuilt from the quantiles pq (q =
// len(pq)-1 >= 1) to dst.
func rebuildPart(dst []float64, pq []float64, n int, r *rand.Rand) []float64 {
	q := len(pq) - 1
	if n <= q {
		// Too few values to keep all q+1 quantiles. Take the value at each
		// rank j from the piecewise-linear inverse cdf through the points
		// (k/q, p_k), at probability j/(n-1) (the type-7 position of rank
		// j). Exact when the quantiles came from type 7 and j/(n-1) is a
		// multiple of 1/q (always for n <= 2).
		if n == 1 {
			return append(dst, pq[0])
		}
		for j := range n {
			num := j * q // position j/(n-1) in units of 1/q: num/(n-1)
			k, rem := num/(n-1), num%(n-1)
			if rem == 0 {
				dst = append(dst, pq[k])
			} else {
				dst = append(dst, lerp(pq[k], pq[k+1], float64(rem)/float64(n-1)))
			}
		}
		return dst
	}
	prev := 0 // rank of p_0
	dst = append(dst, pq[0])
	for k := 1; k <= q; k++ {
		rk := ceilDiv(n*k, q) - 1
		lo, hi := pq[k-1], pq[k]
		for range rk - prev - 1 {
			dst = append(dst, lerp(lo, hi, r.Float64()))
		}
		dst = append(dst, pq[k])
		prev = rk
	}
	return dst
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// satAdd adds non-negative a and b, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
