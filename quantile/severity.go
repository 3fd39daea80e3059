package quantile

import "math"

// SeverityBins is the number of severity bins: bin 0 is exactly 0 (no
// bottleneck), bins 1..4 are (0, 0.25], (0.25, 0.5], (0.5, 0.75], (0.75, 1].
const SeverityBins = 5

// Severity is the severity distribution of a population: how many values
// fall in each severity bin. Severities are normalized to [0, 1] (thesis
// §3.2); a value outside [0, 1] or NaN is a bug in a severity formula and is
// counted in Invalid instead of being clamped into a bin. Merging adds the
// counts, so it is exact and associative.
type Severity struct {
	Counts  [SeverityBins]int64
	Invalid int64
}

// SeverityBin returns the bin of severity s, or -1 if s is not in [0, 1].
func SeverityBin(s float64) int {
	switch {
	case !(s >= 0 && s <= 1): // also NaN
		return -1
	case s == 0:
		return 0
	case s <= 0.25:
		return 1
	case s <= 0.5:
		return 2
	case s <= 0.75:
		return 3
	default:
		return 4
	}
}

// Add counts one severity.
func (d *Severity) Add(s float64) {
	if b := SeverityBin(s); b >= 0 {
		d.Counts[b]++
	} else {
		d.Invalid++
	}
}

// AddAll counts every severity in ss.
func (d *Severity) AddAll(ss []float64) {
	for _, s := range ss {
		d.Add(s)
	}
}

// Merge adds the counts of o to d.
func (d *Severity) Merge(o Severity) {
	for i, c := range o.Counts {
		d.Counts[i] += c
	}
	d.Invalid += o.Invalid
}

// Total is the number of valid severities counted.
func (d Severity) Total() int64 {
	var t int64
	for _, c := range d.Counts {
		t += c
	}
	return t
}

// Fractions returns each bin's share of Total (NaN for every bin if Total is
// zero).
func (d Severity) Fractions() [SeverityBins]float64 {
	var f [SeverityBins]float64
	t := d.Total()
	for i, c := range d.Counts {
		if t == 0 {
			f[i] = math.NaN()
		} else {
			f[i] = float64(c) / float64(t)
		}
	}
	return f
}
