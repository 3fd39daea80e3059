package collectors

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/persyst/persyst/collectors/pb"
	"github.com/persyst/persyst/properties"
)

// benchParts is one cycle of a 1,032-node job split over 24 collectors of 43 nodes, each
// node with 48 CPUs and 40 CPU-level properties: the collectors' summaries with sketches.
func benchParts(b *testing.B) []*pb.PartialCycle {
	r := rand.New(rand.NewSource(1))
	var parts []*pb.PartialCycle
	for c := 0; c < 24; c++ {
		var recs []properties.Record
		var nodes []string
		for n := 0; n < 43; n++ {
			node := fmt.Sprintf("n%d", c*43+n)
			nodes = append(nodes, node)
			for p := 0; p < 40; p++ {
				key := fmt.Sprintf("prop_%d", p)
				for cpu := 0; cpu < 48; cpu++ {
					recs = append(recs, properties.Record{Key: key, Device: fmt.Sprintf("%s/cpu%d", node, cpu), Value: r.ExpFloat64() * float64(p+1), Severity: r.Float64()})
				}
			}
		}
		pc, err := CyclePartial(1, 60, fmt.Sprintf("col%d", c), nodes, recs, 10)
		if err != nil {
			b.Fatal(err)
		}
		parts = append(parts, pc)
	}
	return parts
}

// BenchmarkMergeCycle: what a sync agent does per cycle for such a job (decode 960
// sketches, merge, answer the deciles).
func BenchmarkMergeCycle(b *testing.B) {
	parts := benchParts(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := MergeCycle(parts, 10); err != nil {
			b.Fatal(err)
		}
	}
}
