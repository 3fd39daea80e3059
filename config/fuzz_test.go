package config

import (
	"math"
	"strings"
	"testing"
)

// FuzzParse: any input either parses into a configuration whose numbers are finite and
// in range, or gives an error naming the file (and, for a line's error, the line).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "CycleSeconds=5\n", "Threshold.cpi=2.5\nDigestMinSeconds=30", "Collector=c:1\nFrontend=fe Syncs=s1\n",
		"MetricSource.perf=off", "SlurmRestd=https://h:1\nSlurmRestdUser=u\nSlurmRestdTokenFile=/t", "DigestMinSeconds=NaN", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := Parse(strings.NewReader(in), "fuzz.conf")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.conf") && !strings.HasPrefix(err.Error(), "read fuzz.conf") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if !(c.DigestMinSeconds >= 0 && c.DigestMinSeconds <= 86400) || c.Cycle < 1e9 || c.SlurmRestdTimeout <= 0 {
			t.Fatalf("out of range: %+v", c)
		}
		for id, v := range c.Thresholds {
			if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
				t.Fatalf("threshold %s = %v", id, v)
			}
		}
	})
}
