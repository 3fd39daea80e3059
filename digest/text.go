package digest

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// TextOptions bound the text digest.
type TextOptions struct {
	Width       int // columns (default 80)
	MaxFindings int // findings shown (default 5; the rest are counted)
}

// Text renders the digest for a terminal or a job's output file: at most 30 lines of at
// most Width columns, no colour codes. A job without findings gets one line.
func Text(r Report, o TextOptions) string {
	r = r.Clean()
	if o.Width <= 0 {
		o.Width = 80
	}
	if o.MaxFindings <= 0 {
		o.MaxFindings = 5
	}
	h := headOf(r)
	if len(r.Findings) == 0 && len(r.Events) == 0 {
		return quietText(r, h, o.Width)
	}
	energy := true
	render := func(o TextOptions) string {
		var b strings.Builder
		writeRule(&b, "persyst: "+h.what, o.Width)
		writeLead(&b, r, h, o.Width)
		writeFindings(&b, r, o)
		writeFoot(&b, r, o.Width, energy)
		return b.String()
	}
	// Over 30 lines, the energy's line goes first (the facts keep its total), then fewer
	// findings are shown (the rest counted) before anything is cut: the notes after
	// them (memory near the limit) and the foot stay.
	s := render(o)
	if strings.Count(s, "\n") > maxLines && r.Energy != nil {
		energy = false
		s = render(o)
	}
	for o.MaxFindings > 1 && strings.Count(s, "\n") > maxLines {
		o.MaxFindings--
		s = render(o)
	}
	return limitLines(s, maxLines)
}

// maxLines bounds a text digest.
const maxLines = 30

// head is what every digest opens with, findings or not: which job, the facts of its
// run, and the lines stated with those facts.
type head struct {
	what  string // "job 1234", "job 1234, run 2", or persyst run's command
	facts string // the CPUs and GPUs held, the time, the samples
	// energy is the job's energy as the facts give it ("" : none, or not the whole job's).
	energy string
	// covered says what of the job the digest does not cover; around what happened to
	// the job that was not its code's doing (Slurm suspended it, work outside it took its
	// time, its nodes behaved unlike each other, the site stalled on I/O): stated with the
	// facts, never as a finding against the job.
	covered, around []string
}

// headOf gathers a report's head.
func headOf(r Report) head {
	h := head{what: "job " + r.JobName()}
	if r.Run > 0 {
		h.what += fmt.Sprintf(", run %d", r.Run)
	}
	if r.Command != "" {
		h.what = r.Command
	}
	held := plural(r.CPUs, "CPU")
	if r.GPUs > 0 {
		held += " and " + plural(r.GPUs, "GPU")
		if r.GPUModel != "" {
			held += " (" + r.GPUModel + ")"
		}
	}
	h.facts = fmt.Sprintf("%s, %s, %d sample%s", held, Duration(r.Seconds), r.Samples, map[bool]string{true: "", false: "s"}[r.Samples == 1])
	h.energy = energyFacts(r.Energy, r.NNodes)
	h.covered = coverageLines(r.Coverage, r.Nodes, r.NNodes)
	// Slurm's own doing comes with the facts: never a finding against the job.
	h.around = suspendedLines(r.Suspended)
	// Was it the code or the system: the time lost to interference, stated with the
	// facts whether or not there are findings.
	h.around = append(h.around, interferenceLines(r)...)
	h.around = append(h.around, unlikeLines(r.Alike, r.Start)...)
	h.around = append(h.around, episodeLines(r.Episodes)...)
	return h
}

// quietText is the digest of a job without findings or events: one line when nothing
// else is to be said; else a "no issues" line (of what was measured only, where the
// digest does not cover the whole job) with, indented under it, what happened around the
// job, what the digest does not cover, and the notes.
func quietText(r Report, h head, width int) string {
	facts := h.facts
	if h.energy != "" {
		facts += ", " + h.energy
	}
	if r.Short {
		facts += "; short job"
	}
	if len(r.Nodes) > 1 {
		facts = strings.Replace(facts, ", ", fmt.Sprintf(" on %d nodes, ", len(r.Nodes)), 1)
	}
	var b strings.Builder
	if r.StartupOnly && len(h.covered) == 0 {
		// Nothing was judged: saying "no issues" would claim more than was looked at.
		wrap(&b, fmt.Sprintf("persyst: %s: too short to judge (%s): it ended within its start-up, the first second, which is never judged.", h.what, facts), width, "  ")
		return b.String()
	}
	if len(h.covered) == 0 && len(r.Notes) == 0 && len(h.around) == 0 {
		if r.Energy != nil || r.GPUModel != "" {
			// With its energy or its GPUs' model the line may not fit: wrapped, not cut.
			wrap(&b, fmt.Sprintf("persyst: %s: no issues found (%s)", h.what, facts), width, "  ")
			return b.String()
		}
		return clip(fmt.Sprintf("persyst: %s: no issues found (%s)", h.what, facts), width) + "\n"
	}
	if len(h.covered) == 0 && r.GPUModel == "" {
		b.WriteString(clip(fmt.Sprintf("persyst: %s: no issues found (%s)", h.what, facts), width) + "\n")
	} else if len(h.covered) == 0 {
		wrap(&b, fmt.Sprintf("persyst: %s: no issues found (%s)", h.what, facts), width, "  ")
	} else {
		// "No issues" is said of what was measured only, and what was not follows.
		wrap(&b, fmt.Sprintf("persyst: %s: no issues found in what was measured (%s)", h.what, facts), width, "  ")
	}
	for _, l := range append(h.around, h.covered...) {
		wrap(&b, "  "+l, width, "  ")
	}
	notes(&b, r.Notes, "  ", width)
	return limitLines(b.String(), maxLines)
}

// writeRule writes the digest's top line: title in a rule of dashes across the width.
func writeRule(b *strings.Builder, title string, width int) {
	s := clip("-- "+title+" ", width)
	if n := width - utf8.RuneCountInString(s); n > 0 {
		s += strings.Repeat("-", n)
	}
	b.WriteString(s + "\n")
}

// writeLead writes what comes between the top rule and the findings: the facts and the
// nodes, what happened around the job and what the digest does not cover, what happened
// to the job, its phases, and the findings' heading (or why there are none). With none
// of these to say, the heading ends the facts' line.
func writeLead(b *strings.Builder, r Report, h head, width int) {
	nodes := onNodes(r)
	if h.energy != "" {
		nodes += "; " + h.energy
	}
	if len(h.covered) == 0 && len(h.around) == 0 && len(r.Events) == 0 && len(phaseLines(r.Phases, r.Start, r.CPUs)) == 0 {
		wrap(b, h.facts+nodes+". Findings, most important first:", width, "")
		return
	}
	wrap(b, h.facts+nodes+".", width, "")
	for _, l := range append(h.around, h.covered...) {
		wrap(b, l, width, "  ")
	}
	// What happened to the job comes before any finding.
	for _, ev := range r.Events {
		wrap(b, "! "+ev.Text, width, "  ")
		if ev.Recommendation != "" {
			wrap(b, "  "+ev.Recommendation, width, "  ")
		}
	}
	switch {
	case len(r.Findings) > 0:
		for _, l := range phaseLines(r.Phases, r.Start, r.CPUs) {
			wrap(b, l, width, "     ")
		}
		b.WriteString("Findings, most important first:\n")
	case r.StartupOnly:
		wrap(b, "Nothing else to judge: the job ended within its start-up, the first second, which is never judged.", width, "")
	default:
		b.WriteString("No findings in what was measured.\n")
	}
}

// onNodes says where the digest's data is from, to follow the facts: " on node1", " on 4
// nodes", or the nodes covered of a job's more; "" when no node is named.
func onNodes(r Report) string {
	switch {
	case r.NNodes > 1 && len(r.Nodes) < r.NNodes:
		return fmt.Sprintf(" on %s of %d nodes", strings.Join(r.Nodes, ","), r.NNodes)
	case len(r.Nodes) == 1:
		return " on " + r.Nodes[0]
	case len(r.Nodes) > 1:
		return fmt.Sprintf(" on %d nodes", len(r.Nodes))
	}
	return ""
}

// writeFindings writes the first MaxFindings findings, most important first, each with
// the phases it held in, and counts the rest (those left out of the report too), saying
// where to see them.
func writeFindings(b *strings.Builder, r Report, o TextOptions) {
	shown := r.Findings
	if len(shown) > o.MaxFindings {
		shown = shown[:o.MaxFindings]
	}
	for i, f := range shown {
		finding(b, i+1, f, o.Width, gpuNoun(r), findingPhases(f, r.Phases, r.Start))
	}
	if n := len(r.Findings) - len(shown) + r.Omitted; n > 0 {
		more := "persyst report " + r.JobName()
		if r.Command != "" {
			more = "persyst run --json"
		}
		wrap(b, fmt.Sprintf("... and %d more (%s).", n, more), o.Width, "")
	}
}

// writeFoot writes what follows the findings: the notes, how the counts were taken where
// they are estimates, the energy (unless energy is false), what a short job leaves out, what could not be assessed (two
// reasons at most), where to see more or how to opt out, and the closing rule.
func writeFoot(b *strings.Builder, r Report, width int, energy bool) {
	notes(b, r.Notes, "", width)
	if how := r.Methods[sampledKey]; strings.Contains(how, "scaled") {
		// Counted in samples: the counts the findings use are estimates, said as such.
		wrap(b, "File opens, closes, reads and writes and futex calls: "+how+".", width, "")
	}
	if told := callsTold(r); told != "" {
		wrap(b, told, width, "")
	}
	if e := EnergyLine(r); e != "" && energy {
		wrap(b, e, width, "")
	}
	if r.Short {
		wrap(b, fmt.Sprintf("Short job (under %s): findings that need a longer run (memory trends) are left out.", Duration(r.MinSeconds)), width, "")
	}
	n := 0
	for _, na := range r.NotAssessed {
		if n == 2 {
			break
		}
		if !slices.ContainsFunc(na.Properties, func(k string) bool { return !byTarget(k) }) {
			continue // said by callsTold where it matters
		}
		wrap(b, "Not assessed: "+strings.Join(na.Properties, ", ")+" ("+na.Reason+").", width, "  ")
		n++
	}
	if r.Command != "" {
		wrap(b, "Every value: persyst run --json.", width, "")
	} else {
		wrap(b, "Opt out: sbatch --persyst=off (or PERSYST=off). Details: persyst report "+r.JobName()+".", width, "")
	}
	b.WriteString(strings.Repeat("-", width) + "\n")
}

// byTarget says whether key is a property of the reads and writes on pipes, sockets or
// terminals and character devices (properties/catalog.conf), judged where eBPF tells the
// calls apart by what they went to.
func byTarget(key string) bool {
	for _, p := range []string{"pipe_", "socket_", "chardev_"} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// callsTold says, where a small-request finding is shown, how the calls it judged were
// told apart: per call by what they went to where the properties of the calls on pipes,
// sockets and terminals were assessed, else not at all ("" without such a finding).
func callsTold(r Report) string {
	if !slices.ContainsFunc(r.Findings, func(f properties.Result) bool { return strings.HasSuffix(f.Key, "_request_size") }) {
		return ""
	}
	if slices.ContainsFunc(r.Properties, func(p properties.Result) bool { return p.Assessed && byTarget(p.Key) }) {
		return "Reads and writes: told apart per call by what they went to (files, pipes, sockets, terminals), with eBPF."
	}
	return "Reads and writes: not told apart by what they went to on this node (that needs eBPF): the small-request findings count every call, on pipes and sockets too."
}

// sampledKey is the Methods entry of the system call counts.
const sampledKey = "system calls"

// suspendedLines states the stretches Slurm held the job suspended: Slurm's doing, not
// the job's, and not judged.
func suspendedLines(ss []sample.Gap) []string {
	if len(ss) == 0 {
		return nil
	}
	total := 0.0
	var parts []string
	for i, g := range ss {
		total += g.Seconds()
		if i < 3 {
			parts = append(parts, g.From.Format("15:04:05")+"-"+g.To.Format("15:04:05"))
		}
	}
	if len(ss) > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", len(ss)-3))
	}
	times := ""
	if len(ss) > 1 {
		times = fmt.Sprintf(" %d times,", len(ss))
	}
	return []string{fmt.Sprintf("Suspended by Slurm%s for %s (%s); not judged.", times, Duration(total), strings.Join(parts, ", "))}
}

// notes writes a report's notes, after its findings: never above one.
func notes(b *strings.Builder, ns []Event, indent string, width int) {
	for _, n := range ns {
		text := "Note: " + n.Text
		if n.Recommendation != "" {
			text += " " + n.Recommendation
		}
		wrap(b, indent+text, width, indent+"  ")
	}
}

// CoverageLines says what of the job a report does not cover: nodes, time, and a report
// made late. None when it covers the whole job.
func CoverageLines(r Report) []string { return coverageLines(r.Coverage, r.Nodes, r.NNodes) }

// coverageLines says what of the job the digest does not cover: nodes, time, and a
// digest made late. None when it covers the whole job.
func coverageLines(c *Coverage, nodes []string, nnodes int) []string {
	if c == nil {
		return nil
	}
	var out []string
	if len(c.Missing) > 0 {
		total := max(nnodes, len(nodes)+len(c.Missing))
		var whys []string
		byWhy := map[string][]string{}
		for _, m := range c.Missing {
			if _, ok := byWhy[m.Why]; !ok {
				whys = append(whys, m.Why)
			}
			byWhy[m.Why] = append(byWhy[m.Why], m.Node)
		}
		var parts []string
		for _, w := range whys {
			parts = append(parts, listSome(byWhy[w], 6)+" ("+w+")")
		}
		out = append(out, fmt.Sprintf("Covers %d of %d nodes (%s); not covered: %s.", len(nodes), total, listSome(nodes, 6), strings.Join(parts, "; ")))
	}
	if len(c.Gaps) > 0 {
		var parts []string
		for i, g := range c.Gaps {
			if i == 3 {
				parts = append(parts, fmt.Sprintf("and %d more", len(c.Gaps)-i))
				break
			}
			parts = append(parts, fmt.Sprintf("%s-%s (%s)", g.From.Format("15:04:05"), g.To.Format("15:04:05"), g.Why))
		}
		out = append(out, fmt.Sprintf("Measured %s of the job's %s; not measured: %s.", Duration(c.Measured), Duration(c.Elapsed), strings.Join(parts, ", ")))
	}
	if c.Late {
		out = append(out, "Made after the job ended: this node's persyst daemon missed the job's end.")
	}
	return out
}

// listSome joins up to n names, counting the rest.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

func finding(b *strings.Builder, n int, f properties.Result, width int, g gpuWords, where string) {
	gpus := g.n
	// Severity while the bottleneck held, and for how much of the job.
	while := f.MeanSeverity
	if f.TimeShare > 0 {
		while = f.MeanSeverity / f.TimeShare
	}
	head := fmt.Sprintf("%d. %s", n, f.Name)
	tail := fmt.Sprintf("%s %-6s %3.0f%% of the job", bar(while), SeverityWord(while), 100*f.TimeShare)
	if pad := width - len(head) - len(tail); pad > 0 {
		head += strings.Repeat(" ", pad)
	} else {
		head += " "
	}
	b.WriteString(clip(head+tail, width) + "\n")
	val := "   (no value)"
	if len(f.Deciles) == 11 {
		val = "   " + FormatValue(f.Median(), f.Unit)
		if f.Unit == "GPUs" {
			// A share of the job's GPUs, said as GPUs: any one is a finding.
			n := int(math.Round(f.Median() * float64(gpus)))
			what := fmt.Sprintf("%d of %s", n, plural(gpus, g.noun))
			switch {
			case gpus == 0: // their number is not known (several nodes)
				what = fmt.Sprintf("%.0f%% of the %ss", 100*f.Median(), g.noun)
			case gpus == 1:
				what = "The job's " + g.noun
			case n == gpus:
				what = fmt.Sprintf("All %d %ss", gpus, g.noun)
			}
			b.WriteString(clip("   "+what+" did nothing", width) + "\n")
			if where != "" {
				wrap(b, "   "+where, width, "   ")
			}
			wrap(b, "   "+f.Recommendation, width, "   ")
			return
		}
	}
	if len(f.Deciles) == 11 && f.Deciles[1] != f.Deciles[9] {
		val += fmt.Sprintf(" (10-90%%: %s to %s)", FormatValue(f.Deciles[1], f.Unit), FormatValue(f.Deciles[9], f.Unit))
	}
	if f.Threshold != nil {
		val += ", threshold " + FormatValue(*f.Threshold, f.Unit)
	}
	b.WriteString(clip(val, width) + "\n")
	if where != "" {
		wrap(b, "   "+where, width, "   ")
	}
	wrap(b, "   "+f.Recommendation, width, "   ")
}

// SeverityWord says a severity in a word (low, medium, high).
func SeverityWord(s float64) string {
	switch {
	case s >= 0.67:
		return "high"
	case s >= 0.34:
		return "medium"
	}
	return "low"
}

func bar(s float64) string {
	n := int(math.Round(s * 10))
	n = max(0, min(10, n))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", 10-n) + "]"
}

// FormatValue prints a property value in its unit.
func FormatValue(v float64, unit string) string {
	switch unit {
	case "%":
		return fmt.Sprintf("%.0f%%", v)
	case "share", "GPUs":
		return fmt.Sprintf("%.0f%%", 100*v)
	case "bytes":
		return humanBytes(v)
	case "B/s":
		return humanBytes(v) + "/s"
	case "/s":
		return fmt.Sprintf("%s/s", si(v))
	case "flop/s":
		return si(v) + "flop/s"
	case "Hz":
		return si(v) + "Hz"
	case "count":
		return fmt.Sprintf("%.0f", v)
	case "W":
		return fmt.Sprintf("%.0f W", v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func humanBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func si(v float64) string {
	for _, u := range []struct {
		d float64
		p string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= u.d {
			return fmt.Sprintf("%.1f %s", v/u.d, u.p)
		}
	}
	return fmt.Sprintf("%.0f ", v)
}

// Duration says a number of seconds briefly ("45 s", "3.2 min", "2.5 h").
// Duration says a number of seconds briefly ("45 s", "3m 20s", "2h 05m").
func Duration(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%.0f s", math.Max(s, 0))
}

func plural(n int, w string) string {
	if n == 1 {
		return "1 " + w
	}
	return strconv.Itoa(n) + " " + w + "s"
}

// clip cuts s to width columns (one per rune), never inside a UTF-8 character.
func clip(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:max(width-3, 0)]) + "..."
}

// wrap writes s folded at width; continuation lines start with indent.
func wrap(b *strings.Builder, s string, width int, indent string) {
	lead := s[:len(s)-len(strings.TrimLeft(s, " "))]
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = lead + w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > width:
			b.WriteString(clip(line, width) + "\n")
			line = indent + w
			if indent == "" {
				line = lead + w
			}
		default:
			line += " " + w
		}
	}
	if line != "" {
		b.WriteString(clip(line, width) + "\n")
	}
}

// limitLines keeps at most n lines, the last one being the closing rule.
func limitLines(s string, n int) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) <= n {
		return s
	}
	last := lines[len(lines)-1]
	kept := append(lines[:n-2:n-2], "(digest cut to 30 lines: persyst report shows all)\n", last)
	return strings.Join(kept, "") + "\n"
}

// maxText bounds any one string of a report in the text digest.
const maxText = 400

// Clean returns the report with every string it prints cleaned of control and format
// characters and bounded (properties.CleanText): a report may hold text from another
// agent of the tree, or a command line, and the digest goes into a user's file.
func (r Report) Clean() Report {
	c := func(s string) string { return properties.CleanText(s, maxText) }
	r.Command = c(r.Command)
	r.Nodes = cleanAll(r.Nodes, c)
	r.PhasesNode = c(r.PhasesNode)
	r.Events = append([]Event(nil), r.Events...)
	for i := range r.Events {
		r.Events[i].Text, r.Events[i].Recommendation = c(r.Events[i].Text), c(r.Events[i].Recommendation)
	}
	if r.Coverage != nil {
		cv := *r.Coverage
		cv.Missing = append([]MissingNode(nil), cv.Missing...)
		for i := range cv.Missing {
			cv.Missing[i].Node, cv.Missing[i].Why = c(cv.Missing[i].Node), c(cv.Missing[i].Why)
		}
		cv.Gaps = append([]sample.Gap(nil), cv.Gaps...)
		for i := range cv.Gaps {
			cv.Gaps[i].Why = c(cv.Gaps[i].Why)
		}
		r.Coverage = &cv
	}
	if r.Energy != nil {
		e := *r.Energy
		e.How, e.Nodes = c(e.How), cleanAll(e.Nodes, c)
		if e.ByNode != nil {
			by := make(map[string]*Energy, len(e.ByNode))
			for n, ne := range e.ByNode {
				if ne != nil {
					x := *ne
					x.How = c(x.How)
					by[c(n)] = &x
				}
			}
			e.ByNode = by
		}
		r.Energy = &e
	}
	r.Findings = append([]properties.Result(nil), r.Findings...)
	for i := range r.Findings {
		f := &r.Findings[i]
		f.Name, f.Unit, f.Recommendation = c(f.Name), c(f.Unit), c(f.Recommendation)
	}
	r.NotAssessed = append([]NotAssessed(nil), r.NotAssessed...)
	for i := range r.NotAssessed {
		n := &r.NotAssessed[i]
		n.Reason, n.Properties = c(n.Reason), cleanAll(n.Properties, c)
	}
	return r
}

func cleanAll(xs []string, c func(string) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = c(x)
	}
	return out
}
