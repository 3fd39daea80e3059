package quantile

import (
	"math"
	"math/rand/v2"
	"testing"
)

const (
	benchNodes = 1000
	benchCPUs  = 48
	benchProps = 40
)

// benchValues returns props × (nodes·cpus) property values: lognormal around
// a per-property scale, with some idle CPUs at 0.
func benchValues(props int) [][]float64 {
	r := rand.New(rand.NewPCG(11, 12))
	out := make([][]float64, props)
	for p := range out {
		scale := math.Exp(float64(p % 7))
		vs := make([]float64, benchNodes*benchCPUs)
		for i := range vs {
			if r.IntN(20) == 0 {
				continue
			}
			vs[i] = scale * math.Exp(0.3*r.NormFloat64())
		}
		out[p] = vs
	}
	return out
}

// BenchmarkSummarize48k: the exact deciles of one property of 1,000 nodes ×
// 48 CPUs.
func BenchmarkSummarize48k(b *testing.B) {
	vs := benchValues(1)[0]
	var sc Scratch
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sc.Summarize(vs, DefaultQ); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSummarizeCycle: one cycle's exact aggregation, 1,000 nodes × 48
// CPUs × 40 properties, on one core (target: under 1 s).
func BenchmarkSummarizeCycle(b *testing.B) {
	props := benchValues(benchProps)
	var sc Scratch
	b.ReportAllocs()
	for b.Loop() {
		for _, vs := range props {
			if _, err := sc.Summarize(vs, DefaultQ); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// sketchCycle builds one sketch per node (48 values) and merges the nodes'
// sketches into the job's, then answers the deciles, for each property.
func sketchCycle(b *testing.B, props [][]float64) {
	for _, vs := range props {
		job, err := NewSketch(DefaultAlpha)
		if err != nil {
			b.Fatal(err)
		}
		for n := range benchNodes {
			node, _ := SketchOf(DefaultAlpha, vs[n*benchCPUs:(n+1)*benchCPUs])
			if err := job.Merge(node); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := job.Summary(DefaultQ); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSketchBuildMerge48k: 1,000 node sketches of 48 values, merged.
func BenchmarkSketchBuildMerge48k(b *testing.B) {
	props := benchValues(1)
	b.ReportAllocs()
	for b.Loop() {
		sketchCycle(b, props)
	}
}

// BenchmarkSketchBuildMergeCycle: the same for 40 properties.
func BenchmarkSketchBuildMergeCycle(b *testing.B) {
	props := benchValues(benchProps)
	b.ReportAllocs()
	for b.Loop() {
		sketchCycle(b, props)
	}
}

// BenchmarkSketchEncodeDecode: one job sketch of 48,000 values over the wire.
func BenchmarkSketchEncodeDecode(b *testing.B) {
	s, _ := SketchOf(DefaultAlpha, benchValues(1)[0])
	enc, _ := s.MarshalBinary()
	b.ReportMetric(float64(len(enc)), "bytes")
	b.ReportAllocs()
	for b.Loop() {
		enc, _ = s.AppendBinary(enc[:0])
		if _, err := DecodeSketch(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMergeEstimate: PerSyst estimation of one property from 10
// collectors' Summaries of 4,800 values each.
func BenchmarkMergeEstimate(b *testing.B) {
	vs := benchValues(1)[0]
	parts := make([]Summary, 10)
	for i := range parts {
		parts[i], _ = Summarize(vs[i*4800:(i+1)*4800], DefaultQ)
	}
	b.ReportAllocs()
	for b.Loop() {
		MergeEstimate(parts)
	}
}
