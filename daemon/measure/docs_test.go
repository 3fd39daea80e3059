package measure

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/persyst/persyst/perfevents"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/metrics.md")

const (
	docsPath  = "../../docs/metrics.md"
	docsBegin = "     do not edit by hand -->\n"
	docsEnd   = "<!-- end of metrics -->"
)

// metricsTable renders every registered source and its metrics (perf events from the
// catalog) as the Markdown table of docs/metrics.md.
func metricsTable() string {
	var b strings.Builder
	b.WriteString("| source | default | metric | kind | unit | what it is |\n|---|---|---|---|---|---|\n")
	for _, r := range Sources() {
		def := "on"
		if !r.Default {
			def = "off"
		}
		if r.Name == perfRegistration.Name {
			for _, e := range perfevents.Catalog() {
				unit := "count"
				if e.Name == "task-clock" {
					unit = "ns"
				}
				fmt.Fprintf(&b, "| %s | %s | `%s` | counter | %s | perf %s event, per CPU of the job |\n", r.Name, def, e.Name, unit, e.Kind)
			}
			b.WriteString("| perf | on | raw floating-point and memory events | counter | count | where the processor has a table (perfevents), per CPU |\n")
			continue
		}
		for _, m := range r.Metrics {
			fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s | %s |\n", r.Name, def, m.Name, m.Kind, m.Unit, m.Help)
		}
	}
	return b.String()
}

// TestDocsListEveryMetric: docs/metrics.md lists every source and metric of the registry,
// as generated (-update rewrites it).
func TestDocsListEveryMetric(t *testing.T) {
	b, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, docsBegin), strings.Index(doc, docsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated section (%q ... %q)", docsPath, docsBegin, docsEnd)
	}
	want := metricsTable()
	if got := doc[i+len(docsBegin) : j]; got != want {
		if *update {
			if err := os.WriteFile(docsPath, []byte(doc[:i+len(docsBegin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s is not in step with the source registry; run go test ./daemon/measure -run TestDocsListEveryMetric -update", docsPath)
	}
}
