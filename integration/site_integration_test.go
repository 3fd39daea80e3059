package integration

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/internal/testenv"
)

// TestSiteInABox: bench/site.sh plays a small site against the real tree (300 simulated
// nodes with the node daemons' uplink and TLS identities, one collector, the frontend
// with its database, a fake slurmrestd), a 60 s cycle every 2 s for 6 cycles, and prints
// its summary: every cycle the tree routed and every final report reached a database,
// and the web view and persyst report answered while it ran. Seven hostile nodes with
// the site's own certificates (malformed, oversized, another node's records, a job not
// theirs, forged reports, a reconnection storm, no authentication) are refused and
// counted, and the site does not notice them.
func TestSiteInABox(t *testing.T) {
	testenv.Root(t, "the simulated nodes and the tree bind loopback ports; a process per node set needs root's open-file limit")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "bench/site.sh", "300", "6", "--cycle", "2s", "--n", "5", "--hostile", "7")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench/site.sh: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	t.Log(last)
	if !strings.HasPrefix(last, "site: ") {
		t.Fatalf("no summary line:\n%s", out)
	}
	num := func(key string) float64 {
		m := regexp.MustCompile(` ` + key + `=([0-9.]+)`).FindStringSubmatch(last)
		if m == nil {
			t.Fatalf("the summary has no %s: %s", key, last)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	for key, check := range map[string]func(float64) bool{
		"nodes":                         func(v float64) bool { return v == 300 },
		"cycles":                        func(v float64) bool { return v >= 5 },
		"jobs":                          func(v float64) bool { return v > 0 },
		"records":                       func(v float64) bool { return v > 0 },
		"job_cycles_lost":               func(v float64) bool { return v == 0 },
		"reports_lost":                  func(v float64) bool { return v == 0 },
		"frontend_cpu_s_per_cycle":      func(v float64) bool { return v > 0 },
		"collector_cpu_s_per_cycle_max": func(v float64) bool { return v > 0 },
		"site_p95_ms":                   func(v float64) bool { return v > 0 },
		"report_p95_ms":                 func(v float64) bool { return v > 0 },
		"late":                          func(v float64) bool { return v == 0 },
		"store_delay_p95_s":             func(v float64) bool { return v > 0 && v <= 8 },
		// Seven hostile nodes, one of each kind, beside the site: everything they sent
		// was refused, none of it reached a database, and each stage counted its own.
		"hostile_sent":           func(v float64) bool { return v > 0 },
		"hostile_taken":          func(v float64) bool { return v == 0 },
		"hostile_stored":         func(v float64) bool { return v == 0 },
		"tree_refused_handshake": func(v float64) bool { return v > 0 },
		"tree_refused_storm":     func(v float64) bool { return v > 0 },
		"tree_refused_call":      func(v float64) bool { return v > 0 },
	} {
		if v := num(key); !check(v) {
			t.Errorf("%s=%v", key, v)
		}
	}
	if sent, refused := num("hostile_sent"), num("hostile_refused"); refused != sent {
		t.Errorf("hostile nodes sent %v, %v refused: want every one", sent, refused)
	}
}
