package siteview

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/collectors/store/storetest"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/properties"
)

var now = time.Date(2026, 12, 4, 15, 30, 0, 0, time.UTC) // a Friday

func TestParsePeriod(t *testing.T) {
	d := func(s string) time.Time {
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	for _, c := range []struct {
		in, from, to string // to: the day after the last
		err          string
	}{
		{"week", "2026-11-30", "2026-12-05", ""},
		{"month", "2026-12-01", "2026-12-05", ""},
		{"quarter", "2026-10-01", "2026-12-05", ""},
		{"year", "2026-01-01", "2026-12-05", ""},
		{"last-week", "2026-11-23", "2026-11-30", ""},
		{"last-month", "2026-11-01", "2026-12-01", ""},
		{"last-quarter", "2026-07-01", "2026-10-01", ""},
		{"last-year", "2025-01-01", "2026-01-01", ""},
		{"7d", "2026-11-28", "2026-12-05", ""},
		{"2026", "2026-01-01", "2027-01-01", ""},
		{"2026-Q3", "2026-07-01", "2026-10-01", ""},
		{"2026-11", "2026-11-01", "2026-12-01", ""},
		{"2026-W48", "2026-11-23", "2026-11-30", ""},
		{"2026-W01", "2025-12-29", "2026-01-05", ""},
		{"2026-11-03", "2026-11-03", "2026-11-04", ""},
		{"2026-10-01..2026-12-31", "2026-10-01", "2027-01-01", ""},
		{"2026-Q5", "", "", "quarter"},
		{"2026-W54", "", "", "week"},
		{"2025-W53", "", "", "no week 53"},
		{"2026-12-31..2026-10-01", "", "", "ends before"},
		{"0d", "", "", "1d to 3660d"},
		{"1990..2030", "", "", "YYYY-MM-DD"},
		{"yesterday", "", "", "want week"},
		{"2000-01-01..2026-01-01", "", "", "10 years"},
	} {
		p, err := ParsePeriod(c.in, now)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if !p.From.Equal(d(c.from)) || !p.To.Equal(d(c.to)) || p.Name != c.in {
			t.Errorf("%q: %s..%s (%s), want %s..%s", c.in, p.From, p.To, p.Name, c.from, c.to)
		}
	}
}

// hostile are names as Slurm's users may give jobs (and a site its accounts).
var hostile = []string{`chem,"bio"`, "a\nb", `<script>alert(1)</script>`, `x'; DROP TABLE jobs; --`, "tab\there", "ünïcode ✓", ""}

func hostileTable() Table {
	t := Table{Name: "t", Columns: []string{"name", "jobs", "hours", "users"}}
	for i, h := range hostile {
		t.Rows = append(t.Rows, []any{h, int64(i), float64(i) / 3, []Named{{Name: h, CPUHours: 1.5}}})
	}
	return t
}

// TestCSVAndJSONKeepNames: any name comes out intact in CSV and JSON, numbers in full.
func TestCSVAndJSONKeepNames(t *testing.T) {
	tb := hostileTable()
	var b bytes.Buffer
	if err := WriteCSV(&b, tb); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(hostile)+1 || !cmp.Equal(recs[0], tb.Columns) {
		t.Fatalf("CSV: %q", recs)
	}
	for i, h := range hostile {
		if recs[i+1][0] != h || recs[i+1][2] != strconvF(float64(i)/3) || !strings.HasPrefix(recs[i+1][3], h+" (") {
			t.Errorf("CSV row %d: %q, want %q", i, recs[i+1], h)
		}
	}
	b.Reset()
	if err := WriteJSON(&b, tb); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Name  string  `json:"name"`
		Jobs  int64   `json:"jobs"`
		Hours float64 `json:"hours"`
		Users []Named `json:"users"`
	}
	if err := json.Unmarshal(b.Bytes(), &rows); err != nil {
		t.Fatalf("JSON: %v\n%s", err, b.String())
	}
	for i, h := range hostile {
		if rows[i].Name != h || rows[i].Jobs != int64(i) || rows[i].Hours != float64(i)/3 || len(rows[i].Users) != 1 || rows[i].Users[0].Name != h {
			t.Errorf("JSON row %d: %+v, want %q", i, rows[i], h)
		}
	}
	if !strings.Contains(b.String(), `{"name": "chem,\"bio\"", "jobs": 0, "hours": 0,`) {
		t.Errorf("JSON keys not in the columns' order:\n%s", b.String())
	}
	b.Reset()
	if err := WriteJSON(&b, Table{Columns: []string{"a"}}); err != nil || b.String() != "[]\n" {
		t.Errorf("no rows: %q, %v", b.String(), err)
	}
}

func strconvF(f float64) string { return cell(f, true) }

// TestTextOneLinePerRow: a name's newline or tab cannot break the terminal's table.
func TestTextOneLinePerRow(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, hostileTable()); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != len(hostile)+1 {
		t.Errorf("%d lines, want %d:\n%s", n, len(hostile)+1, b.String())
	}
	if !strings.Contains(b.String(), `a\nb`) {
		t.Errorf("the newline is not shown escaped:\n%s", b.String())
	}
}

// TestChart: a bar per week with hours, the used ones never above the allocated, and a
// label per quarter; nothing but SVG.
func TestChart(t *testing.T) {
	var weeks []store.Week
	from := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 53 {
		u := store.Usage{CPUHours: float64(i), CPUUsedHours: float64(i) / 2}
		if i == 10 {
			u.CPUUsedHours = 99 // more than allocated: drawn as the allocated
		}
		weeks = append(weeks, store.Week{From: from.AddDate(0, 0, 7*i), Usage: u})
	}
	svg := Chart(weeks, CPU)
	if n := strings.Count(svg, `class="allocated"`); n != 52 {
		t.Errorf("%d bars allocated, want 52 (week 0 had none)", n)
	}
	if n := strings.Count(svg, `>2026-`); n != 4 {
		t.Errorf("%d quarter labels, want 4:\n%s", n, svg)
	}
	if !strings.HasPrefix(svg, "<svg") || strings.Contains(svg, "<script") || strings.Contains(svg, "href") {
		t.Errorf("not a plain SVG:\n%.300s", svg)
	}
	if Chart(nil, GPU) == "" || strings.Contains(Chart(nil, GPU), "rect") {
		t.Error("an empty chart draws bars")
	}
	weeks[3].EnergyKWh, weeks[3].EnergyJobs = 120, 4
	if svg := Chart(weeks, Energy); strings.Count(svg, `class="used"`) != 1 || !strings.Contains(svg, `data-hours="120"`) || !strings.Contains(svg, "kWh per week") {
		t.Errorf("the energy trend: want one bar of 120 kWh:\n%.600s", svg)
	}
}

// TestMails: one report per user above the threshold, with their findings and advice;
// one per coordinator per account; none to those opted out; each sent once for the
// period however often the run comes; a failed send is tried again next time.
func TestMails(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, store.Options{Now: func() time.Time { return now }})
	idle := properties.Result{Key: "idle_cores", Name: "Allocated CPUs left idle", Assessed: true, TimeShare: 1, MeanSeverity: 0.9, Finding: true}
	for i, j := range []struct {
		user, account string
		cpus          int
		use           float64 // mean CPU use, %
	}{
		{"alice", "chem", 64, 10}, {"alice", "chem", 32, 20}, {"bob", "chem", 8, 95}, {"carol", "phys", 128, 5}, {"dave", "phys", 4, 1},
	} {
		end := now.AddDate(0, 0, -20)
		r := digest.Report{Schema: digest.SchemaVersion, JobID: uint32(100 + i), Nodes: []string{"n1"}, NNodes: 1, CPUs: j.cpus,
			Start: end.Add(-10 * time.Hour), End: end, Seconds: 36000, Findings: []properties.Result{},
			Properties: []properties.Result{{Key: "cpu_user_pct", Assessed: true, Deciles: []float64{j.use, j.use}},
				{Key: "cpu_system_pct", Assessed: true, Deciles: []float64{0, 0}}}}
		if j.use < 50 {
			r.Findings = []properties.Result{idle}
		}
		if i == 0 {
			r.Energy = &digest.Energy{Joules: 36e6, KWh: 10, Parts: map[string]float64{"cpu": 36e6}}
		}
		if err := st.Keep(ctx, store.Job{User: j.user, Account: j.account, Start: r.Start, End: end}, r); err != nil {
			t.Fatal(err)
		}
	}
	p, err := ParsePeriod("last-month", now)
	if err != nil {
		t.Fatal(err)
	}
	o := MailOptions{Period: p, MinWastedHours: 50, OptOut: map[string]bool{"carol": true},
		Coordinators: map[string][]string{"erin": {"chem"}, "carol": {"phys"}}, WebURL: "https://hpc.example/persyst",
		Advice: func(key string) string { return "Request fewer CPUs (" + key + ")." }}
	mails, err := Mails(ctx, st, o)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mails {
		got = append(got, m.Kind+" "+m.To)
	}
	// alice: 64×10×0.9 + 32×10×0.8 = 832 idle; carol opted out; bob 4, dave 39.6: under
	// 50. chem (836) to erin; phys's coordinator carol opted out.
	if d := cmp.Diff([]string{"user alice", "account:chem erin"}, got); d != "" {
		t.Fatalf("mails (-want +got):\n%s", d)
	}
	for _, want := range []string{"2 jobs, 960 CPU-hours: 832 idle (87 %", "1. Allocated CPUs left idle: 960 CPU-hours in 2 jobs",
		"Request fewer CPUs (idle_cores).", "https://hpc.example/persyst/?period=2026-11-01..2026-11-30&user=alice", "2026-11-01 to 2026-11-30",
		"energy: 10 kWh, of 1 job whose energy was measured"} {
		if !strings.Contains(mails[0].Body, want) {
			t.Errorf("alice's mail lacks %q:\n%s", want, mails[0].Body)
		}
	}
	if !strings.Contains(mails[1].Body, "alice") || !strings.Contains(mails[1].Body, "bob") || strings.Index(mails[1].Body, "alice") > strings.Index(mails[1].Body, "  bob") {
		t.Errorf("chem's mail does not list alice before bob:\n%s", mails[1].Body)
	}
	var sent []string
	fail := true
	send := SendOptions{Out: &bytes.Buffer{}, Send: func(_ context.Context, m Mail) error {
		if m.To == "erin" && fail {
			return errors.New("MTA down")
		}
		sent = append(sent, m.To)
		return nil
	}}
	var dry bytes.Buffer
	if r, err := Send(ctx, st, p, mails, SendOptions{DryRun: true, Out: &dry}); err != nil || r.Sent != 2 || strings.Count(dry.String(), "Subject: persyst:") != 2 {
		t.Errorf("dry run: %+v, %v\n%s", r, err, dry.String())
	}
	r, err := Send(ctx, st, p, mails, send)
	if err != nil || r.Sent != 1 || r.Failed != 1 {
		t.Errorf("first run: %+v, %v", r, err)
	}
	fail = false
	if r, err := Send(ctx, st, p, mails, send); err != nil || r.Sent != 1 || r.AlreadySent != 1 {
		t.Errorf("second run: %+v, %v", r, err)
	}
	if r, err := Send(ctx, st, p, mails, send); err != nil || r.Sent != 0 || r.AlreadySent != 2 {
		t.Errorf("third run: %+v, %v", r, err)
	}
	if d := cmp.Diff([]string{"alice", "erin"}, sent); d != "" {
		t.Errorf("sent (-want +got):\n%s", d)
	}
	// One cluster's mails (--cluster) are sent once apart from every cluster's.
	oneCluster := send
	oneCluster.Cluster = "c2"
	if r, err := Send(ctx, st, p, mails, oneCluster); err != nil || r.Sent != 2 || r.AlreadySent != 0 {
		t.Errorf("c2's mails: %+v, %v", r, err)
	}
	if r, err := Send(ctx, st, p, mails, oneCluster); err != nil || r.Sent != 0 || r.AlreadySent != 2 {
		t.Errorf("c2's mails again: %+v, %v", r, err)
	}
	sent = sent[:2]
	// A cap: one mail a run.
	p2, _ := ParsePeriod("2026-11-01..2026-11-29", now)
	if r, err := Send(ctx, st, p2, mails, SendOptions{Max: 1, Out: &bytes.Buffer{}, Send: send.Send}); err != nil || r.Sent != 1 || r.Left != 1 {
		t.Errorf("capped run: %+v, %v", r, err)
	}
}
