package properties

import (
	"fmt"
	"math"
)

// Formula is how a property's value becomes a severity in [0, 1] (the PerSyst thesis, §3.2, §3.5).
type Formula string

const (
	// Formula1: the bottleneck grows with the value (eq. 3.1):
	// s = clamp((x/t − 1)^p, 0, 1), 0 below the threshold.
	Formula1 Formula = "formula1"
	// Formula2: the bottleneck grows as the value falls (eq. 3.2):
	// s = clamp(1 − (x/t)^p, 0, 1), 0 above the threshold.
	Formula2 Formula = "formula2"
	// Ratio is §3.5's linear form s = clamp(x/t, 0, 1) (system %, I/O wait %).
	Ratio Formula = "ratio"
	// Inverse is §3.5's s = clamp(1 − x/t, 0, 1) (user %).
	Inverse Formula = "inverse"
	// None: no severity (an always-collected value, or a gate for the strategy).
	None Formula = "none"
)

// Severity computes s for value x, threshold t and exponent p. A NaN or infinite value,
// or a threshold ≤ 0, gives an error: severities must stay in [0, 1].
func (f Formula) Severity(x, t, p float64) (float64, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("value %v is not a number", x)
	}
	if f == None {
		return 0, nil
	}
	if !(t > 0) || math.IsInf(t, 0) {
		return 0, fmt.Errorf("threshold %v must be a positive number", t)
	}
	if p <= 0 {
		p = 1
	}
	var s float64
	switch f {
	case Formula1:
		d := x/t - 1
		switch {
		case d <= 0:
			s = 0
		case d >= 1:
			s = 1
		default:
			s = math.Pow(d, p)
		}
	case Formula2:
		if x <= 0 {
			s = 1
			break
		}
		r := math.Pow(x/t, p)
		s = 1 - r
	case Ratio:
		s = x / t
	case Inverse:
		s = 1 - x/t
	default:
		return 0, fmt.Errorf("unknown severity formula %q", f)
	}
	return math.Min(1, math.Max(0, s)), nil
}

func parseFormula(s string) (Formula, error) {
	switch f := Formula(s); f {
	case Formula1, Formula2, Ratio, Inverse, None:
		return f, nil
	}
	return "", fmt.Errorf("unknown severity formula %q (want formula1, formula2, ratio, inverse or none)", s)
}
