package properties

// A job's results: its properties over the whole job, folded and ordered into findings.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/expr-lang/expr"

	"github.com/persyst/persyst/quantile"
	"github.com/persyst/persyst/sample"
)

// StartupOnly: the job was measured only during its start-up, which is never judged.
const StartupOnly = "the job ended within its start-up, which is not judged"

// NothingToAssess: the property's inputs were measured but never gave a value (no writes,
// so no mean write size). Not a gap in the measurement.
const NothingToAssess = "nothing to assess: no value in any interval"

// derivedWhy says why a derived value can be missing.
var derivedWhy = map[string]string{
	NameLoadBalance:    "needs the data of all the job's nodes (one-node job, or no collector tree yet)",
	NameMemRequest:     "the job requested no memory explicitly",
	NameMemGrowth:      "no memory series",
	NameMemGrowthBytes: "no memory series",
	NameBusyMin:        "no per-CPU task-clock",
	NameBusyMax:        "no per-CPU task-clock",
	NameIdleCPUs:       "no per-CPU task-clock",
	NameBusyCPUs:       "no per-CPU task-clock",
	NameFileOpens:      "no open system call is traced (tracefs)",
	NameIOReadCalls:    "the processes' I/O was not read",
	NameIOReadBytes:    "the processes' I/O was not read",
	NameIOWriteCalls:   "the processes' I/O was not read",
	NameIOWriteBytes:   "the processes' I/O was not read",
	NameFlops:          "no floating-point events for this processor",
	NameVectorFlops:    "no vector floating-point breakdown for this processor",
	NameTxBytes:        "node counters are not attributed to this job",
	NameRxBytes:        "node counters are not attributed to this job",
	NameTxPackets:      "node counters are not attributed to this job",
	NameRxPackets:      "node counters are not attributed to this job",
}

// Result is one property's outcome for a job.
type Result struct {
	Key    string `json:"key"`
	ID     string `json:"id"`
	Name   string `json:"name"`
	Unit   string `json:"unit"`
	Domain Domain `json:"domain"`
	// Assessed is false when the property could not be evaluated; NotAssessed says why.
	Assessed    bool   `json:"assessed"`
	NotAssessed string `json:"not_assessed,omitempty"`
	// Values across devices and time: count, deciles (type 7; Deciles[5] is the median).
	Count     int64     `json:"count,omitempty"`
	Deciles   []float64 `json:"deciles,omitempty"`
	Threshold *float64  `json:"threshold,omitempty"`
	// Share of the job's device-time with severity > 0, severity averaged over the job's
	// device-time (0 where not evaluated), and the highest severity.
	TimeShare    float64 `json:"time_share"`
	MeanSeverity float64 `json:"mean_severity"`
	MaxSeverity  float64 `json:"max_severity"`
	// Score orders findings: mean severity × the property's rank.
	Score float64 `json:"score"`
	// Finding: reported in the digest. Suppressed says why a severe property is not.
	Finding        bool   `json:"finding"`
	Suppressed     string `json:"suppressed,omitempty"`
	Recommendation string `json:"recommendation,omitempty"`
	// Folds are the properties this one explains when it is a finding (Fold).
	Folds []string `json:"folds,omitempty"`
	// Phases are the job's phases (numbers) the finding held in, where it did not hold
	// in all of them (the report's phases).
	Phases []int `json:"phases,omitempty"`
}

// Median returns the median value.
func (r Result) Median() float64 { return r.Deciles[5] }

// Finish evaluates the job-domain properties and summarizes every property. notMeasured
// gives the reasons of metrics that were not measured (sample.Summary.NotMeasured).
func (a *Accumulator) Finish(samples []sample.Sample, sum sample.Summary) []Result {
	a.finishJob(samples, sum)
	unsanitized := map[string]string{}
	for name := range sum.NotMeasured {
		unsanitized[Sanitize(name)] = name
	}
	short := a.e.cfg.MinSeconds > 0 && (sum.Seconds < a.e.cfg.MinSeconds || a.samples < 4)
	var out []Result
	seen := map[*Property]bool{}
	for _, p := range a.e.cfg.Strategy.Properties() {
		if seen[p] {
			continue
		}
		seen[p] = true
		if !applies(p, sum) {
			continue
		}
		var x *acc
		if pe := a.e.evals[p]; pe != nil && a.accs[pe.i].reached {
			x = &a.accs[pe.i]
		}
		r := Result{Key: p.Key(), ID: p.ID, Name: p.Name, Unit: p.Unit, Domain: p.Domain, Recommendation: p.Recommendation, Folds: a.folds(p)}
		if t, ok := a.e.thresholds[p]; ok {
			t := t
			r.Threshold = &t
		}
		switch {
		case p.Domain != Job && a.samples == 0 && a.startup > 0 && a.suspended == 0:
			r.NotAssessed = StartupOnly
		case x == nil:
			r.NotAssessed = "not evaluated: the strategy did not reach it (its parent's condition never held)"
		case x.records == 0 && x.notAssessed != "":
			r.NotAssessed = x.notAssessed
			if x.notAssessedName != "" {
				orig := unsanitized[x.notAssessedName]
				if orig == "" {
					orig = x.notAssessedName
				}
				why := sum.NotMeasured[orig]
				if why == "" {
					why = derivedWhy[orig]
				}
				_, measured := sum.Totals[orig]
				switch {
				case why == "" && measured:
					// Missing in some intervals only (a GPU's first read): where it was
					// measured the property had no value (an idle GPU's busy share),
					// unless another of its inputs was never measured.
					r.NotAssessed = a.neverMeasured(a.e.evals[p], sum, unsanitized)
				case why == "":
					r.NotAssessed = orig + ": not provided"
				default:
					r.NotAssessed = orig + ": " + why
				}
			}
		case x.records == 0:
			r.NotAssessed = NothingToAssess
		default:
			base := x.weight
			if p.Domain != Job && a.devSeconds[p.Domain] > base {
				base = a.devSeconds[p.Domain]
			}
			a.e.assess(&r, p, Aggregate{Values: x.values, SevereSeconds: x.severeWeight, SeveritySeconds: x.sevSum,
				MaxSeverity: x.sevMax, BaseSeconds: base, SevereWallSeconds: x.severeWall}, short)
		}
		out = append(out, r)
	}
	return out
}

// applies says whether property p concerns the job: one whose Applies metric has a value,
// or a reason why not (a GPU job on a node without NVIDIA's driver).
func applies(p *Property, sum sample.Summary) bool {
	if p.Applies == "" {
		return true
	}
	if _, ok := sum.Totals[p.Applies]; ok {
		return true
	}
	_, ok := sum.NotMeasured[p.Applies]
	return ok
}

// Aggregate is a property's records of a job merged from wherever they were evaluated
// (one node's Accumulator, or a collector holding the job's nodes).
type Aggregate struct {
	Values []float64 // every record's value
	// Summary, when Values is empty, gives the value quantiles instead (merged sketches
	// of a job split over several collectors: estimates within the sketch's error).
	Summary         *quantile.Summary
	SevereSeconds   float64 // Σ interval of records with severity > 0
	SeveritySeconds float64 // Σ severity × interval
	MaxSeverity     float64
	// BaseSeconds is the job's device-time in the property's domain: the base of the
	// time share and the mean severity.
	BaseSeconds float64
	// SevereWallSeconds is the wall-clock time of the intervals with severity > 0 on
	// some device (for a job split over collectors: the longest part's, a lower bound).
	SevereWallSeconds float64
}

// assess fills an assessed Result from an aggregate and decides whether it is a finding.
func (e *Engine) assess(r *Result, p *Property, agg Aggregate, short bool) {
	r.Assessed = true
	if agg.Summary != nil && len(agg.Values) == 0 {
		r.Deciles, r.Count = agg.Summary.Quantiles, agg.Summary.Count
	} else if qs, err := quantile.Summarize(agg.Values, 10); err == nil {
		r.Deciles, r.Count = qs.Quantiles, qs.Count
	}
	if agg.BaseSeconds > 0 {
		r.TimeShare = agg.SevereSeconds / agg.BaseSeconds
		r.MeanSeverity = agg.SeveritySeconds / agg.BaseSeconds
	}
	r.MaxSeverity = agg.MaxSeverity
	r.Score = r.MeanSeverity * p.Rank
	if p.Finding && p.Severity != None && r.TimeShare >= e.cfg.MinShare && r.MeanSeverity >= e.cfg.MinScore {
		r.Finding = true
		if agg.SevereWallSeconds < e.cfg.MinFindingSeconds {
			r.Finding = false
			r.Suppressed = fmt.Sprintf("held for %.1f s only: an effect shorter than %s is not a finding",
				agg.SevereWallSeconds, fmtSeconds(e.cfg.MinFindingSeconds))
		}
		if r.Finding && p.LongOnly && short {
			r.Finding = false
			r.Suppressed = fmt.Sprintf("not robust for a job shorter than %s", fmtSeconds(e.cfg.MinSeconds))
		}
	}
}

// ResultOf makes the Result of the property with key from an aggregate of the job's
// records (a collector's view of a multi-node job). ok is false for an unknown key.
func (e *Engine) ResultOf(key string, agg Aggregate, short bool) (Result, bool) {
	p, ok := e.cfg.Catalog.Get(key)
	if !ok {
		return Result{}, false
	}
	r := Result{Key: p.Key(), ID: p.ID, Name: p.Name, Unit: p.Unit, Domain: p.Domain, Recommendation: p.Recommendation, Folds: p.Folds}
	if t, ok := e.thresholds[p]; ok {
		r.Threshold = &t
	}
	e.assess(&r, p, agg, short)
	return r, true
}

// SeverityOf computes the severity of a value of the property with key (for values
// computed across nodes, like the spread between them). ok is false without a threshold.
func (e *Engine) SeverityOf(key string, v float64) (float64, bool) {
	p, ok := e.cfg.Catalog.Get(key)
	if !ok {
		return 0, false
	}
	t, ok := e.thresholds[p]
	if !ok {
		return 0, false
	}
	s, err := p.Severity.Severity(v, t, p.Exponent)
	return s, err == nil
}

// finishJob evaluates the job-domain properties on the job's summary and samples.
func (a *Accumulator) finishJob(samples []sample.Sample, sum sample.Summary) {
	a.seq++
	env := map[string]any{NameSeconds: sum.Seconds, NameSamples: float64(a.samples)}
	a.jobEnv = env
	for k, v := range a.e.cfg.Calibration {
		env[k] = v
	}
	for k, v := range sum.Totals {
		env[Sanitize(k)] = v
	}
	if a.info.NCPUs > 0 {
		env[NameNCPUs] = float64(a.info.NCPUs)
	}
	if a.info.MemRequestedBytes > 0 {
		env[NameMemRequest] = a.info.MemRequestedBytes
	}
	if g, ok := memGrowth(samples); ok {
		env[NameMemGrowth], env[NameMemGrowthBytes] = g.share, g.bytes
	}
	sl := newSlots(len(a.e.tab.list))
	for k, v := range env {
		sl.set(a.e.tab.slot(k), v.(float64))
	}
	for _, n := range a.e.roots {
		a.evalJob(n, &sl, sum.Seconds)
	}
}

// KernelTime is the property of the job's time in the kernel: a symptom of many causes.
const KernelTime = "cpu_system_pct"

// folds are the properties p explains in this job: its Folds, less the kernel time where
// the calls p counts (KernelCalls), at the node's cost of a call, come to less than a
// quarter of the job's kernel time. Without the job's totals (a merge of nodes' parts),
// its Folds.
func (a *Accumulator) folds(p *Property) []string {
	if p.kernelCalls == nil || a.jobEnv == nil {
		return p.Folds
	}
	env := envTemplate(Job)
	for k, v := range a.jobEnv {
		if f, ok := v.(float64); ok {
			env[k] = f
		}
	}
	sys, cost := env[Sanitize(sample.CPUSystemSeconds)], env[NameSyscallSeconds]
	if cost <= 0 {
		cost = defaultSyscallSeconds
	}
	out, err := expr.Run(p.kernelCalls, env)
	calls, ok := out.(float64)
	if err != nil || !ok || sys <= 0 || calls*cost >= sys/4 {
		return p.Folds
	}
	return slices.DeleteFunc(slices.Clone(p.Folds), func(k string) bool { return k == KernelTime })
}

func (a *Accumulator) evalJob(n *enode, sl *slots, w float64) {
	if n.pe.p.Domain != Job {
		return
	}
	if w <= 0 {
		w = 1
	}
	if ok, _, _, _ := a.record(n.pe, sl, w, w); ok {
		for _, c := range n.children {
			a.evalJob(c, sl, w)
		}
	}
}

// memGrowth fits a line to the job's memory (anonymous memory where measured, else
// memory in use) over the cycle samples, up to the last one
// still holding at least half the peak (the job's teardown frees everything; a last
// sample caught in the middle of it, below the peak just before, is left out too), and
// returns the growth along the line, in bytes and as a share of the peak, when the line
// explains the series well (R² ≥ 0.8) and there are at least 4 points; else 0. ok is
// false when there is no memory series at all.
func memGrowth(samples []sample.Sample) (growth, bool) {
	// Anonymous memory when measured: memory in use also counts the page cache that
	// writing files fills, which grows steadily without any leak.
	metric := sample.MemBytes
	for _, s := range samples {
		if _, ok := s.Job[sample.MemAnonBytes]; ok {
			metric = sample.MemAnonBytes
			break
		}
	}
	var ts, ms []float64
	peak := 0.0
	var t0 time.Time
	for _, s := range samples {
		if v, ok := s.Job[metric]; ok && s.Reason == sample.Cycle {
			if t0.IsZero() {
				t0 = s.Time
			}
			// Seconds since the first point: Unix seconds squared would lose the
			// precision the fit needs.
			ts = append(ts, s.Time.Sub(t0).Seconds())
			ms = append(ms, v)
			peak = math.Max(peak, v)
		}
	}
	if len(ms) == 0 || peak <= 0 {
		return growth{}, false
	}
	last := len(ms) - 1
	for last >= 0 && ms[last] < peak/2 {
		last--
	}
	// The teardown can also fall into the last cycle with more than half the peak still
	// held (its processes exiting mid-sample): a last point below the one before it, when
	// that one is the peak, is the job ending, not its memory's trend.
	if last >= 1 && ms[last] < ms[last-1] && ms[last-1] == peak {
		last--
	}
	ts, ms = ts[:last+1], ms[:last+1]
	if len(ms) < 4 {
		return growth{}, true
	}
	n := float64(len(ms))
	var st, sm, stt, stm float64
	for i := range ms {
		st, sm, stt, stm = st+ts[i], sm+ms[i], stt+ts[i]*ts[i], stm+ts[i]*ms[i]
	}
	den := n*stt - st*st
	if den == 0 {
		return growth{}, true
	}
	slope := (n*stm - st*sm) / den
	icpt := (sm - slope*st) / n
	mean := sm / n
	var ssr, sst float64
	for i := range ms {
		f := icpt + slope*ts[i]
		ssr += (ms[i] - f) * (ms[i] - f)
		sst += (ms[i] - mean) * (ms[i] - mean)
	}
	if sst == 0 || 1-ssr/sst < 0.8 || slope <= 0 {
		return growth{}, true
	}
	b := slope * (ts[len(ts)-1] - ts[0])
	return growth{share: b / peak, bytes: b}, true
}

// growth is memory's growth along its trend: in bytes, and as a share of the peak.
type growth struct{ share, bytes float64 }

// Fold returns the results with the findings that another finding explains (its Folds:
// one cause, its symptoms) turned into non-findings that say which: a job starved of
// CPU is not also told that its CPUs were idle. Findings fold in the order of their
// scores, and a folded finding folds nothing itself, so two properties that name each
// other never hide each other both.
func Fold(rs []Result) []Result {
	out := append([]Result(nil), rs...)
	var order []int
	for i, r := range out {
		if r.Finding {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		ra, rb := out[order[a]], out[order[b]]
		if ra.Score != rb.Score {
			return ra.Score > rb.Score
		}
		return ra.Key < rb.Key
	})
	// A cause comes before its symptoms, whatever their scores: findings that no other
	// finding folds go first (a storm of program starts explains its small reads even
	// when those score higher).
	folded := map[string]bool{}
	for _, i := range order {
		for _, k := range out[i].Folds {
			if k != out[i].Key {
				folded[k] = true
			}
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return !folded[out[order[a]].Key] && folded[out[order[b]].Key]
	})
	by := map[string]string{} // folded key → the finding that explains it
	for _, i := range order {
		if _, folded := by[out[i].Key]; folded {
			continue
		}
		for _, k := range out[i].Folds {
			if _, done := by[k]; !done && k != out[i].Key {
				by[k] = out[i].Name
			}
		}
	}
	for i, r := range out {
		if name, ok := by[r.Key]; ok && r.Finding {
			out[i].Finding = false
			out[i].Suppressed = "explained by " + name
		}
	}
	return out
}

// Findings returns the findings, most important first: by score (mean severity, that is
// severity × share of the job, weighed by the property's rank), then by highest
// severity, then by key.
func Findings(rs []Result) []Result {
	var out []Result
	for _, r := range rs {
		if r.Finding {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		if out[i].MaxSeverity != out[j].MaxSeverity {
			return out[i].MaxSeverity > out[j].MaxSeverity
		}
		return out[i].Key < out[j].Key
	})
	return out
}

func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d >= time.Minute && d%time.Minute == 0 {
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return strconv.FormatFloat(s, 'f', -1, 64) + " s"
}

// neverMeasured says why a property had no value where it was evaluated: an input that
// was never measured, with why ("name: why"), else NothingToAssess.
func (a *Accumulator) neverMeasured(pe *propEval, sum sample.Summary, unsanitized map[string]string) string {
	for k, i := range pe.value {
		if pe.optional[k] {
			continue
		}
		name := a.e.tab.list[i]
		if orig := unsanitized[name]; orig != "" {
			name = orig
		}
		if _, ok := sum.Totals[name]; ok {
			continue
		}
		if why := sum.NotMeasured[name]; why != "" {
			return name + ": " + why
		}
	}
	return NothingToAssess
}
