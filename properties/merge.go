package properties

// Results from other agents of the tree: merged with this node's, trusted for numbers only.

import (
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MergeResults takes the job-wide results where the collector has them (all nodes'
// records) and this node's for the rest (properties the collector never received:
// job-domain ones computed here, and those not assessed with their reasons).
func MergeResults(local, wide []Result) []Result {
	byKey := map[string]Result{}
	for _, r := range wide {
		if r.Assessed {
			byKey[r.Key] = r
		}
	}
	out := make([]Result, 0, len(local)+1)
	seen := map[string]bool{}
	for _, r := range local {
		// Job-domain properties computed here (memory trends, the memory request) stay
		// local unless this node could not assess them (the imbalance between nodes).
		if w, ok := byKey[r.Key]; ok && (r.Domain != Job || !r.Assessed) {
			r = w
		}
		seen[r.Key] = true
		out = append(out, r)
	}
	for _, r := range wide {
		if !seen[r.Key] && r.Assessed {
			out = append(out, r) // inter_node_imbalance: only the collector can assess it
		}
	}
	return out
}

// maxRemoteText bounds a reason that comes from another agent of the tree.
const maxRemoteText = 200

// Adopt takes results made by another agent of the tree (a collector's job-wide report)
// into this engine's terms, trusting only their numbers: the name, unit, domain and
// recommendation of each come from this engine's catalog by key (a key it does not know
// is dropped), the numbers must be finite and in range (severities and shares in [0, 1],
// eleven deciles or none), and free text (why not assessed or suppressed) loses control
// characters and is cut to a bounded length.
func (e *Engine) Adopt(remote []Result) []Result {
	out := make([]Result, 0, len(remote))
	for _, r := range remote {
		p, ok := e.cfg.Catalog.Get(r.Key)
		if !ok {
			continue
		}
		r.ID, r.Name, r.Unit, r.Domain, r.Recommendation = p.ID, p.Name, p.Unit, p.Domain, p.Recommendation
		r.NotAssessed, r.Suppressed = CleanText(r.NotAssessed, maxRemoteText), CleanText(r.Suppressed, maxRemoteText)
		unit := func(x float64) float64 {
			if math.IsNaN(x) {
				return 0
			}
			return math.Min(math.Max(x, 0), 1)
		}
		r.TimeShare, r.MeanSeverity, r.MaxSeverity = unit(r.TimeShare), unit(r.MeanSeverity), unit(r.MaxSeverity)
		if math.IsNaN(r.Score) || math.IsInf(r.Score, 0) || r.Score < 0 {
			r.Score = 0
		}
		if r.Count < 0 {
			r.Count = 0
		}
		if r.Threshold != nil && (math.IsNaN(*r.Threshold) || math.IsInf(*r.Threshold, 0)) {
			r.Threshold = nil
		}
		if len(r.Deciles) != 11 || !allFinite(r.Deciles) {
			r.Deciles = nil
		}
		if r.Assessed && r.Deciles == nil {
			r.Assessed, r.Finding, r.NotAssessed = false, false, "the collector's values were malformed"
		}
		out = append(out, r)
	}
	return out
}

func allFinite(xs []float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// CleanText returns s without control and format characters (terminal escapes,
// bidirectional overrides) and invalid UTF-8, cut to at most max bytes: text from
// elsewhere, made fit to print.
func CleanText(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			r = ' '
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
