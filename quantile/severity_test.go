package quantile

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSeverityBin(t *testing.T) {
	tests := []struct {
		s    float64
		want int
	}{
		{0, 0},
		{math.Copysign(0, -1), 0},
		{math.SmallestNonzeroFloat64, 1},
		{0.25, 1},
		{math.Nextafter(0.25, 1), 2},
		{0.5, 2},
		{0.6, 3},
		{0.75, 3},
		{0.76, 4},
		{1, 4},
		{math.Nextafter(1, 2), -1},
		{-0.1, -1},
		{nan, -1},
		{inf, -1},
	}
	for _, tt := range tests {
		if got := SeverityBin(tt.s); got != tt.want {
			t.Errorf("SeverityBin(%v) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

func TestSeverityMergeIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	values := make([]float64, 1000)
	for i := range values {
		switch r.IntN(4) {
		case 0:
			values[i] = 0
		case 1:
			values[i] = float64(r.IntN(5)) / 4 // the bin edges
		default:
			values[i] = r.Float64()*1.1 - 0.05 // some invalid
		}
	}
	var whole Severity
	whole.AddAll(values)
	var merged Severity
	for i := 0; i < len(values); i += 37 {
		var part Severity
		part.AddAll(values[i:min(i+37, len(values))])
		merged.Merge(part)
	}
	if diff := cmp.Diff(whole, merged); diff != "" {
		t.Errorf("merged parts differ from whole (-whole +merged):\n%s", diff)
	}
	if whole.Total()+whole.Invalid != int64(len(values)) {
		t.Errorf("total %d + invalid %d != %d", whole.Total(), whole.Invalid, len(values))
	}
	if whole.Invalid == 0 || whole.Counts[0] == 0 {
		t.Errorf("test data should hit invalid and zero bins: %+v", whole)
	}
}

func TestSeverityFractions(t *testing.T) {
	var d Severity
	d.AddAll([]float64{0, 0, 0.1, 0.3, 0.3, 0.9, nan, 2})
	want := Severity{Counts: [SeverityBins]int64{2, 1, 2, 0, 1}, Invalid: 2}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	wantF := [SeverityBins]float64{2.0 / 6, 1.0 / 6, 2.0 / 6, 0, 1.0 / 6}
	if diff := cmp.Diff(wantF, d.Fractions(), cmpopts.EquateApprox(1e-15, 0)); diff != "" {
		t.Errorf("Fractions (-want +got):\n%s", diff)
	}
	var empty Severity
	for i, f := range empty.Fractions() {
		if !math.IsNaN(f) {
			t.Errorf("empty Fractions[%d] = %v, want NaN", i, f)
		}
	}
}
