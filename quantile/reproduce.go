package quantile

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// The §7.5 experiment: 1,000 normally distributed values, dealt round robin
// into 10 groups of 100 as they are generated, deciles.
const (
	Experiment75Values = 1000
	Experiment75Groups = 10
	// The thesis does not state the mean and standard deviation. Values
	// far from zero relative to their spread are what performance
	// properties look like (CPI, GHz, GB/s of one job's CPUs); 100 ± 10
	// (coefficient of variation 0.1) is used, and the standard normal is
	// reported beside it in the package documentation.
	Experiment75Mean   = 100.0
	Experiment75StdDev = 10.0
)

// DecileError is the error of one estimated quantile against the exact one
// over the runs of an experiment.
type DecileError struct {
	P       float64 // probability k/q
	MeanAbs float64 // mean |estimate - exact|
	MaxAbs  float64
	MeanRel float64 // mean |estimate - exact| / |exact|
	MaxRel  float64
}

// MethodReport is the error of one merging method.
type MethodReport struct {
	Name    string
	Deciles []DecileError
	// Over the inner quantiles (k = 1..q-1; min and max are exact for both
	// methods) and all runs.
	MeanAbs, MaxAbs, MeanRel, MaxRel float64
}

// Report is the result of Reproduce75.
type Report struct {
	Seed           int64
	Runs           int
	Values, Groups int
	Mean, StdDev   float64
	Alpha          float64 // the sketch's relative accuracy
	// First is the first run's deciles: exact and both estimates (the
	// content of the thesis's Figure 7.3).
	First   struct{ Exact, PerSyst, Sketch []float64 }
	PerSyst MethodReport // MergeEstimate of the 10 group Summaries
	Sketch  MethodReport // the 10 group Sketches merged
}

// Reproduce75 repeats the thesis's §7.5 experiment runs times with
// N(Experiment75Mean, Experiment75StdDev²) values and a sketch of
// DefaultAlpha; run i draws its values from PCG(seed, i).
func Reproduce75(seed int64, runs int) Report {
	return Reproduce75Dist(seed, runs, Experiment75Mean, Experiment75StdDev, DefaultAlpha)
}

// Reproduce75Dist is Reproduce75 with N(mean, stddev²) values and a sketch
// of relative accuracy alpha.
func Reproduce75Dist(seed int64, runs int, mean, stddev, alpha float64) Report {
	const q = DefaultQ
	rep := Report{
		Seed: seed, Runs: runs, Values: Experiment75Values, Groups: Experiment75Groups,
		Mean: mean, StdDev: stddev, Alpha: alpha,
	}
	acc := [2][q + 1]DecileError{}
	all := make([]float64, Experiment75Values)
	groups := make([][]float64, Experiment75Groups)
	parts := make([]Summary, Experiment75Groups)
	for run := range runs {
		data := rand.New(rand.NewPCG(uint64(seed), uint64(run)))
		est := rand.New(rand.NewPCG(uint64(seed), uint64(run)|1<<63))
		for g := range groups {
			groups[g] = groups[g][:0]
		}
		for i := range all {
			all[i] = mean + stddev*data.NormFloat64()
			groups[i%Experiment75Groups] = append(groups[i%Experiment75Groups], all[i])
		}
		exact, _ := Summarize(all, q)
		merged, _ := NewSketch(alpha)
		for g, vs := range groups {
			parts[g], _ = Summarize(vs, q)
			gs, _ := SketchOf(alpha, vs)
			if err := merged.Merge(gs); err != nil {
				panic(err) // same alpha: cannot happen
			}
		}
		persyst := MergeEstimateRand(parts, est)
		sketch, _ := merged.Summary(q)
		if run == 0 {
			rep.First.Exact = exact.Quantiles
			rep.First.PerSyst = persyst.Quantiles
			rep.First.Sketch = sketch.Quantiles
		}
		for m, got := range [2][]float64{persyst.Quantiles, sketch.Quantiles} {
			for k := range q + 1 {
				abs := math.Abs(got[k] - exact.Quantiles[k])
				rel := abs / math.Abs(exact.Quantiles[k])
				if abs == 0 {
					rel = 0
				}
				e := &acc[m][k]
				e.MeanAbs += abs
				e.MeanRel += rel
				e.MaxAbs = max(e.MaxAbs, abs)
				e.MaxRel = max(e.MaxRel, rel)
			}
		}
	}
	for m, name := range [2]string{"PerSyst estimation (§5.2)", fmt.Sprintf("DDSketch α=%g", alpha)} {
		mr := MethodReport{Name: name, Deciles: make([]DecileError, q+1)}
		for k := range q + 1 {
			e := acc[m][k]
			e.P = float64(k) / q
			if runs > 0 {
				e.MeanAbs /= float64(runs)
				e.MeanRel /= float64(runs)
			}
			mr.Deciles[k] = e
			if k > 0 && k < q {
				mr.MeanAbs += e.MeanAbs / (q - 1)
				mr.MeanRel += e.MeanRel / (q - 1)
				mr.MaxAbs = max(mr.MaxAbs, e.MaxAbs)
				mr.MaxRel = max(mr.MaxRel, e.MaxRel)
			}
		}
		if m == 0 {
			rep.PerSyst = mr
		} else {
			rep.Sketch = mr
		}
	}
	return rep
}

// String formats the report as Markdown tables.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "§7.5: %d values N(%g, %g²) in %d round-robin groups; seed %d, %d runs; sketch α=%g\n\n",
		r.Values, r.Mean, r.StdDev, r.Groups, r.Seed, r.Runs, r.Alpha)
	b.WriteString("First run (cf. Figure 7.3):\n\n| decile | exact | PerSyst | DDSketch |\n|---|---|---|---|\n")
	for k := range r.First.Exact {
		fmt.Fprintf(&b, "| %d%% | %.4f | %.4f | %.4f |\n", k*100/(len(r.First.Exact)-1),
			r.First.Exact[k], r.First.PerSyst[k], r.First.Sketch[k])
	}
	fmt.Fprintf(&b, "\nError over %d runs (abs in value units, rel = abs/|exact|):\n\n", r.Runs)
	b.WriteString("| decile | PerSyst mean abs | max abs | mean rel | max rel | DDSketch mean abs | max abs | mean rel | max rel |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for k := range r.PerSyst.Deciles {
		a, s := r.PerSyst.Deciles[k], r.Sketch.Deciles[k]
		fmt.Fprintf(&b, "| %g%% | %.4g | %.4g | %.3g%% | %.3g%% | %.4g | %.4g | %.3g%% | %.3g%% |\n",
			a.P*100, a.MeanAbs, a.MaxAbs, a.MeanRel*100, a.MaxRel*100,
			s.MeanAbs, s.MaxAbs, s.MeanRel*100, s.MaxRel*100)
	}
	a, s := r.PerSyst, r.Sketch
	fmt.Fprintf(&b, "| 10–90%% | %.4g | %.4g | %.3g%% | %.3g%% | %.4g | %.4g | %.3g%% | %.3g%% |\n",
		a.MeanAbs, a.MaxAbs, a.MeanRel*100, a.MaxRel*100, s.MeanAbs, s.MaxAbs, s.MeanRel*100, s.MaxRel*100)
	return b.String()
}
