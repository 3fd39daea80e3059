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
// and the web view and persyst report answered.
func TestSiteInABox(t *testing.T) {
	testenv.Root(t, "the simulated nodes and the tree bind loopback ports; a process per node set needs root's open-file limit")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "bench/site.sh", "300", "6", "--cycle", "2s", "--n", "5")
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
	} {
		if v := num(key); !check(v) {
			t.Errorf("%s=%v", key, v)
		}
	}
}
