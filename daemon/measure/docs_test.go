package measure

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/persyst/persyst/internal/docsection"
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
				if strings.HasPrefix(e.Name, perfevents.SyscallPrefix) {
					fmt.Fprintf(&b, "| syscalls (else perf) | on | `%s` | counter | count | system call entries, per CPU of the job: eBPF where the kernel allows it, else the perf tracepoint |\n", e.Name)
					continue
				}
				what := ""
				if e.Filter != "" {
					what = " counting what the filter `" + e.Filter + "` keeps"
				}
				fmt.Fprintf(&b, "| %s | %s | `%s` | counter | %s | perf %s event%s, per CPU of the job |\n", r.Name, def, e.Name, unit, e.Kind, what)
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
	docsection.Check(t, docsPath, docsBegin, docsEnd, metricsTable(), *update, "go test ./daemon/measure -run TestDocsListEveryMetric -update")
}
