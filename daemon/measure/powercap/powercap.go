// Package powercap reads a node's RAPL energy counters from the kernel's powercap tree
// (/sys/class/powercap): a zone per processor package ("package-N"), its DRAM as a
// subzone ("dram"), and on some platforms the whole SoC ("psys"). Each zone's energy_uj
// counts microjoules since some point and wraps at max_energy_range_uj; Counter turns
// its readings into a total that survives the wrap and says when a counter went
// backwards instead of wrapping (a reset: that interval is not measured).
//
// Zones parses a directory of zones; the parse of each file is a pure function of its
// bytes, tested on fixtures (testdata).
package powercap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Domain is what a zone counts.
type Domain string

const (
	Package  Domain = "package" // a processor package (cores, caches, uncore)
	DRAM     Domain = "dram"    // the memory attached to a package
	Platform Domain = "psys"    // the whole platform (SoC) where the processor counts it
)

// Zone is one counter of the powercap tree.
type Zone struct {
	Dir    string // the zone's directory
	Name   string // as the kernel names it: "package-0", "dram", "psys"
	Domain Domain
	// MaxRange is where energy_uj wraps, in microjoules (0: not said, a decrease is
	// then never taken for a wrap).
	MaxRange uint64
}

// ErrNone: the node has no RAPL zone in its powercap tree.
var ErrNone = errors.New("no RAPL zones in the powercap tree")

// zoneDir matches the RAPL zones and subzones ("intel-rapl:0", "intel-rapl:0:0"; AMD's
// processors are listed as intel-rapl too). intel-rapl-mmio repeats a package's counter
// through another interface and is left out, so that nothing counts twice.
var zoneDir = regexp.MustCompile(`^intel-rapl:[0-9]+(:[0-9]+)?$`)

// Zones lists the package, DRAM and platform zones under dir (the host's
// sys/class/powercap). Core and uncore subzones are parts of their package and left out.
func Zones(dir string) ([]Zone, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (%s absent)", ErrNone, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("powercap: %w", err)
	}
	var out []Zone
	for _, e := range ents {
		if !zoneDir.MatchString(e.Name()) {
			continue
		}
		z := Zone{Dir: filepath.Join(dir, e.Name())}
		b, err := os.ReadFile(filepath.Join(z.Dir, "name"))
		if err != nil {
			return nil, fmt.Errorf("powercap: %w", err)
		}
		z.Name = strings.TrimSpace(string(b))
		sub := strings.Count(e.Name(), ":") == 2
		switch {
		case !sub && strings.HasPrefix(z.Name, "package-"):
			z.Domain = Package
		case !sub && z.Name == "psys":
			z.Domain = Platform
		case sub && z.Name == "dram":
			z.Domain = DRAM
		default:
			continue
		}
		if b, err := os.ReadFile(filepath.Join(z.Dir, "max_energy_range_uj")); err == nil {
			if z.MaxRange, err = parseUint(b); err != nil {
				return nil, fmt.Errorf("powercap: %s: %w", filepath.Join(z.Dir, "max_energy_range_uj"), err)
			}
		}
		out = append(out, z)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (%s)", ErrNone, dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out, nil
}

// Read reads the zone's counter, in microjoules.
func (z Zone) Read() (uint64, error) {
	p := filepath.Join(z.Dir, "energy_uj")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("powercap: %w", err)
	}
	v, err := parseUint(b)
	if err != nil {
		return 0, fmt.Errorf("powercap: %s: %w", p, err)
	}
	return v, nil
}

// parseUint reads a sysfs file of one unsigned number.
func parseUint(b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want an unsigned number, got %q", clip(s))
	}
	return v, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ErrBackwards: a counter read less than before, by more than a wrap explains.
var ErrBackwards = errors.New("energy counter went backwards")

// Counter follows one zone's readings.
type Counter struct {
	max  uint64
	prev uint64
	have bool
}

// NewCounter follows a counter that wraps at maxRange microjoules (0: not known).
func NewCounter(maxRange uint64) *Counter { return &Counter{max: maxRange} }

// Add takes a reading and returns the joules counted since the previous one (0 at the
// first). A reading below the previous is a wrap when the counter's range explains it
// with less than half a range counted (a read at least every half range: a package at
// 250 W wraps its 262 kJ range in ~17 min, the daemon reads every cycle); otherwise it
// is ErrBackwards, and the next reading counts from this one.
func (c *Counter) Add(uj uint64) (float64, error) {
	prev, had := c.prev, c.have
	c.prev, c.have = uj, true
	switch {
	case !had:
		return 0, nil
	case uj >= prev:
		return float64(uj-prev) / 1e6, nil
	case c.max > 0 && prev <= c.max && c.max-prev+uj < c.max/2:
		return float64(c.max-prev+uj) / 1e6, nil
	}
	return 0, fmt.Errorf("%w (from %d to %d µJ, range %d)", ErrBackwards, prev, uj, c.max)
}
