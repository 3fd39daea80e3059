package properties

import (
	"math"
	"strings"
	"testing"
)

func TestSeverityFormulas(t *testing.T) {
	tests := []struct {
		f       Formula
		x, t, p float64
		want    float64
	}{
		// FORMULA1 (eq. 3.1): 0 up to the threshold, 1 from twice the threshold.
		{Formula1, 0, 10, 1, 0},
		{Formula1, 10, 10, 1, 0},
		{Formula1, 15, 10, 1, 0.5},
		{Formula1, 15, 10, 2, 0.25},        // p > 1 delays the growth
		{Formula1, 15, 10, 0.5, 0.7071068}, // p < 1 accelerates it
		{Formula1, 20, 10, 1, 1},
		{Formula1, 1e9, 10, 1, 1},
		// FORMULA2 (eq. 3.2): 1 at 0, 0 from the threshold on.
		{Formula2, 0, 10, 1, 1},
		{Formula2, 5, 10, 1, 0.5},
		{Formula2, 5, 10, 2, 0.75},
		{Formula2, 10, 10, 1, 0},
		{Formula2, 50, 10, 1, 0},
		{Formula2, -3, 10, 1, 1},
		// §3.5 linear forms, clamped.
		{Ratio, 5, 20, 1, 0.25},
		{Ratio, 40, 20, 1, 1},
		{Inverse, 60, 80, 1, 0.25},
		{Inverse, 100, 80, 1, 0},
		{None, 123, 0, 0, 0},
	}
	for _, tc := range tests {
		got, err := tc.f.Severity(tc.x, tc.t, tc.p)
		if err != nil || math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%s(x=%v, t=%v, p=%v) = %v, %v; want %v", tc.f, tc.x, tc.t, tc.p, got, err, tc.want)
		}
	}
	for _, bad := range []struct {
		f       Formula
		x, t    float64
		wantErr string
	}{
		{Formula1, math.NaN(), 1, "not a number"},
		{Formula2, math.Inf(1), 1, "not a number"},
		{Formula1, 1, 0, "threshold 0"},
		{Ratio, 1, -2, "threshold -2"},
		{Formula("formula3"), 1, 1, "unknown severity formula"},
	} {
		if _, err := bad.f.Severity(bad.x, bad.t, 1); err == nil || !strings.Contains(err.Error(), bad.wantErr) {
			t.Errorf("%s(%v, %v): error %v, want %q", bad.f, bad.x, bad.t, err, bad.wantErr)
		}
	}
}
