package cgstats

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/persyst/persyst/hostfs"
)

// Parsers are pure: they take the file's content and return values or an error naming the
// line; the caller adds the file name.

// parseSingle parses a one-value file (memory.current, pids.current, ...). ok is false for
// "max" (no number).
func parseSingle(b []byte) (v uint64, ok bool, err error) {
	s := bytes.TrimSpace(b)
	if string(s) == "max" {
		return 0, false, nil
	}
	v, ok = hostfs.ParseUint(s)
	if !ok {
		return 0, false, fmt.Errorf("line 1: want a number, got %q", s)
	}
	return v, true, nil
}

// maxFlatKeys is how many keys one parseFlatKeyed call extracts.
const maxFlatKeys = 8

// flatVals are the values parseFlatKeyed found for the keys asked for.
type flatVals struct {
	keys []string
	v    [maxFlatKeys]uint64
	ok   [maxFlatKeys]bool
}

// get returns key's value, and whether the file had it.
func (f *flatVals) get(key string) (uint64, bool) {
	for i, k := range f.keys {
		if k == key {
			return f.v[i], f.ok[i]
		}
	}
	return 0, false
}

// parseFlatKeyed parses "key value" lines (cpu.stat, memory.stat, memory.events,
// memory.oom_control) and returns the values of keys (at most maxFlatKeys). Every line is
// checked, whether its key is asked for or not. It does not allocate: a daemon parses
// memory.stat's forty lines for every job at every cycle.
func parseFlatKeyed(b []byte, keys ...string) (flatVals, error) {
	out := flatVals{keys: keys[:min(len(keys), maxFlatKeys)]}
	for line := 1; len(b) > 0; line++ {
		var l []byte
		l, b, _ = bytes.Cut(b, []byte{'\n'})
		k, rest := hostfs.Field(l)
		if len(k) == 0 {
			continue
		}
		v, rest := hostfs.Field(rest)
		if len(v) == 0 || len(bytes.TrimSpace(rest)) > 0 {
			return flatVals{}, fmt.Errorf("line %d: want \"key value\", got %q", line, l)
		}
		n, ok := hostfs.ParseUint(v)
		if !ok {
			return flatVals{}, fmt.Errorf("line %d: key %s: want a number, got %q", line, k, v)
		}
		for i, want := range out.keys {
			if string(k) == want {
				out.v[i], out.ok[i] = n, true
			}
		}
	}
	return out, nil
}

// atof parses a decimal fraction "I" or "I.F" (PSI averages: "%lu.%02lu") exactly as
// strconv.ParseFloat would, without allocating: (I·10^len(F) + F) / 10^len(F) is one
// correctly rounded division of exact integers.
func atof(b []byte) (float64, bool) {
	ip, fp, dot := bytes.Cut(b, []byte{'.'})
	if dot && (len(fp) == 0 || len(fp) > 6) || len(ip) > 9 {
		return 0, false
	}
	i, ok := hostfs.ParseUint(ip)
	if !ok {
		return 0, false
	}
	if !dot {
		return float64(i), true
	}
	f, ok := hostfs.ParseUint(fp)
	if !ok {
		return 0, false
	}
	scale := uint64(1)
	for range fp {
		scale *= 10
	}
	return float64(i*scale+f) / float64(scale), true
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
func parsePSI(b []byte) (psi, error) {
	var p psi
	for line := 1; len(b) > 0; line++ {
		var l []byte
		l, b, _ = bytes.Cut(b, []byte{'\n'})
		kind, rest := hostfs.Field(l)
		if len(kind) == 0 {
			continue
		}
		var dst *Pressure
		switch string(kind) {
		case "some":
			dst, p.hasSome = &p.some, true
		case "full":
			dst, p.hasFull = &p.full, true
		default:
			return psi{}, fmt.Errorf("line %d: want some or full, got %q", line, kind)
		}
		var haveAvg, haveTotal bool
		for {
			var kv []byte
			kv, rest = hostfs.Field(rest)
			if len(kv) == 0 {
				break
			}
			k, vs, ok := bytes.Cut(kv, []byte{'='})
			if !ok {
				return psi{}, fmt.Errorf("line %d: want key=value, got %q", line, kv)
			}
			switch string(k) {
			case "avg10":
				v, ok := atof(vs)
				if !ok {
					return psi{}, fmt.Errorf("line %d: avg10: want a number, got %q", line, vs)
				}
				dst.Avg10, haveAvg = v, true
			case "total":
				v, ok := hostfs.ParseUint(vs)
				if !ok {
					return psi{}, fmt.Errorf("line %d: total: want a number, got %q", line, vs)
				}
				dst.TotalUs, haveTotal = v, true
			}
		}
		if !haveAvg || !haveTotal {
			return psi{}, fmt.Errorf("line %d: want avg10= and total=, got %q", line, bytes.TrimSpace(l))
		}
	}
	return p, nil
}

// ParsePressure parses a PSI file (the node's /proc/pressure/{cpu,memory,io}, a cgroup's
// *.pressure): its "some" line, which every such file has, and its "full" line where
// there is one (ok false: none, as in /proc/pressure/cpu before 5.13).
func ParsePressure(b []byte) (some, full Pressure, ok bool, err error) {
	p, err := parsePSI(b)
	if err != nil {
		return some, full, false, err
	}
	if !p.hasSome {
		return some, full, false, fmt.Errorf("no \"some\" line")
	}
	return p.some, p.full, p.hasFull, nil
}
