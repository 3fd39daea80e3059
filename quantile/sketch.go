package quantile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// DefaultAlpha is the default relative accuracy of a Sketch: 1%.
const DefaultAlpha = 0.01

// Sketch is a mergeable quantile sketch: a DDSketch (Masson, Rim, Lee,
// VLDB 2019) with a logarithmic index mapping of relative accuracy α and
// unbounded dense stores for positive and negative values plus a zero
// bucket, together with the exact count, sum, min and max.
//
// Guarantee: for any population and any way of splitting it into merged
// sketches, Quantile(p) differs from the exact type-7 quantile at p by at
// most α·max(|x_j|, |x_{j+1}|), where x_j, x_{j+1} are the two order
// statistics type 7 interpolates between. (Each bucket's representative
// value is within α relative of every value in the bucket; the ranks are
// exact because the stores count exactly; Quantile interpolates the two
// ranks as type 7 does.) Negative values are kept in their own store with
// the same relative guarantee on |x|; zero (and |x| below the mapping's
// smallest indexable value, about 1e-308) is counted exactly in the zero
// bucket and answered as 0.
//
// Non-finite values are skipped and counted in NonFinite, as in Summary.
// A Sketch must not be used concurrently.
type Sketch struct {
	s         *ddsketch.DDSketchWithExactSummaryStatistics
	nonFinite int64
}

// NewSketch returns an empty Sketch of relative accuracy alpha in (0, 1).
func NewSketch(alpha float64) (*Sketch, error) {
	if !(alpha > 0 && alpha < 1) {
		return nil, fmt.Errorf("quantile: sketch: relative accuracy %v not in (0, 1)", alpha)
	}
	m, err := mapping.NewLogarithmicMapping(alpha)
	if err != nil {
		return nil, fmt.Errorf("quantile: sketch: %w", err)
	}
	return &Sketch{s: ddsketch.NewDDSketchWithExactSummaryStatistics(m, store.DenseStoreConstructor)}, nil
}

// SketchOf returns a Sketch of relative accuracy alpha holding values.
func SketchOf(alpha float64, values []float64) (*Sketch, error) {
	s, err := NewSketch(alpha)
	if err != nil {
		return nil, err
	}
	s.AddAll(values)
	return s, nil
}

// Alpha is the sketch's relative accuracy, as its index mapping recomputes
// it (NewSketch(0.02).Alpha() may be 0.020000000000000018).
func (s *Sketch) Alpha() float64 { return s.s.RelativeAccuracy() }

// Add adds one value; a non-finite value is counted in NonFinite instead.
func (s *Sketch) Add(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		s.nonFinite++
		return
	}
	if err := s.s.Add(v); err != nil {
		// Only values beyond ±MaxIndexableValue (~1.8e308 / (1+α)) fail.
		s.nonFinite++
	}
}

// AddAll adds every value.
func (s *Sketch) AddAll(values []float64) {
	for _, v := range values {
		s.Add(v)
	}
}

// Count is the number of finite values added.
func (s *Sketch) Count() int64 { return int64(s.s.GetCount()) }

// NonFinite is the number of non-finite values skipped.
func (s *Sketch) NonFinite() int64 { return s.nonFinite }

// Merge adds the values of o to s. Both must have the same alpha.
func (s *Sketch) Merge(o *Sketch) error {
	if err := s.s.MergeWith(o.s); err != nil {
		return fmt.Errorf("quantile: merge sketches: %w", err)
	}
	s.nonFinite += o.nonFinite
	return nil
}

// Quantile returns the estimate of the type-7 quantile at p in [0, 1]
// (within the bound stated on Sketch), NaN if the sketch is empty or p is
// out of range. Quantile(0) and Quantile(1) are the exact min and max.
func (s *Sketch) Quantile(p float64) float64 {
	n := s.Count()
	if n == 0 || !(p >= 0 && p <= 1) {
		return math.NaN()
	}
	mn, _ := s.s.GetMinValue()
	mx, _ := s.s.GetMaxValue()
	if p == 0 {
		return mn
	}
	if p == 1 {
		return mx
	}
	h := float64(n-1) * p
	j := int64(math.Floor(h))
	return s.interpolate(j, h-float64(j), mn, mx)
}

// interpolate estimates x_j + f·(x_{j+1}-x_j), clamped to [mn, mx].
func (s *Sketch) interpolate(j int64, f, mn, mx float64) float64 {
	lo := s.valueAtRank(j)
	v := lo
	if f > 0 {
		v = lerp(lo, max(lo, s.valueAtRank(j+1)), f)
	}
	return min(max(v, mn), mx)
}

// valueAtRank is the representative value of the 0-based rank j, the same
// walk DDSketch.GetValueAtQuantile does but with an exact integer rank.
func (s *Sketch) valueAtRank(j int64) float64 {
	d := s.s.DDSketch
	rank := float64(j)
	neg := d.GetNegativeValueStore().TotalCount()
	switch {
	case rank < neg:
		return -d.Value(d.GetNegativeValueStore().KeyAtRank(neg - 1 - rank))
	case rank < neg+d.GetZeroCount():
		return 0
	default:
		return d.Value(d.GetPositiveValueStore().KeyAtRank(rank - neg - d.GetZeroCount()))
	}
}

// Summary returns the Summary with q quantile steps answered by the sketch:
// Count, NonFinite, Sum, Min, Max and Mean are exact, the inner quantiles
// are estimates within the sketch's bound.
func (s *Sketch) Summary(q int) (Summary, error) {
	if q < 1 || q > MaxQ {
		return Summary{}, fmt.Errorf("%w: q=%d", ErrQ, q)
	}
	n := s.Count()
	if n == 0 {
		e := summarizeSorted(nil, q)
		e.NonFinite = s.nonFinite
		return e, nil
	}
	mn, _ := s.s.GetMinValue()
	mx, _ := s.s.GetMaxValue()
	sum := s.s.GetSum()
	out := Summary{
		Count: n, NonFinite: s.nonFinite, Sum: sum, Min: mn, Max: mx,
		Mean: sum / float64(n), Quantiles: make([]float64, q+1),
	}
	out.Quantiles[0], out.Quantiles[q] = mn, mx
	for k := 1; k < q; k++ {
		num := (n - 1) * int64(k)
		j, r := num/int64(q), num%int64(q)
		out.Quantiles[k] = s.interpolate(j, float64(r)/float64(q), mn, mx)
	}
	return out, nil
}

// sketchMagic starts an encoded Sketch: "PQS" and format version 1.
var sketchMagic = [4]byte{'P', 'Q', 'S', 1}

// ErrSketchEncoding is returned by DecodeSketch for malformed input.
var ErrSketchEncoding = errors.New("quantile: malformed sketch encoding")

// AppendBinary appends the sketch's self-describing encoding to b: the
// 4-byte magic "PQS\x01", NonFinite as a uvarint, the length of the rest as
// a uvarint, then the DDSketch encoding (with its index mapping, exact
// count, sum, min and max) of github.com/DataDog/sketches-go.
func (s *Sketch) AppendBinary(b []byte) ([]byte, error) {
	var payload []byte
	s.s.Encode(&payload, false)
	b = append(b, sketchMagic[:]...)
	b = binary.AppendUvarint(b, uint64(s.nonFinite))
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...), nil
}

// MarshalBinary returns the encoding of AppendBinary.
func (s *Sketch) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// maxDecodedSpan bounds the index span of each decoded store: 2^20 bins
// (8 MiB dense). At α = 1% the whole float64 range spans about 71,000.
const maxDecodedSpan = 1 << 20

// DecodeSketch decodes an encoding of AppendBinary (exactly one, with
// nothing after it). The payload is decoded into sparse stores (memory
// proportional to its length) and checked before it is copied into dense
// ones: bin indexes within the mapping's indexable range and spanning at
// most 2^20 bins, counts finite and non-negative and adding up to the exact
// count, min <= max. Only sketches with NewSketch's index mapping are
// accepted.
func DecodeSketch(b []byte) (*Sketch, error) {
	if len(b) < len(sketchMagic) || [4]byte(b[:4]) != sketchMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrSketchEncoding)
	}
	b = b[4:]
	nf, n := binary.Uvarint(b)
	if n <= 0 || nf > math.MaxInt64 {
		return nil, fmt.Errorf("%w: non-finite count", ErrSketchEncoding)
	}
	b = b[n:]
	size, n := binary.Uvarint(b)
	if n <= 0 || size != uint64(len(b)-n) {
		return nil, fmt.Errorf("%w: length", ErrSketchEncoding)
	}
	sparse, err := ddsketch.DecodeDDSketchWithExactSummaryStatistics(b[n:], store.SparseStoreConstructor, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSketchEncoding, err)
	}
	if err := checkDecoded(sparse); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSketchEncoding, err)
	}
	dense := ddsketch.NewDDSketchWithExactSummaryStatistics(sparse.IndexMapping, store.DenseStoreConstructor)
	if err := dense.MergeWith(sparse); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSketchEncoding, err)
	}
	return &Sketch{s: dense, nonFinite: int64(nf)}, nil
}

func checkDecoded(d *ddsketch.DDSketchWithExactSummaryStatistics) error {
	// Only the mapping NewSketch makes (logarithmic, no index offset).
	m := d.IndexMapping
	want, err := mapping.NewLogarithmicMapping(m.RelativeAccuracy())
	if err != nil || !m.Equals(want) {
		return errors.New("not a logarithmic index mapping of NewSketch")
	}
	lo, hi := m.Index(m.MinIndexableValue()), m.Index(m.MaxIndexableValue())
	total := d.GetZeroCount()
	if !(total >= 0 && !math.IsInf(total, 0)) {
		return errors.New("zero count")
	}
	for _, st := range []store.Store{d.GetPositiveValueStore(), d.GetNegativeValueStore()} {
		if st.IsEmpty() {
			continue
		}
		mn, _ := st.MinIndex()
		mx, _ := st.MaxIndex()
		if mn < lo || mx > hi || float64(mx)-float64(mn) >= maxDecodedSpan {
			return fmt.Errorf("bin indexes [%d, %d] outside [%d, %d] or too wide", mn, mx, lo, hi)
		}
		bad := false
		st.ForEach(func(_ int, c float64) bool {
			bad = !(c >= 0 && !math.IsInf(c, 0))
			total += c
			return bad
		})
		if bad {
			return errors.New("bin count")
		}
	}
	count := d.GetCount()
	if count != total || count != math.Trunc(count) || count > 1<<53 {
		return fmt.Errorf("count %v, bins hold %v", count, total)
	}
	if count > 0 {
		mn, _ := d.GetMinValue()
		mx, _ := d.GetMaxValue()
		if !(mn <= mx) || math.IsInf(mn, 0) || math.IsInf(mx, 0) || math.IsNaN(d.GetSum()) {
			return fmt.Errorf("min %v, max %v, sum %v", mn, mx, d.GetSum())
		}
	}
	return nil
}

// MergeSketches returns a new Sketch holding the values of all parts (nil
// parts are skipped; the parts are not modified), which must share one
// index mapping (alpha); with no parts it is an empty Sketch of
// DefaultAlpha. This is the default way to merge a job's quantiles from
// several collectors (see the package documentation).
func MergeSketches(parts []*Sketch) (*Sketch, error) {
	var out *Sketch
	for _, p := range parts {
		switch {
		case p == nil:
		case out == nil:
			out = &Sketch{s: p.s.Copy(), nonFinite: p.nonFinite}
		default:
			if err := out.Merge(p); err != nil {
				return nil, err
			}
		}
	}
	if out == nil {
		return NewSketch(DefaultAlpha)
	}
	return out, nil
}
