// Package nvml measures NVIDIA GPUs through persyst-nvml, a small C helper (helper.c)
// that loads the driver's libnvidia-ml.so.1 at run time.
//
// Why a helper process: the daemon is a static Go binary built without cgo, and NVML is
// a C library only GPU nodes have. go-nvml needs cgo; purego stays cgo-free but links
// every node's binary dynamically against glibc and still runs NVML's calls on the
// daemon's threads, where a call into a hung driver (Xid 79, "fallen off the bus") blocks
// forever and cannot be cancelled. In a process of its own a hung call costs a kill: the
// daemon gives each request a deadline, stops the helper when it passes, and reports the
// GPUs "not measured" until a new helper answers.
//
// The helper integrates each GPU's utilization and GPM activity every few seconds and answers
// "read" with cumulative values, so any number of jobs, read at any times, take their
// differences (Helper.Read); parse below is the protocol's one reader.
package nvml

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Device is a GPU as the helper found it at start.
type Device struct {
	Index  int    // NVML's index (PCI bus order)
	UUID   string // "GPU-…" ("MIG-…" for a MIG instance)
	Bus    string // PCI bus id, "00000000:3B:00.0"
	Minor  int    // /dev/nvidiaN; -1: unknown
	Memory uint64 // bytes
	Name   string
	MIG    bool // MIG mode on: device-wide utilization is not available
	GPM    bool // GPU performance monitoring (Hopper and newer): SM activity, tensor, DRAM
	// Parent, for a MIG instance, is its GPU's index (-1: a GPU), GI its GPU instance.
	Parent int
	GI     int
	// Vendor is "NVIDIA" (persyst-nvml's devices) or "AMD" (read through the amdgpu
	// driver's sysfs: daemon/measure's AMDGPUs).
	Vendor string
}

// Hello is what the helper says when it starts.
type Hello struct {
	Driver  string
	Absent  []string // NVML functions this driver lacks
	Devices []Device
}

// Unavailable is the helper's "fail" answer: no library, no driver, no GPU it may open.
type Unavailable struct{ What, Why string }

func (u *Unavailable) Error() string {
	switch u.What {
	case "library":
		return "no NVIDIA driver: " + u.Why
	case "init":
		return "NVML did not start: " + u.Why
	}
	return "NVML: " + u.What + ": " + u.Why
}

// Reading is one GPU at one read. Values holds the helper's keys: cumulative seconds of
// activity (busy, sm, occupancy, tensor, dram, gpm_busy) with the seconds each covers
// (busy: util_s; the others: KEY_s), energy (mJ, cumulative), power (mW, now), power_ns
// and thermal_ns (cumulative throttled time), mem (bytes used now), mem_peak (since the
// previous read), reasons (clock event reasons seen since the previous read, a bit
// mask), tick_us (what the last sampling of this GPU took).
type Reading struct {
	Index int
	Time  float64 // the helper's CLOCK_MONOTONIC seconds
	// Values by key; NotMeasured: keys the helper could not read, with NVML's reason.
	Values      map[string]float64
	NotMeasured map[string]string
	// Procs are the GPU's compute processes (ProcsWhy: why not listed).
	Procs    []Proc
	ProcsWhy string
}

// Proc is a process using a GPU.
type Proc struct {
	PID    int
	Memory uint64 // bytes of GPU memory it holds
}

// maxLine bounds a protocol line (64 processes of a GPU fit).
const maxLine = 8192

// Version is the protocol version this package speaks.
const Version = 1

// parseHello reads the helper's greeting up to "ready N" (or "fail").
func parseHello(r *bufio.Reader) (Hello, error) {
	var h Hello
	line, err := readLine(r)
	if err != nil {
		return h, fmt.Errorf("persyst-nvml said nothing: %w", err)
	}
	if line != "persyst-nvml 1" {
		return h, fmt.Errorf("persyst-nvml: want protocol \"persyst-nvml %d\", got %q", Version, line)
	}
	for n := 2; ; n++ {
		line, err := readLine(r)
		if err != nil {
			return h, fmt.Errorf("persyst-nvml greeting, line %d: %w", n, err)
		}
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "driver":
			h.Driver = rest
		case "absent":
			h.Absent = append(h.Absent, rest)
		case "device":
			d, err := parseDevice(rest)
			if err != nil {
				return h, fmt.Errorf("persyst-nvml greeting, line %d: %w", n, err)
			}
			h.Devices = append(h.Devices, d)
		case "ready":
			c, err := strconv.Atoi(rest)
			if err != nil || c != len(h.Devices) {
				return h, fmt.Errorf("persyst-nvml greeting, line %d: %q after %d devices", n, line, len(h.Devices))
			}
			return h, nil
		case "fail":
			what, why, _ := strings.Cut(rest, " ")
			return h, &Unavailable{What: what, Why: why}
		default:
			return h, fmt.Errorf("persyst-nvml greeting, line %d: unknown %q", n, word)
		}
	}
}

// indexedLine splits a "device" or "gpu" line's rest, "I key=value...", into its index
// and fields.
func indexedLine(what, s string) (int, [][2]string, error) {
	idx, rest, _ := strings.Cut(s, " ")
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 {
		return 0, nil, fmt.Errorf("%s index %q", what, idx)
	}
	var fields [][2]string
	for _, kv := range strings.Fields(rest) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return i, nil, fmt.Errorf("%s %d: field %q is not key=value", what, i, kv)
		}
		fields = append(fields, [2]string{k, v})
	}
	return i, fields, nil
}

func parseDevice(s string) (Device, error) {
	d := Device{Minor: -1, Parent: -1, Vendor: "NVIDIA"}
	var fields [][2]string
	var err error
	if d.Index, fields, err = indexedLine("device", s); err != nil {
		return d, err
	}
	for _, f := range fields {
		k, v := f[0], f[1]
		switch k {
		case "uuid":
			d.UUID = v
		case "bus":
			d.Bus = v
		case "name":
			d.Name = strings.ReplaceAll(v, "_", " ")
		case "minor":
			if d.Minor, err = strconv.Atoi(v); err != nil || d.Minor < 0 {
				return d, fmt.Errorf("device %d: minor %q", d.Index, v)
			}
		case "memory":
			if d.Memory, err = strconv.ParseUint(v, 10, 64); err != nil {
				return d, fmt.Errorf("device %d: memory %q", d.Index, v)
			}
		case "parent", "gi":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return d, fmt.Errorf("device %d: %s %q", d.Index, k, v)
			}
			if k == "parent" {
				d.Parent = n
			} else {
				d.GI = n
			}
		case "mig":
			d.MIG = v == "1"
		case "gpm":
			d.GPM = v == "1"
		}
	}
	return d, nil
}

// parseRead reads one answer to "read": a "gpu" line per GPU, then "done".
func parseRead(r *bufio.Reader) ([]Reading, error) {
	var out []Reading
	for n := 1; ; n++ {
		line, err := readLine(r)
		if err != nil {
			return out, fmt.Errorf("persyst-nvml read, line %d: %w", n, err)
		}
		if line == "done" {
			return out, nil
		}
		word, rest, _ := strings.Cut(line, " ")
		if word != "gpu" {
			return out, fmt.Errorf("persyst-nvml read, line %d: want gpu or done, got %q", n, word)
		}
		g, err := parseGPU(rest)
		if err != nil {
			return out, fmt.Errorf("persyst-nvml read, line %d: %w", n, err)
		}
		out = append(out, g)
	}
}

func parseGPU(s string) (Reading, error) {
	g := Reading{Values: map[string]float64{}, NotMeasured: map[string]string{}}
	var fields [][2]string
	var err error
	if g.Index, fields, err = indexedLine("gpu", s); err != nil {
		return g, err
	}
	for _, f := range fields {
		k, v := f[0], f[1]
		if why, ok := strings.CutPrefix(v, "!"); ok {
			why = strings.ReplaceAll(why, "_", " ")
			if k == "procs" {
				g.ProcsWhy = why
			} else {
				g.NotMeasured[k] = why
			}
			continue
		}
		switch k {
		case "procs":
			if g.Procs, err = parseProcs(v); err != nil {
				return g, fmt.Errorf("gpu %d: %w", g.Index, err)
			}
		case "reasons":
			x, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				return g, fmt.Errorf("gpu %d: reasons %q", g.Index, v)
			}
			g.Values[k] = float64(x)
		case "t":
			if g.Time, err = strconv.ParseFloat(v, 64); err != nil {
				return g, fmt.Errorf("gpu %d: t %q", g.Index, v)
			}
		default:
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				// NaN and ±Inf parse; anything else is a broken helper.
				return g, fmt.Errorf("gpu %d: %s %q is not a number", g.Index, k, v)
			}
			if x != x || x > 1e300 || x < -1e300 {
				g.NotMeasured[k] = "NVML gave no number"
				continue
			}
			g.Values[k] = x
		}
	}
	return g, nil
}

func parseProcs(s string) ([]Proc, error) {
	if s == "" {
		return nil, nil
	}
	var out []Proc
	for _, p := range strings.Split(s, ",") {
		pid, mem, ok := strings.Cut(p, ":")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 {
			return nil, fmt.Errorf("process %q", p)
		}
		m, err := strconv.ParseUint(mem, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("process %q", p)
		}
		out = append(out, Proc{PID: n, Memory: m})
	}
	return out, nil
}

var errLong = errors.New("line too long")

// readLine returns the next line without its newline; a line longer than maxLine is an
// error (the helper bounds its lines well below it).
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		b = append(b, chunk...)
		if len(b) > maxLine {
			return "", errLong
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}
