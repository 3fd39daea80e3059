package quantile

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// errorFigures is the part of a MethodReport the tests pin down.
type errorFigures struct{ MeanAbs, MaxAbs, MeanRel, MaxRel float64 }

func figures(m MethodReport) errorFigures {
	return errorFigures{m.MeanAbs, m.MaxAbs, m.MeanRel, m.MaxRel}
}

// TestReproduce75 pins the measured §7.5 error figures (seed 1, 1,000 runs)
// with a 10% margin, and the properties the default choice rests on.
func TestReproduce75(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 runs")
	}
	tests := []struct {
		name               string
		mean, stddev       float64
		persyst, ddsketch  errorFigures
		sketchBeatsPerSyst bool // on mean absolute error
	}{
		{
			name: "N(100, 10²)", mean: 100, stddev: 10,
			persyst:  errorFigures{MeanAbs: 0.2256, MaxAbs: 1.987, MeanRel: 0.00224, MaxRel: 0.0176},
			ddsketch: errorFigures{MeanAbs: 0.472, MaxAbs: 1.118, MeanRel: 0.00472, MaxRel: 0.00998},
		},
		{
			name: "N(0, 1)", mean: 0, stddev: 1,
			persyst: errorFigures{MeanAbs: 0.02256, MaxAbs: 0.1987},
			// Relative errors are meaningless around a median of 0.
			ddsketch:           errorFigures{MeanAbs: 0.002791, MaxAbs: 0.01311},
			sketchBeatsPerSyst: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Reproduce75Dist(1, 1000, tt.mean, tt.stddev, DefaultAlpha)
			got := [2]errorFigures{figures(r.PerSyst), figures(r.Sketch)}
			if tt.mean == 0 {
				for i := range got {
					got[i].MeanRel, got[i].MaxRel = 0, 0
				}
			}
			want := [2]errorFigures{tt.persyst, tt.ddsketch}
			if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0.10, 0)); diff != "" {
				t.Errorf("[PerSyst, DDSketch] error figures (-want +got):\n%s", diff)
			}
			// Properties that do not depend on the seed.
			if r.Sketch.MaxRel > DefaultAlpha*(1+1e-9) && tt.mean != 0 {
				t.Errorf("DDSketch max relative error %v > α", r.Sketch.MaxRel)
			}
			if r.Sketch.MaxAbs >= r.PerSyst.MaxAbs {
				t.Errorf("DDSketch max abs error %v >= PerSyst's %v", r.Sketch.MaxAbs, r.PerSyst.MaxAbs)
			}
			if got := r.Sketch.MeanAbs < r.PerSyst.MeanAbs; got != tt.sketchBeatsPerSyst {
				t.Errorf("DDSketch mean abs %v < PerSyst's %v = %v, want %v",
					r.Sketch.MeanAbs, r.PerSyst.MeanAbs, got, tt.sketchBeatsPerSyst)
			}
			for _, m := range []MethodReport{r.PerSyst, r.Sketch} {
				for _, k := range []int{0, 10} {
					if d := m.Deciles[k]; d.MaxAbs != 0 {
						t.Errorf("%s: %v%% error %v, want 0 (min and max are exact)", m.Name, d.P*100, d.MaxAbs)
					}
				}
			}
		})
	}
}

func TestReproduce75Report(t *testing.T) {
	r := Reproduce75(1, 3)
	if r.Values != 1000 || r.Groups != 10 || r.Runs != 3 || len(r.First.Exact) != 11 {
		t.Fatalf("report shape: %+v", r)
	}
	// Deterministic in the seed.
	if diff := cmp.Diff(r, Reproduce75(1, 3)); diff != "" {
		t.Errorf("second run differs (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(r, Reproduce75(2, 3)); diff == "" {
		t.Error("seeds 1 and 2 give the same report")
	}
	s := r.String()
	for _, want := range []string{"| 50% |", "| 10–90% |", "N(100, 10²)", "DDSketch"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
}
