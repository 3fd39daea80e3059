package quantile

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// DefaultQ is the default number of quantile steps: deciles, i.e. the 11
// values min, 10%, 20%, ..., 90%, max.
const DefaultQ = 10

// MaxQ bounds q so that a malformed configuration or wire message cannot make
// a Summary allocate without limit. 100 (percentiles) is the largest the
// thesis uses.
const MaxQ = 1000

// ErrQ is returned for a q outside [1, MaxQ].
var ErrQ = errors.New("quantile: q must be in [1, MaxQ]")

// Summary is the aggregate of one population (one job, one timestamp, one
// property): count, sum, min, max, mean and the q-quantiles.
//
// Quantiles[k] is the type-7 quantile at probability k/q, k = 0..q, so
// Quantiles[0] == Min and Quantiles[q] == Max; q = len(Quantiles)-1.
//
// Non-finite inputs (NaN, +Inf, -Inf) are not part of the population: they
// are skipped and counted in NonFinite.
//
// For an empty population (Count == 0) Min, Max, Mean and every quantile are
// NaN; Quantiles still has q+1 entries so the record has a fixed shape.
type Summary struct {
	Count     int64
	NonFinite int64
	Sum       float64
	Min       float64
	Max       float64
	Mean      float64
	Quantiles []float64
}

// Q is the number of quantile steps (10 for deciles), len(Quantiles)-1.
func (s Summary) Q() int { return len(s.Quantiles) - 1 }

// Probabilities returns the q+1 probabilities k/q, k = 0..q, of the
// quantiles of a Summary with that q.
func Probabilities(q int) []float64 {
	p := make([]float64, q+1)
	for k := range p {
		p[k] = float64(k) / float64(q)
	}
	return p
}

// Summarize computes the exact Summary of values with q quantile steps.
// values is not modified. Non-finite values are skipped and counted. The
// only error is a q outside [1, MaxQ].
func Summarize(values []float64, q int) (Summary, error) {
	var sc Scratch
	return sc.Summarize(values, q)
}

// Scratch holds a reusable buffer for Summarize so that a collector which
// aggregates many properties per cycle does not allocate a sorted copy for
// each. The zero value is ready to use; a Scratch must not be used
// concurrently.
type Scratch struct {
	buf []float64
}

// Summarize is like the package-level Summarize but reuses the scratch
// buffer. The returned Summary does not alias the buffer.
func (sc *Scratch) Summarize(values []float64, q int) (Summary, error) {
	if q < 1 || q > MaxQ {
		return Summary{}, fmt.Errorf("%w: q=%d", ErrQ, q)
	}
	sorted := sc.buf[:0]
	var nonFinite int64
	for _, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			nonFinite++
			continue
		}
		sorted = append(sorted, v)
	}
	sc.buf = sorted
	slices.Sort(sorted)
	s := summarizeSorted(sorted, q)
	s.NonFinite = nonFinite
	return s, nil
}

// summarizeSorted fills Count, Sum (summed in ascending order), Min, Max,
// Mean and Quantiles from finite values sorted ascending.
func summarizeSorted(sorted []float64, q int) Summary {
	n := len(sorted)
	s := Summary{Count: int64(n), Quantiles: make([]float64, q+1)}
	if n == 0 {
		nan := math.NaN()
		s.Min, s.Max, s.Mean = nan, nan, nan
		for k := range s.Quantiles {
			s.Quantiles[k] = nan
		}
		return s
	}
	for k := range s.Quantiles {
		s.Quantiles[k] = sortedQuantile(sorted, k, q)
	}
	s.Min, s.Max = sorted[0], sorted[n-1]
	for _, v := range sorted {
		s.Sum += v
	}
	s.Mean = s.Sum / float64(n)
	return s
}

// sortedQuantile is the type-7 (Hyndman & Fan 1996) quantile at probability
// k/q of the n >= 1 finite values in sorted (ascending):
//
//	h = (n-1)·k/q,  j = ⌊h⌋,  Q = x[j] + (h-j)·(x[j+1]-x[j])  (0-based x)
//
// h is computed in integers, so j and the fraction are exact: (n-1)·k = j·q + r
// and the fraction is r/q.
func sortedQuantile(sorted []float64, k, q int) float64 {
	n := len(sorted)
	num := (n - 1) * k
	j, r := num/q, num%q
	if r == 0 {
		return sorted[j]
	}
	return lerp(sorted[j], sorted[j+1], float64(r)/float64(q))
}

// lerp interpolates between lo <= hi; the result is within [lo, hi] even
// under rounding.
func lerp(lo, hi, f float64) float64 {
	v := lo + f*(hi-lo)
	return min(max(v, lo), hi)
}

// QuantileAt returns the type-7 quantile at probability p in [0, 1] of
// values (skipping non-finite values), or NaN if there is none or p is out
// of range. It is the reference definition, independent of Summary's q.
func QuantileAt(values []float64, p float64) float64 {
	if !(p >= 0 && p <= 1) {
		return math.NaN()
	}
	sorted := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			sorted = append(sorted, v)
		}
	}
	if len(sorted) == 0 {
		return math.NaN()
	}
	slices.Sort(sorted)
	return SortedAt(sorted, p)
}

// SortedAt is QuantileAt of values already sorted ascending and finite (no copy, no
// sort: for several probabilities of one set), NaN when there are none.
func SortedAt(sorted []float64, p float64) float64 {
	if len(sorted) == 0 || !(p >= 0 && p <= 1) {
		return math.NaN()
	}
	h := float64(len(sorted)-1) * p
	j := int(math.Floor(h))
	if j >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return lerp(sorted[j], sorted[j+1], h-float64(j))
}
