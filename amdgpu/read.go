package amdgpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/persyst/persyst/hostfs"
)

// Now is what one read of a card says at the moment of the read: its busy share, its
// VRAM in use, its power and energy counter, its throttling and its RAS error counts.
// Absent values are in Why with the reason.
type Now struct {
	Busy     float64 // percent of the time the GPU was busy (gpu_busy_percent)
	VRAMUsed uint64  // bytes
	Watts    float64 // power now (hwmon power1_input, else power1_average)
	// Joules is the card's energy counter (gpu_metrics' energy accumulator; amdgpu's
	// hwmon has none): it only ever grows, and resets with the driver.
	Joules float64
	// Thermal and PowerCapped say that the card was held back by heat or by its power
	// limit at the read (gpu_metrics v1.1-v1.3's throttle status); from v1.6 the table
	// counts the ticks it was (Ticks, PowerTicks, ThermalTicks: "residency").
	Thermal, PowerCapped            bool
	Ticks, PowerTicks, ThermalTicks uint32
	Uncorrectable                   uint64 // RAS: uncorrectable errors summed over the blocks
	// NoPower: the card reports no power at all (an MI250X's second die).
	NoPower bool
	// Has says which values the read gave ("busy", "vram", "watts", "joules",
	// "throttle", "residency", "ras"); Why why each other is absent.
	Has map[string]bool
	Why map[string]string
}

// Read reads one card, or one compute partition of a card, now.
func (s *Sysfs) Read(d Device) Now {
	n := Now{Has: map[string]bool{}, Why: map[string]string{}}
	dir := filepath.Join(drm, d.Card, "device")
	if d.Partitions > 1 {
		s.readPartition(d, dir, &n)
		return n
	}
	if v, err := s.uintFile(dir, "gpu_busy_percent"); err == nil {
		n.Busy, n.Has["busy"] = min(float64(v), 100), true
	} else {
		n.Why["busy"] = absent(err)
	}
	if v, err := s.uintFile(dir, "mem_info_vram_used"); err == nil {
		n.VRAMUsed, n.Has["vram"] = v, true
	} else {
		n.Why["vram"] = absent(err)
	}
	s.readHwmon(d, &n)
	s.readMetrics(dir, &n)
	if n.Has["watts"] && n.Watts == 0 && (!n.Has["joules"] || n.Joules == 0) {
		// A powered card never draws nothing: a die that reports no power (an MI250X's
		// second GCD: its package's power and energy are on the first).
		n.Has["watts"], n.Has["joules"], n.Why["watts"], n.Why["joules"] = false, false, noPower, noPower
		n.NoPower = true
	}
	if ue, err := s.ras(dir); err == nil {
		n.Uncorrectable, n.Has["ras"] = ue, true
	} else {
		n.Why["ras"] = err.Error()
	}
	return n
}

// readPartition reads a compute partition: its busy share from the card's gpu_metrics
// (xcp_stats), its memory as the KFD's processes on it hold it; the card's power and
// throttling are all its partitions' together, and its RAS counts the card's (errors
// count for every job on the GPU).
func (s *Sysfs) readPartition(d Device, dir string, n *Now) {
	var m Metrics
	b, err := s.fs.ReadFile(dir, "gpu_metrics")
	if err == nil {
		m, err = ParseMetrics(b)
	}
	busy, ok := m.XCPBusy[d.XCP]
	switch {
	case err != nil:
		n.Why["busy"] = fmt.Sprintf("%s: %s", s.fs.Path(dir, "gpu_metrics"), absent(err))
	case !ok:
		n.Why["busy"] = fmt.Sprintf("gpu_metrics v%d.%d gives no busy share for partition %d", m.Format, m.Content, d.XCP)
	default:
		n.Busy, n.Has["busy"] = busy, true
	}
	procs, kfdOK, err := s.Processes()
	switch {
	case err != nil:
		n.Why["vram"] = err.Error()
	case !kfdOK || len(d.GPUIDs) == 0:
		n.Why["vram"] = "the KFD does not list the partition's processes"
	default:
		for _, p := range procs {
			n.VRAMUsed += p.VRAM[d.GPUIDs[0]]
		}
		n.Has["vram"] = true
	}
	shared := fmt.Sprintf("partition %d of %d: the card's power and throttling are all its partitions' together", d.XCP, d.Partitions)
	n.Why["watts"], n.Why["joules"], n.Why["throttle"] = shared, shared, shared
	if ue, err := s.ras(dir); err == nil {
		n.Uncorrectable, n.Has["ras"] = ue, true
	} else {
		n.Why["ras"] = err.Error()
	}
}

// noPower is why a die that reports no power has none: its package's is on the other die.
const noPower = "the card reports no power (an MI250X's second die: its package's power is the first die's)"

// packagePower is why no die's power is a job's on a node of dies that share a package's.
const packagePower = "an MI250X's power is its package's, both dies': no one die's is known"

// readHwmon reads the card's power from its hwmon directory: power1_input (the power
// now: MI300), else power1_average (MI200), in microwatts.
func (s *Sysfs) readHwmon(d Device, n *Now) {
	if d.hwmon == "" {
		n.Why["watts"] = "the card has no hwmon directory"
		return
	}
	for _, f := range []string{"power1_input", "power1_average"} {
		v, err := s.uintFile(d.hwmon, f)
		if err == nil {
			n.Watts, n.Has["watts"] = float64(v)/1e6, true
			delete(n.Why, "watts")
			return
		}
		n.Why["watts"] = absent(err)
	}
}

// readMetrics reads the card's gpu_metrics table: its energy counter and throttling.
func (s *Sysfs) readMetrics(dir string, n *Now) {
	b, err := s.fs.ReadFile(dir, "gpu_metrics")
	if err != nil {
		n.Why["joules"], n.Why["throttle"] = absent(err), absent(err)
		return
	}
	m, err := ParseMetrics(b)
	if err != nil {
		why := fmt.Sprintf("%s: %v", s.fs.Path(dir, "gpu_metrics"), err)
		n.Why["joules"], n.Why["throttle"] = why, why
		return
	}
	if m.HasEnergy {
		n.Joules, n.Has["joules"] = m.Joules, true
	} else {
		n.Why["joules"] = fmt.Sprintf("gpu_metrics v%d.%d gives no energy for this card", m.Format, m.Content)
	}
	switch {
	case m.HasThrottle:
		n.Thermal, n.PowerCapped, n.Has["throttle"] = m.Thermal, m.PowerCapped, true
	case m.HasResidency:
		n.Ticks, n.PowerTicks, n.ThermalTicks, n.Has["residency"] = m.Ticks, m.PowerResidency, m.ThermalResidency, true
	default:
		n.Why["throttle"] = fmt.Sprintf("gpu_metrics v%d.%d says nothing of throttling (v1.4 and v1.5 leave it 0)", m.Format, m.Content)
	}
}

// ras sums the uncorrectable errors of the card's RAS blocks (ras/*_err_count).
func (s *Sysfs) ras(dir string) (uint64, error) {
	files, err := filepath.Glob(s.fs.Path(dir, "ras", "*_err_count"))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("the driver gives no RAS error counts for this card (%s)", s.fs.Path(dir, "ras"))
	}
	var ue uint64
	for _, f := range files {
		b, err := hostfs.ReadRegular(f)
		if err != nil {
			return 0, err
		}
		r, err := ParseRAS(bytes.NewReader(b))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		ue += r.Uncorrectable
	}
	return ue, nil
}

// absent says why a file gave no value: missing (this kernel or card does not give it),
// or the error reading it.
func absent(err error) string {
	if os.IsNotExist(err) || strings.Contains(err.Error(), "no such file") {
		return "the driver does not give it for this card"
	}
	return err.Error()
}
