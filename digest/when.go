package digest

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/persyst/persyst/episodes"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/properties"
)

// When and why: the job's phases, the phases each finding held in, and the time it lost
// to interference (package phases finds them).

// phaseMinPart is the part of a finding's severe time a phase must hold to be named.
const phaseMinPart = 0.25

// markPhases names in each finding the phases that hold at least phaseMinPart of its
// severe time; none where that is every phase (or there is one).
func markPhases(findings []properties.Result, ph []phases.Phase) {
	if len(ph) < 2 {
		return
	}
	for i := range findings {
		f := &findings[i]
		total := 0.0
		for _, p := range ph {
			total += p.Held[f.Key]
		}
		if total <= 0 {
			continue
		}
		var in []int
		for _, p := range ph {
			if p.Held[f.Key] >= phaseMinPart*total {
				in = append(in, p.N)
			}
		}
		if len(in) < len(ph) {
			f.Phases = in
		}
	}
}

// InterferenceShown is the least lost share the digest states (the report has every
// share): below it a run measures the code, and saying "0 % lost" is noise.
const InterferenceShown = 0.02

// throughout: a worst stretch this long a share of the judged time is the whole job's.
const throughout = 0.8

// interferenceLines say the time lost to interference, where it is worth saying, and
// why a starvation finding beside it says more.
func interferenceLines(r Report) []string {
	in, node := r.Interference, r.interferenceNode()
	if in == nil || in.Share < InterferenceShown || len(in.Causes) == 0 {
		return nil
	}
	if node == "" {
		node = "the node"
	}
	var causes []string
	for i, c := range in.Causes {
		if i == 2 {
			break
		}
		switch c.Key {
		case phases.CauseCPU:
			causes = append(causes, "other work on "+node)
		case phases.CauseIO:
			causes = append(causes, "I/O congestion on "+node+" (the node's I/O pressure: other jobs' I/O or a slow file system)")
		case phases.CauseMemory:
			causes = append(causes, "memory pressure on "+node)
		}
	}
	if len(causes) == 0 {
		return nil
	}
	s := fmt.Sprintf("About %.0f%% of the job's time was lost to %s (%s interference)", math.Round(100*in.Share), strings.Join(causes, " and "), in.Class)
	if w := in.Worst; w != nil {
		if w.To.Sub(w.From).Seconds() >= throughout*in.Seconds {
			s += ", all through the job"
		} else {
			s += ", mostly " + w.From.Format("15:04:05") + "-" + w.To.Format("15:04:05")
		}
	}
	s += "."
	s += starvedBeside(r, in)
	if in.Class == "high" {
		s += " With this much interference the run measured the system more than the code: compare with a run at a quieter time."
	}
	return []string{s}
}

// starvedBeside says why the job's starvation (cpu_starved: the share of the time in
// which any of its threads waited for a CPU) is higher than the time it lost to other
// work, where both are said and they differ by a tenth of the time or more: while one
// thread waited, the others ran on.
func starvedBeside(r Report, in *phases.Interference) string {
	if len(in.Causes) == 0 || in.Causes[0].Key != phases.CauseCPU {
		return ""
	}
	for _, f := range r.Findings {
		if f.Key != "cpu_starved" || len(f.Deciles) != 11 {
			continue
		}
		if waited := f.Median() / 100; waited >= in.Share+0.1 {
			return fmt.Sprintf(" Its threads waited for a CPU more of the time (%.0f%%, starved of CPU): while one waited, the others ran on, so the job lost less than that.",
				math.Round(100*waited))
		}
	}
	return ""
}

// interferenceNode is the node r's interference is of.
func (r Report) interferenceNode() string {
	if r.InterferenceNode != "" {
		return r.InterferenceNode
	}
	return r.PhasesNode
}

// episodeLines say the site-wide I/O episodes that stalled the job.
func episodeLines(eps []episodes.Episode) []string {
	var out []string
	for i, e := range eps {
		if i == 2 {
			out = append(out, fmt.Sprintf("And %d more such episodes.", len(eps)-i))
			break
		}
		out = append(out, fmt.Sprintf("From %s to %s, %d of the site's %d jobs stalled on I/O at once, this one among them: the storage they share was slow then, so its I/O waits were not all its own.",
			e.From.Format("15:04:05"), e.To.Format("15:04:05"), e.Stalled, max(e.Jobs, e.Stalled)))
	}
	return out
}

// unlikeShown is the most nodes unlike the rest named one by one.
const unlikeShown = 3

// unlikeLines name the nodes of a multi-node job that behaved unlike the rest, with when
// and how.
func unlikeLines(a *phases.Alikeness, start time.Time) []string {
	if a == nil || len(a.Unlike) == 0 {
		return nil
	}
	var out []string
	for i, u := range a.Unlike {
		if i == unlikeShown {
			out = append(out, fmt.Sprintf("%d more of the job's %d nodes behaved unlike the rest.", len(a.Unlike)-i, a.Nodes))
			break
		}
		s := fmt.Sprintf("%s behaved unlike the job's other nodes %.0f%% of its time, most of all %s-%s: %s",
			u.Node, 100*(1-u.Alike), sinceStart(u.Stretch.From, start), sinceStart(u.Stretch.To, start), describe(u.Traits, u.NCPUs))
		if u.OthersNCPUs > 0 {
			s += " (most nodes: " + describe(u.Others, u.OthersNCPUs) + ")"
		}
		out = append(out, s+".")
	}
	return out
}

// phaseLines list the phases, one a line, where there is more than one.
func phaseLines(ph []phases.Phase, start time.Time, ncpus int) []string {
	if len(ph) < 2 {
		return nil
	}
	out := []string{"Phases:"}
	for i, p := range ph {
		if i == phases.MaxPhases {
			out = append(out, fmt.Sprintf("  and %d more.", len(ph)-i))
			break
		}
		out = append(out, fmt.Sprintf("  %d. %s (%.0f%%): %s.", p.N, stretches(p.Stretches, start), 100*p.Share, describe(p.Traits, ncpus)))
	}
	return out
}

// stretches says a phase's stretches since the job's start: "0:00-4:10", "0:00-1:00
// and 3 more".
func stretches(ss []phases.Stretch, start time.Time) string {
	if len(ss) == 0 {
		return "-"
	}
	s := sinceStart(ss[0].From, start) + "-" + sinceStart(ss[0].To, start)
	if len(ss) > 1 {
		s += fmt.Sprintf(" and %d more", len(ss)-1)
	}
	return s
}

// sinceStart says a time as the time since the job's start: "4:10", "1:02:03".
func sinceStart(t, start time.Time) string {
	d := max(t.Sub(start), 0).Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}

// describe says what a phase did, briefly: its CPUs, then its I/O, opens and GPUs where
// they were notable.
func describe(t phases.Traits, ncpus int) string {
	cpus := "CPUs"
	if ncpus == 1 {
		cpus = "CPU"
	}
	parts := []string{fmt.Sprintf("%s %.0f%% busy", cpus, 100*t.CPUBusy)}
	io := func(verb string, bytes, calls float64) {
		if bytes < 1<<20 && calls < 100 {
			return
		}
		s := verb + " " + humanBytes(bytes) + "/s"
		if calls > 0 {
			s += " in " + humanBytes(bytes/calls) + " pieces"
		}
		parts = append(parts, s)
	}
	io("reads", t.ReadBytes, t.ReadCalls)
	io("writes", t.WriteBytes, t.WriteCalls)
	if t.Opens >= 10 {
		parts = append(parts, fmt.Sprintf("opens %s files/s", strings.TrimSpace(si(t.Opens))))
	}
	if t.GPUBusy > 0 {
		parts = append(parts, fmt.Sprintf("GPUs %.0f%% busy", 100*t.GPUBusy))
	}
	return strings.Join(parts, ", ")
}

// WhenLines are what a report says of when and why: the time lost to interference, and
// the phases where there are several (the text digest's lines).
func WhenLines(r Report) []string {
	r = r.Clean()
	out := append(interferenceLines(r), unlikeLines(r.Alike, r.Start)...)
	out = append(out, episodeLines(r.Episodes)...)
	return append(out, phaseLines(r.Phases, r.Start, r.CPUs)...)
}

// FindingPhases says the phases a finding of report r held in ("" where it held in all,
// or the job had one).
func FindingPhases(f properties.Result, r Report) string { return findingPhases(f, r.Phases, r.Start) }

// findingPhases says the phases a finding held in.
func findingPhases(f properties.Result, ph []phases.Phase, start time.Time) string {
	switch len(f.Phases) {
	case 0:
		return ""
	case 1:
		for _, p := range ph {
			if p.N == f.Phases[0] {
				return fmt.Sprintf("In phase %d (%s, %.0f%% of the job).", p.N, stretches(p.Stretches, start), 100*p.Share)
			}
		}
	}
	ns := make([]string, len(f.Phases))
	for i, n := range f.Phases {
		ns[i] = fmt.Sprint(n)
	}
	if len(ns) > 1 {
		return "In phases " + strings.Join(ns[:len(ns)-1], ", ") + " and " + ns[len(ns)-1] + "."
	}
	return "In phase " + ns[0] + "."
}
