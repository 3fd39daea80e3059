package perfcg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/persyst/persyst/hostfs"
	"golang.org/x/sys/unix"
)

// ErrNoPower means the kernel has no "power" PMU (RAPL energy counters): most VMs, and
// processors without RAPL.
var ErrNoPower = errors.New("no RAPL power PMU (/sys/bus/event_source/devices/power)")

// PowerEvent is one RAPL energy counter of the power PMU ("energy-pkg", "energy-ram").
// Energy counters are per package and count for the whole package, whatever runs on it:
// they cannot be scoped to a job's cgroup, so persyst attributes them to a job only while
// the job has the node to itself.
type PowerEvent struct {
	Name   string  // energy-pkg, energy-ram, energy-cores, ...
	Type   uint32  // the PMU's perf type
	Config uint64  // from events/<name>: "event=0x02"
	Scale  float64 // joules per count, from events/<name>.scale
}

// PowerEvents lists the energy events of the power PMU under the root.
func PowerEvents(h hostfs.FS) ([]PowerEvent, error) {
	dir := h.Path("sys/bus/event_source/devices/power")
	b, err := os.ReadFile(filepath.Join(dir, "type"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoPower
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "type"), err)
	}
	typ, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "type"), err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "events"))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "events"), err)
	}
	var out []PowerEvent
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "energy-") || strings.Contains(name, ".") {
			continue
		}
		p := filepath.Join(dir, "events", name)
		cb, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		cfg, err := parseEventConfig(string(cb))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		sb, err := os.ReadFile(p + ".scale")
		if err != nil {
			return nil, fmt.Errorf("read %s.scale: %w", p, err)
		}
		scale, err := strconv.ParseFloat(strings.TrimSpace(string(sb)), 64)
		if err != nil || !(scale > 0) {
			return nil, fmt.Errorf("read %s.scale: bad scale %q", p, strings.TrimSpace(string(sb)))
		}
		out = append(out, PowerEvent{Name: name, Type: uint32(typ), Config: cfg, Scale: scale})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseEventConfig reads a PMU event description such as "event=0x02" (other terms, like
// umask=, are added in at their usual Intel positions).
func parseEventConfig(s string) (uint64, error) {
	var cfg uint64
	for _, term := range strings.Split(strings.TrimSpace(s), ",") {
		k, v, ok := strings.Cut(term, "=")
		if !ok {
			return 0, fmt.Errorf("bad event term %q", term)
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
		if !strings.HasPrefix(v, "0x") {
			n, err = strconv.ParseUint(v, 10, 64)
		}
		if err != nil {
			return 0, fmt.Errorf("bad value in %q", term)
		}
		switch k {
		case "event":
			cfg |= n
		case "umask":
			cfg |= n << 8
		default:
			return 0, fmt.Errorf("unsupported event term %q", k)
		}
	}
	return cfg, nil
}

// Energy counts RAPL energy system-wide, one counter per event and package.
type Energy struct {
	events []PowerEvent
	fds    [][]int // [event][package]
}

// OpenEnergy opens the events on the given CPUs (one per package), system-wide
// (pid -1). It needs root or CAP_PERFMON.
func OpenEnergy(events []PowerEvent, cpus []int) (*Energy, error) {
	e := &Energy{events: events, fds: make([][]int, len(events))}
	for i, ev := range events {
		for _, c := range cpus {
			attr := unix.PerfEventAttr{Type: ev.Type, Config: ev.Config, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
			fd, err := unix.PerfEventOpen(&attr, -1, c, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if err != nil {
				e.Close()
				return nil, fmt.Errorf("perf open %s on CPU %d: %w", ev.Name, c, err)
			}
			e.fds[i] = append(e.fds[i], fd)
		}
	}
	return e, nil
}

// Read returns the energy counted so far per event, in joules, summed over packages.
func (e *Energy) Read() (map[string]float64, error) {
	out := make(map[string]float64, len(e.events))
	var buf [8]byte
	for i, ev := range e.events {
		var sum float64
		for _, fd := range e.fds[i] {
			if _, err := unix.Read(fd, buf[:]); err != nil {
				return nil, fmt.Errorf("perf read %s: %w", ev.Name, err)
			}
			sum += float64(*(*uint64)(unsafe.Pointer(&buf[0]))) * ev.Scale
		}
		out[ev.Name] = sum
	}
	return out, nil
}

// Close closes the counters.
func (e *Energy) Close() error {
	for _, fds := range e.fds {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	e.fds = nil
	return nil
}
