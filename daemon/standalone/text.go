package standalone

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/persyst/persyst/daemon/measure"
)

// WriteText prints the measured totals for a terminal (at most 80 columns). It stands in
// for the digest until the property engine exists.
func WriteText(w io.Writer, r Result) {
	s := r.Summary
	t := s.Totals
	var b strings.Builder
	status := fmt.Sprintf("exit status %d", r.ExitStatus)
	if r.Signal != "" {
		status = "killed by " + r.Signal
	}
	fmt.Fprintf(&b, "persyst: %s: %s, %.2f s measured, %d samples\n", strings.Join(trim(r.Command), " "), status, s.Seconds, s.Samples)
	fmt.Fprintf(&b, "  mode %s, CPUs %s\n", r.Mode, s.CPUs)
	if v, ok := t["task-clock"]; ok {
		fmt.Fprintf(&b, "  task-clock  %s", secs(v/1e9))
		var per []string
		for _, c := range s.PerCPU {
			if x, ok := c.Values["task-clock"]; ok {
				per = append(per, fmt.Sprintf("CPU %d %s", c.CPU, secs(x/1e9)))
			}
		}
		if len(per) > 0 && len(per) <= 4 {
			fmt.Fprintf(&b, " (%s)", strings.Join(per, ", "))
		}
		b.WriteByte('\n')
	}
	if u, ok := t[measure.CPUUserSeconds]; ok {
		fmt.Fprintf(&b, "  CPU time    user %s, system %s", secs(u), secs(t[measure.CPUSystemSeconds]))
		if n, ok := t[measure.CPUThrottled]; ok && n > 0 {
			fmt.Fprintf(&b, ", throttled %s", secs(t[measure.CPUThrottledSecs]))
		}
		b.WriteByte('\n')
	}
	if p, ok := t[measure.MemPeakBytes]; ok {
		fmt.Fprintf(&b, "  memory      peak %s", bytes(p))
		if f, ok := t[measure.PageFaults]; ok {
			fmt.Fprintf(&b, ", page faults %.0f (major %.0f)", f, t[measure.MajorPageFaults])
		}
		if n, ok := t[measure.OOMKills]; ok && n > 0 {
			fmt.Fprintf(&b, ", OOM kills %.0f", n)
		}
		b.WriteByte('\n')
	}
	for _, io := range []struct{ what, bytes, calls string }{
		{"written", measure.WriteChars, measure.WriteSyscalls},
		{"read", measure.ReadChars, measure.ReadSyscalls},
	} {
		by, ok1 := t[io.bytes]
		n, ok2 := t[io.calls]
		if !ok1 || !ok2 {
			continue
		}
		fmt.Fprintf(&b, "  %-10s  %s in %.0f calls", io.what, bytes(by), n)
		if n > 0 {
			fmt.Fprintf(&b, " (mean %s)", bytes(by/n))
		}
		b.WriteByte('\n')
	}
	if o, ok := t["syscalls:sys_enter_openat"]; ok {
		o += t["syscalls:sys_enter_open"]
		fmt.Fprintf(&b, "  files       %.0f opened, %.0f closed\n", o, t["syscalls:sys_enter_close"])
	}
	if rx, ok := t[measure.NetRxBytes]; ok {
		fmt.Fprintf(&b, "  network     received %s, sent %s\n", bytes(rx), bytes(t[measure.NetTxBytes]))
	}
	for _, l := range r.Limits {
		wrap(&b, "note: "+l)
	}
	// Not measured, grouped by reason.
	byWhy := map[string][]string{}
	for name, why := range s.NotMeasured {
		byWhy[why] = append(byWhy[why], name)
	}
	whys := make([]string, 0, len(byWhy))
	for why := range byWhy {
		whys = append(whys, why)
	}
	sort.Strings(whys)
	for _, why := range whys {
		names := byWhy[why]
		sort.Strings(names)
		wrap(&b, fmt.Sprintf("not measured: %s: %s", strings.Join(names, ", "), why))
	}
	io.WriteString(w, b.String())
}

func trim(argv []string) []string {
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if len(a) > 30 {
			a = a[:27] + "..."
		}
		out = append(out, a)
		if len(out) == 4 && len(argv) > 4 {
			out = append(out, "...")
			break
		}
	}
	return out
}

// wrap writes s folded at 80 columns, continuation lines indented.
func wrap(b *strings.Builder, s string) {
	const width = 80
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = "  " + word
		case len(line)+1+len(word) > width:
			b.WriteString(line + "\n")
			line = "      " + word
		default:
			line += " " + word
		}
	}
	if line != "" {
		b.WriteString(line + "\n")
	}
}

func secs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f s", v)
	case v >= 1:
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.0f ms", v*1000)
}

func bytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
