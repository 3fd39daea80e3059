// Package vmnode holds persyst's tests on a node as production runs it: systemd as PID 1
// on a pure cgroup v2 hierarchy, Slurm's daemons as systemd services with
// CgroupPlugin=cgroup/v2, and persyst's package installed with dpkg and started by its own
// units. scripts/vm.sh (make test-vm) builds such a node as a virtual machine, and runs
// there the tests of this package built with -tags vmnode (node_test.go); they need that
// node and are compiled nowhere else.
//
// This file holds what those tests read from systemd's tools, pure and tested on any
// machine.
package vmnode

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// exposureLine is systemd-analyze security's verdict on a unit:
// "→ Overall exposure level for persyst-daemon.service: 5.4 MEDIUM 😐".
var exposureLine = regexp.MustCompile(`Overall exposure level for (\S+): ([0-9]+(?:\.[0-9]+)?) ([A-Z]+)`)

// Exposure reads `systemd-analyze security UNIT`'s overall exposure figure for unit (0.0,
// the most protected, to 10.0) and its word for it (OK, EXPOSED, MEDIUM, UNSAFE...).
func Exposure(out, unit string) (float64, string, error) {
	for _, m := range exposureLine.FindAllStringSubmatch(out, -1) {
		if m[1] != unit {
			continue
		}
		f, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return 0, "", fmt.Errorf("systemd-analyze security %s: exposure %q: %w", unit, m[2], err)
		}
		return f, m[3], nil
	}
	return 0, "", fmt.Errorf("systemd-analyze security %s: no overall exposure level for it in its output", unit)
}

// Exposed is the lines of `systemd-analyze security UNIT`'s output for what the unit
// leaves open (marked ✗, with their exposure), one per line.
func Exposed(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "✗") {
			b.WriteString(strings.Join(strings.Fields(l), " ") + "\n")
		}
	}
	return b.String()
}

// Show parses `systemctl show` output (KEY=VALUE lines) into a map; a later line with a
// key wins, as it does in systemctl.
func Show(out string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// Span reads a time span as systemctl show prints it ("30s", "1min 30s", "500ms", or
// microseconds as a bare number; "infinity" and "0" are no span).
func Span(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "infinity" {
		return 0, nil
	}
	if us, err := strconv.ParseUint(s, 10, 64); err == nil {
		return time.Duration(us) * time.Microsecond, nil
	}
	var total time.Duration
	for _, f := range strings.Fields(s) {
		if strings.HasSuffix(f, "min") {
			f = strings.TrimSuffix(f, "min") + "m"
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return 0, fmt.Errorf("time span %q: %w", s, err)
		}
		total += d
	}
	return total, nil
}
