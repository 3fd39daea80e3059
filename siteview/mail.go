package siteview

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/persyst/persyst/collectors/store"
)

// MailOptions say what efficiency reports to mail for a period.
type MailOptions struct {
	Period  Period
	Cluster string
	// MinWastedHours: a user (an account) whose jobs left fewer CPU- and GPU-hours idle
	// in the period gets no mail (persyst.conf's ReportMinWastedHours, 10 by default).
	MinWastedHours float64
	// OptOut are the users who asked for no mail (neither theirs nor as coordinators).
	OptOut map[string]bool
	// Coordinators are the accounts each user coordinates (accounting.Coordinators):
	// each gets their accounts' figures per user.
	Coordinators map[string][]string
	// WebURL is the web view's address, for links ("": none).
	WebURL string
	// Advice is the one thing to try for a finding (its recommendation; "": none).
	Advice func(key string) string
	// Findings is how many findings a mail names (default 3).
	Findings int
}

// Mail is one efficiency report: to a user about their jobs (Kind "user"), or to an
// account's coordinator about the account's users (Kind "account:NAME").
type Mail struct {
	Kind, To, Subject, Body string
}

// Mails makes the period's efficiency reports: one to each user whose jobs left at
// least MinWastedHours idle (not opted out), and one to each coordinator for each of
// their accounts above it; the users and accounts that wasted most first.
func Mails(ctx context.Context, st *store.Store, o MailOptions) ([]Mail, error) {
	if o.Findings <= 0 {
		o.Findings = 3
	}
	all := store.Scope{All: true}
	q := Query{Period: o.Period, Cluster: o.Cluster}
	users, err := st.Rollups().By(ctx, q.Filter(all), store.ByUser)
	if err != nil {
		return nil, err
	}
	byWaste := func(a, b store.Group) int { return compareFloat(wasted(b.Usage), wasted(a.Usage)) }
	slices.SortStableFunc(users, byWaste)
	var out []Mail
	for _, u := range users {
		if u.Name == "" || o.OptOut[u.Name] || wasted(u.Usage) < o.MinWastedHours {
			continue
		}
		uq := q
		uq.User = u.Name
		site, err := st.Rollups().Site(ctx, uq.Filter(all))
		if err != nil {
			return nil, err
		}
		out = append(out, userMail(o, u, site))
	}
	accounts, err := st.Rollups().By(ctx, q.Filter(all), store.ByAccount)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(accounts, byWaste)
	coords := map[string][]string{} // account → its coordinators
	for c, accts := range o.Coordinators {
		for _, a := range accts {
			coords[a] = append(coords[a], c)
		}
	}
	for _, a := range accounts {
		if a.Name == "" || wasted(a.Usage) < o.MinWastedHours || len(coords[a.Name]) == 0 {
			continue
		}
		aq := q
		aq.Account = a.Name
		members, err := st.Rollups().By(ctx, aq.Filter(all), store.ByUser)
		if err != nil {
			return nil, err
		}
		slices.SortStableFunc(members, byWaste)
		cs := coords[a.Name]
		slices.Sort(cs)
		for _, c := range cs {
			if !o.OptOut[c] {
				out = append(out, accountMail(o, a, members, c))
			}
		}
	}
	return out, nil
}

// wasted are the CPU- and GPU-hours allocated and left idle.
func wasted(u store.Usage) float64 { return u.CPUIdleHours() + u.GPUIdleHours() }

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pct is a share in percent, or "–" of nothing.
func pct(part, whole float64) string {
	if !(whole > 0) {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*part/whole)
}

// usageLines say what jobs held and left unused, a line each.
func usageLines(b *strings.Builder, u store.Usage) {
	fmt.Fprintf(b, "  %d jobs, %s CPU-hours: %s idle (%s of those measured)\n", u.Jobs, hours(u.CPUHours), hours(u.CPUIdleHours()), pct(u.CPUIdleHours(), u.CPUMeasuredHours))
	if u.GPUHours > 0 {
		fmt.Fprintf(b, "  %s GPU-hours: %s idle, running nothing (%s)\n", hours(u.GPUHours), hours(u.GPUIdleHours()), pct(u.GPUIdleHours(), u.GPUMeasuredHours))
	}
	if u.MemMeasuredGiBHours > 0 {
		fmt.Fprintf(b, "  memory: %s GiB-hours requested, %s never used (%s)\n", hours(u.MemGiBHours), hours(u.MemUnusedGiBHours), pct(u.MemUnusedGiBHours, u.MemMeasuredGiBHours))
	}
	if u.LimitCPUHours > 0 {
		fmt.Fprintf(b, "  time limits: %s CPU-hours requested, %s not run (%s)\n", hours(u.LimitCPUHours), hours(u.LimitUnusedCPUHours), pct(u.LimitUnusedCPUHours, u.LimitCPUHours))
	}
	if u.EnergyJobs > 0 {
		fmt.Fprintf(b, "  energy: %s kWh, of %s whose energy was measured\n", hours(u.EnergyKWh), countJobs(u.EnergyJobs))
	}
}

// countJobs is "1 job", "2 jobs".
func countJobs(n int64) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}

// link is a web view address with a query, or "" without a web view.
func (o MailOptions) link(path string, q url.Values) string {
	if o.WebURL == "" {
		return ""
	}
	return strings.TrimSuffix(o.WebURL, "/") + path + "?" + q.Encode()
}

// periodValue is the period as the web view's ?period= takes it.
func periodValue(p Period) string {
	return day(p.From) + ".." + day(p.Last())
}

func userMail(o MailOptions, u store.Group, site *store.Site) Mail {
	var b strings.Builder
	fmt.Fprintf(&b, "Your jobs that ended from %s to %s", day(o.Period.From), day(o.Period.Last()))
	if o.Cluster != "" {
		fmt.Fprintf(&b, " on %s", o.Cluster)
	}
	b.WriteString(", as persyst measured them:\n\n")
	usageLines(&b, u.Usage)
	if len(site.Findings) > 0 {
		b.WriteString("\nWhat cost your jobs the most hours, and one thing to try for each:\n")
		for i, f := range site.Findings[:min(len(site.Findings), o.Findings)] {
			fmt.Fprintf(&b, "\n%d. %s: %s CPU-hours%s in %d jobs", i+1, f.Name, hours(f.CPUHours), gpuPart(f.GPUHours), f.Jobs)
			if len(f.TopJobs) > 0 {
				fmt.Fprintf(&b, " (most: job %s)", jobName(f.TopJobs[0].Job))
			}
			b.WriteString(".\n")
			if o.Advice != nil {
				wrap(&b, o.Advice(f.Key), "   ")
			}
		}
	}
	if l := o.link("/", url.Values{"user": {u.Name}, "period": {periodValue(o.Period)}}); l != "" {
		fmt.Fprintf(&b, "\nYour jobs of the period, each with its report: %s\n", l)
	}
	b.WriteString("\nEvery job's digest is at the end of its output file; `persyst report JOBID` shows it again.\n")
	fmt.Fprintf(&b, "You get this mail once for the period because your jobs left %s CPU- and GPU-hours idle\n(more than %s). Not wanted? Ask your site's admins to leave you out.\n",
		hours(wasted(u.Usage)), hours(o.MinWastedHours))
	return Mail{Kind: "user", To: u.Name,
		Subject: fmt.Sprintf("persyst: your jobs from %s to %s: %s of %s CPU-hours idle", day(o.Period.From), day(o.Period.Last()), hours(u.CPUIdleHours()), hours(u.CPUHours)),
		Body:    b.String()}
}

func gpuPart(h float64) string {
	if h <= 0 {
		return ""
	}
	return " and " + hours(h) + " GPU-hours"
}

func accountMail(o MailOptions, a store.Group, members []store.Group, to string) Mail {
	var b strings.Builder
	fmt.Fprintf(&b, "The jobs of account %s that ended from %s to %s", printable(a.Name), day(o.Period.From), day(o.Period.Last()))
	if o.Cluster != "" {
		fmt.Fprintf(&b, " on %s", o.Cluster)
	}
	fmt.Fprintf(&b, ", as persyst measured them (you coordinate the account in Slurm's accounting):\n\n")
	usageLines(&b, a.Usage)
	b.WriteString("\nPer user, those who left the most idle first:\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  user\tjobs\tCPU-hours\tidle\tGPU-hours\tidle\tcostliest finding")
	for _, m := range members {
		top := ""
		if m.Top != nil {
			top = m.Top.Name
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\n", printable(m.Name), m.Jobs, hours(m.CPUHours), hours(m.CPUIdleHours()), hours(m.GPUHours), hours(m.GPUIdleHours()), top)
	}
	tw.Flush()
	if l := o.link("/site", url.Values{"account": {a.Name}, "by": {"user"}, "period": {periodValue(o.Period)}}); l != "" {
		fmt.Fprintf(&b, "\nThe account's users and jobs: %s\n", l)
	}
	fmt.Fprintf(&b, "\nYou get this mail once for the period because the account's jobs left %s CPU- and GPU-hours idle\n(more than %s). Not wanted? Ask your site's admins to leave you out.\n",
		hours(wasted(a.Usage)), hours(o.MinWastedHours))
	return Mail{Kind: "account:" + a.Name, To: to,
		Subject: fmt.Sprintf("persyst: account %s from %s to %s: %s of %s CPU-hours idle", printable(a.Name), day(o.Period.From), day(o.Period.Last()), hours(a.CPUIdleHours()), hours(a.CPUHours)),
		Body:    b.String()}
}

// wrap writes text at 76 columns, each line indented.
func wrap(b *strings.Builder, text, indent string) {
	line := indent
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > 76 {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
}

// SendOptions say how the mails go out.
type SendOptions struct {
	// Max bounds the mails one run sends (default 500); the rest go with the next run.
	Max int
	// DryRun prints every mail to Out instead, and records none as sent.
	DryRun bool
	Out    io.Writer
	// Cluster is the one cluster the mails are of (--cluster; "": every cluster's
	// jobs): each cluster's are sent once apart from the others' and from every
	// cluster's together, in a store several clusters share.
	Cluster string
	// Send hands one mail to the site's MTA.
	Send func(ctx context.Context, m Mail) error
}

// SendResult counts what a run did.
type SendResult struct {
	Sent, AlreadySent, Failed, Left int
}

// Send mails each report once for the period: a recipient's report of a kind is claimed
// in the store first (a report claimed before, by this run or an earlier one, is not sent
// again), given back if the MTA refused it. A dry run prints them all and claims none.
func Send(ctx context.Context, st *store.Store, p Period, mails []Mail, o SendOptions) (SendResult, error) {
	if o.Max <= 0 {
		o.Max = 500
	}
	var r SendResult
	period := periodValue(p)
	if o.Cluster != "" {
		period += " cluster=" + o.Cluster
	}
	for i, m := range mails {
		if o.DryRun {
			fmt.Fprintf(o.Out, "To: %s\nSubject: %s\n\n%s\n", m.To, m.Subject, m.Body)
			r.Sent++
			continue
		}
		if r.Sent >= o.Max {
			r.Left = len(mails) - i
			break
		}
		ok, err := st.Admin().ClaimMail(ctx, period, m.Kind, m.To)
		if err != nil {
			return r, err
		}
		if !ok {
			r.AlreadySent++
			continue
		}
		if err := o.Send(ctx, m); err != nil {
			r.Failed++
			fmt.Fprintf(o.Out, "persyst: the %s mail to %s not sent: %v\n", m.Kind, m.To, err)
			if err := st.Admin().ReleaseMail(ctx, period, m.Kind, m.To); err != nil {
				return r, err
			}
			continue
		}
		r.Sent++
	}
	return r, nil
}

// ReadOptOut reads the opt-out file (persyst.conf's ReportOptOut): a user name a line,
// blank lines and '#' comments ignored. "" is no file: nobody opted out.
func ReadOptOut(path string) (map[string]bool, error) {
	out := map[string]bool{}
	if path == "" {
		return out, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ReportOptOut: %w", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("%s:%d: %q: want one user name a line", path, i+1, line)
		}
		out[line] = true
	}
	return out, nil
}
