package syscost

import (
	"testing"
	"time"
)

// TestMeasure: a small write takes some time, and far less than a millisecond (on any
// machine that runs the tests, emulated ones included).
func TestMeasure(t *testing.T) {
	d, err := Measure()
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || d > time.Millisecond {
		t.Errorf("a 64-byte write takes %v, want between 0 and 1 ms", d)
	}
	t.Logf("a 64-byte write(2) to a memfd: %v", d)
}
