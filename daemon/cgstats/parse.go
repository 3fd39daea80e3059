package cgstats

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Parsers are pure: they take the file's content and return values or an error naming the
// line; the caller adds the file name.

// parseSingle parses a one-value file (memory.current, pids.current, ...). ok is false for
// "max" (no number).
func parseSingle(r io.Reader) (v uint64, ok bool, err error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, false, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false, nil
	}
	v, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("line 1: want a number, got %q", s)
	}
	return v, true, nil
}

// parseFlatKeyed parses "key value" lines (cpu.stat, memory.stat, memory.events,
// memory.oom_control).
func parseFlatKeyed(r io.Reader) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		if strings.TrimSpace(t) == "" {
			continue
		}
		f := strings.Fields(t)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"key value\", got %q", line, t)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: key %s: want a number, got %q", line, f[0], f[1])
		}
		out[f[0]] = v
	}
	return out, sc.Err()
}

// ioTotals are I/O counters summed over devices.
type ioTotals struct{ rbytes, wbytes, rios, wios uint64 }

// parseIOStat parses v2 io.stat: "MAJ:MIN key=value ..." per device. Unknown keys are
// skipped. An empty file is zero I/O (the file exists only where the io controller is on).
func parseIOStat(r io.Reader) (ioTotals, error) {
	var t ioTotals
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if !strings.Contains(f[0], ":") || strings.Contains(f[0], "=") {
			return ioTotals{}, fmt.Errorf("line %d: want MAJ:MIN first, got %q", line, f[0])
		}
		for _, kv := range f[1:] {
			k, vs, ok := strings.Cut(kv, "=")
			if !ok {
				return ioTotals{}, fmt.Errorf("line %d: want key=value, got %q", line, kv)
			}
			v, err := strconv.ParseUint(vs, 10, 64)
			if err != nil {
				return ioTotals{}, fmt.Errorf("line %d: key %s: want a number, got %q", line, k, vs)
			}
			switch k {
			case "rbytes":
				t.rbytes += v
			case "wbytes":
				t.wbytes += v
			case "rios":
				t.rios += v
			case "wios":
				t.wios += v
			}
		}
	}
	return t, sc.Err()
}

// parseBlkio parses a v1 blkio.throttle.io_service_bytes[_recursive] or io_serviced file:
// "MAJ:MIN Op value" lines and a final "Total value". It returns the Read and Write sums
// over devices; ok is false when the file has no "Total" line (empty: the kernel does not
// account I/O there), which is "not measured", not zero.
func parseBlkio(r io.Reader) (read, write uint64, ok bool, err error) {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
			continue
		case len(f) == 2 && f[0] == "Total":
			if _, err := strconv.ParseUint(f[1], 10, 64); err != nil {
				return 0, 0, false, fmt.Errorf("line %d: Total: want a number, got %q", line, f[1])
			}
			ok = true
		case len(f) == 3 && strings.Contains(f[0], ":"):
			v, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				return 0, 0, false, fmt.Errorf("line %d: %s %s: want a number, got %q", line, f[0], f[1], f[2])
			}
			switch f[1] {
			case "Read":
				read += v
			case "Write":
				write += v
			}
		default:
			return 0, 0, false, fmt.Errorf("line %d: want \"MAJ:MIN Op value\" or \"Total value\", got %q", line, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, false, err
	}
	return read, write, ok, nil
}

// psi is a parsed *.pressure file; hasFull is false on kernels without a "full" line
// (cpu.pressure before 5.13).
type psi struct {
	some, full       Pressure
	hasSome, hasFull bool
}

// parsePSI parses "some|full avg10=X avg60=X avg300=X total=N" lines.
func parsePSI(r io.Reader) (psi, error) {
	var p psi
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var dst *Pressure
		switch f[0] {
		case "some":
			dst, p.hasSome = &p.some, true
		case "full":
			dst, p.hasFull = &p.full, true
		default:
			return psi{}, fmt.Errorf("line %d: want some or full, got %q", line, f[0])
		}
		var haveAvg, haveTotal bool
		for _, kv := range f[1:] {
			k, vs, ok := strings.Cut(kv, "=")
			if !ok {
				return psi{}, fmt.Errorf("line %d: want key=value, got %q", line, kv)
			}
			switch k {
			case "avg10":
				v, err := strconv.ParseFloat(vs, 64)
				if err != nil {
					return psi{}, fmt.Errorf("line %d: avg10: want a number, got %q", line, vs)
				}
				dst.Avg10, haveAvg = v, true
			case "total":
				v, err := strconv.ParseUint(vs, 10, 64)
				if err != nil {
					return psi{}, fmt.Errorf("line %d: total: want a number, got %q", line, vs)
				}
				dst.TotalUs, haveTotal = v, true
			}
		}
		if !haveAvg || !haveTotal {
			return psi{}, fmt.Errorf("line %d: want avg10= and total=, got %q", line, sc.Text())
		}
	}
	return p, sc.Err()
}
