// Package quantile aggregates the values of one property over many devices
// (one job, one timestamp) into a Summary of min, q-quantiles, max, mean and
// count, plus a severity distribution, and merges partial results from
// several collectors (the PerSyst thesis, chapter 5).
//
// # Definitions
//
// Quantile: type 7 of Hyndman & Fan (1996), the default of R, NumPy and
// Excel's PERCENTILE.INC. For n sorted finite values x_0..x_{n-1} and
// probability p, h = (n-1)·p, j = ⌊h⌋ and Q(p) = x_j + (h-j)·(x_{j+1}-x_j).
// A Summary with q steps holds Q(k/q) for k = 0..q, so Quantiles[0] is the
// min and Quantiles[q] the max; q = DefaultQ = 10 gives the deciles. For
// p = k/q the position is computed in integers ((n-1)·k = j·q + r), so it is
// exact. The thesis (§5.1) defines P_k as the value at cdf N·k/100
// interpolated between ranks ⌊N·k/100⌋ and ⌊N·k/100⌋+1 and takes P_0 as the
// min; type 7 agrees with it at the ends and differs by less than one rank
// inside; it was chosen because it is the standard one, is the quantile of
// the piecewise-linear empirical cdf, and is what other tools will compute
// from the same data.
//
// Non-finite inputs: NaN (e.g. 0/0 of a derived metric on an idle CPU) and
// ±Inf are not values of the population. Summarize, Sketch and
// QuantileAt skip them and count them in NonFinite, which merges by
// addition; no error is returned, so one bad counter does not lose a job's
// record. n = 0: Count 0, Min, Max, Mean and all quantiles NaN (the slice
// keeps its q+1 entries). n = 1: every quantile is the value.
//
// Exact fields: Count, NonFinite, Sum, Min and Max merge exactly (Sum up to
// float rounding) and Mean = Sum/Count, by every method here.
//
// # Merging: PerSyst's estimation (MergeEstimate)
//
// MergeEstimate implements §5.2: each part (count N, quantiles p_0..p_q) is
// rebuilt as N values that keep the quantile values and fill the gaps
// between neighbouring quantiles with values drawn uniformly at random from
// [p_k, p_{k+1}]; the quantiles of the union of the rebuilt parts are the
// estimate. Details the thesis leaves open, decided here:
//
//   - Counts when q does not divide N: p_k sits at 0-based rank
//     ⌈N·k/q⌉-1 (p_0 at 0), and the ranks in between are random. For q | N
//     this gives exactly the thesis's R(0,1) = N/q-2 and R(k,k+1) = N/q-1
//     (formulas 5.5, 5.6; checked on its worked example D_a, D_b). A variant
//     placing p_k at its type-7 rank round((N-1)·k/q) was measured on §7.5
//     and was not better (mean error 0.0250σ against 0.0226σ), so the
//     thesis's rule is kept.
//   - N <= q (fewer values than quantiles, e.g. 5 CPUs and deciles): the
//     rebuild takes the value at rank j from the piecewise-linear inverse cdf
//     through (k/q, p_k) at p = j/(N-1), no randomness. It returns the
//     original values when every j/(N-1) is a multiple of 1/q.
//   - A single non-empty part is returned unchanged (it is exact); the
//     thesis would rebuild and re-estimate it.
//   - Parts may have different q; each is rebuilt with its own, the result
//     has the largest. A part with Count > 0 but no quantiles is rebuilt from
//     [Min, Max].
//   - The random generator is seeded with a constant (MergeEstimateRand
//     takes one), so the estimate is a deterministic function of the parts.
//   - Populations beyond MaxRebuild (2^20) values are rebuilt scaled down
//     proportionally.
//
// # Merging: DDSketch (Sketch)
//
// Sketch wraps a DDSketch (github.com/DataDog/sketches-go): logarithmic
// buckets of relative accuracy α (DefaultAlpha = 1%), a store for positive
// values, one for negative values (by |x|) and an exact zero bucket, plus the
// exact count, sum, min and max. Merging adds bucket counts, so it is exact,
// associative and commutative: the result does not depend on how the job was
// split or on the depth of the collector tree. Quantiles are answered at the
// type-7 position by interpolating the representatives of ranks j and j+1,
// clamped to [min, max]; this gives the proven bound
//
//	|Sketch quantile − exact type-7 quantile| <= α·max(|x_j|, |x_{j+1}|)
//
// for any data and any partition (tested on positive, negative, zero-heavy,
// 1e-300 and 1e300 data). Zero is exact. The wire form (AppendBinary,
// DecodeSketch) is about 100 bytes for a node's 48 CPUs and 311 bytes for a
// job of 48,000 lognormal values; DecodeSketch validates untrusted input
// (fuzzed).
//
// # §7.5 reproduced
//
// Reproduce75 repeats the thesis's experiment: 1,000 normal values dealt
// round robin into 10 groups of 100, the exact deciles of all 1,000 against
// (a) MergeEstimate of the 10 group Summaries and (b) the 10 group Sketches
// merged. The thesis gives no mean, standard deviation or error figures (only
// the plot of Figure 7.3, "the quality of the distribution is preserved");
// Reproduce75 uses N(100, 10²), values shaped like a performance property.
// Errors over the inner deciles 10%..90% (min and max are exact), seed 1,
// 1,000 runs (TestReproduce75 pins these with a 10% margin):
//
//	N(100, 10²)        mean abs  max abs  mean rel  max rel
//	PerSyst (§5.2)     0.226     1.99     0.22%     1.76%
//	DDSketch α = 1%    0.472     1.12     0.47%     1.00%
//
//	N(0, 1)            mean abs  max abs
//	PerSyst (§5.2)     0.0226    0.199
//	DDSketch α = 1%    0.0028    0.013
//
// Per decile, PerSyst's error is largest at 10% and 90% (N(100,10²): mean
// 0.25 and 0.55, max 1.12 and 1.99) because the outer intervals [min, p_1]
// and [p_9, max] are the widest and the uniform assumption is worst in the
// tails; DDSketch's is flat (mean 0.31..0.64, max 0.88..1.12). PerSyst's
// error scales with the spread σ (mean 0.023σ, max 0.17..0.20σ) and does not
// depend on the location; DDSketch's scales with |x| (mean about α/2·|x|,
// never above α·|x|). Sweeping the coefficient of variation σ/μ (μ = 1, 300
// runs), mean/max error in units of σ:
//
//	σ/μ     PerSyst         DDSketch
//	0.01    0.023 / 0.17    0.47  / 1.00
//	0.1     0.023 / 0.17    0.051 / 0.11
//	0.3     0.023 / 0.17    0.016 / 0.046
//	1       0.023 / 0.17    0.005 / 0.023
//
// Beyond §7.5 (measured once, seed 7, 300 runs): with non-identical groups (group g ~ N(100+5g, 10²)) PerSyst's
// mean/max error is 0.32/2.04 from one level of merging and 0.70/3.17 when
// the estimates are merged again (two levels: 5+5 groups, then the two), the
// error compounding with the depth of the tree; DDSketch's is 0.54/1.45 at
// any depth.
//
// # Decision: DDSketch is the default for merging
//
// Where a job's values are all in one place, the exact Summary is used (the
// balancer of §5.3 aims for that). Where they are split, collectors send
// Sketches and the parent merges them (MergeSketches) and answers the
// quantiles; MergeEstimate remains for merging stored Summaries that have no
// sketch. Reasons, from the measurements above: on §7.5 DDSketch has the
// lower maximum error (1.12 vs 1.99), and in general whenever σ/μ is above
// about 0.07; the lower mean error whenever σ/μ is above about 0.2 or the
// values straddle zero; its error is bounded (≤ α·|x|, below the 1–5% error
// of the hardware counters themselves, thesis §7.6) for any data and any
// split, where PerSyst's has no bound; it does not compound over tree levels;
// and it is deterministic. PerSyst's estimation is better only for tightly
// clustered values (mean error for σ/μ ≲ 0.2, e.g. 0.22% vs 0.47% on §7.5;
// max error for σ/μ ≲ 0.07): there the sketch's error is still within α of
// the value but large against the spread (about half a σ at σ/μ = 0.01); a
// smaller α is the remedy (error scales with α, bins with 1/α).
//
// # Severity
//
// Severity counts severities (normalized to [0, 1], thesis §3.2) in five
// bins: exactly 0, (0, 0.25], (0.25, 0.5], (0.5, 0.75], (0.75, 1]; values
// outside [0, 1] or NaN are counted as Invalid rather than clamped. Merging
// adds the counts and is exact.
//
// # Cost (one core, AMD EPYC, go test -bench . -cpu 1)
//
// Exact Summary of 48,000 values (1,000 nodes × 48 CPUs): 5.3 ms (sort based,
// one reused buffer); of 40 such properties, one whole cycle: 0.19 s, under
// the 1 s target. Sketches: 48 values per node, 1,000 node sketches merged
// and the deciles read: 3.8 ms per property, 0.13 s for 40. MergeEstimate of
// 10 Summaries of 4,800 values: 4.3 ms.
package quantile
