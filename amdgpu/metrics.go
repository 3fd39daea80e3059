package amdgpu

import (
	"encoding/binary"
	"fmt"
)

// Metrics is what a card's gpu_metrics table gives persyst: its energy counter and
// whether it was held back by its power limit or by heat. The table is the driver's
// struct gpu_metrics_v1_N (kgd_pp_interface.h: little-endian, naturally aligned, every
// field the driver leaves unset all ones), read by its header's format and content
// revision and only where its size is that revision's.
type Metrics struct {
	Format, Content int
	// Joules is the energy accumulator (2^-16 J a count); HasEnergy: the table gives it.
	Joules    float64
	HasEnergy bool
	// HasThrottle: the table says whether the card is throttled now (Thermal,
	// PowerCapped: v1.1 to v1.3's independent throttle status); from v1.6 it gives
	// cumulative residencies instead (HasResidency: PowerResidency and
	// ThermalResidency count the ticks of Ticks held back).
	HasThrottle          bool
	Thermal, PowerCapped bool
	HasResidency         bool
	Ticks                uint32
	PowerResidency       uint32
	ThermalResidency     uint32
	// XCPBusy is each compute partition's busy share now, in percent (v1.6 on: the mean
	// of its XCCs' gfx_busy_inst in xcp_stats[partition]), for the partitions that give
	// one.
	XCPBusy map[int]float64
}

// metricsLayout is where a revision keeps the fields read (-1: not in it).
type metricsLayout struct {
	size                           int
	energy                         int
	indepThrottle                  int // u64: v1.1-v1.3
	accumulation, ppt, socketTherm int // u32: v1.6 on
	xcp, xcpEntry                  int // xcp_stats[numXCP] and one entry's size: v1.6 on
}

// The per-partition statistics of v1.6 on: numXCP entries, each beginning with its XCCs'
// gfx_busy_inst (u32[maxXCC], percent; all ones where the partition has no such XCC).
const (
	numXCP = 8
	maxXCC = 8
)

// metricsLayouts are format 1's (dGPU) revisions, by content revision. v1.4 and v1.5 keep
// a throttle_status the driver sets to 0 ("not reported through metrics now"): not
// read. The v1.6 read is the released one (Linux 6.13), not the reverted first draft.
var metricsLayouts = map[int]metricsLayout{
	1: {size: 96, energy: 24, indepThrottle: -1, accumulation: -1, ppt: -1, socketTherm: -1, xcp: -1},
	2: {size: 104, energy: 24, indepThrottle: -1, accumulation: -1, ppt: -1, socketTherm: -1, xcp: -1},
	3: {size: 120, energy: 24, indepThrottle: 112, accumulation: -1, ppt: -1, socketTherm: -1, xcp: -1},
	4: {size: 288, energy: 24, indepThrottle: -1, accumulation: -1, ppt: -1, socketTherm: -1, xcp: -1},
	5: {size: 360, energy: 88, indepThrottle: -1, accumulation: -1, ppt: -1, socketTherm: -1, xcp: -1},
	6: {size: 1664, energy: 16, indepThrottle: -1, accumulation: 32, ppt: 40, socketTherm: 44, xcp: 312, xcpEntry: 168},
	7: {size: 2208, energy: 24, indepThrottle: -1, accumulation: 40, ppt: 48, socketTherm: 52, xcp: 344, xcpEntry: 232},
	// v1.8 (MI300, newer kernels) keeps v1.7's fields where they were and widens each
	// partition's entry (JPEG engines, the limits' accumulators).
	8: {size: 3872, energy: 24, indepThrottle: -1, accumulation: 40, ppt: 48, socketTherm: 52, xcp: 344, xcpEntry: 440},
}

// The independent throttler bits (amdgpu_smu.h SMU_THROTTLER_*): the power limits (PPT0
// to SPPT_APU) and the temperatures (TEMP_GPU to PROCHOT_GFX).
const (
	throttlePowerBits   = 0xff
	throttleThermalBits = 0xffff << 32
)

// energyUnit is the energy accumulator's joules per count (15.259 µJ).
const energyUnit = 1.0 / 65536

// ParseMetrics reads a gpu_metrics table.
func ParseMetrics(b []byte) (Metrics, error) {
	if len(b) < 4 {
		return Metrics{}, fmt.Errorf("%d bytes, shorter than its header", len(b))
	}
	size := int(binary.LittleEndian.Uint16(b))
	m := Metrics{Format: int(b[2]), Content: int(b[3])}
	l, ok := metricsLayouts[m.Content]
	switch {
	case m.Format != 1:
		return m, fmt.Errorf("gpu_metrics v%d.%d: not a discrete GPU's table (format 1)", m.Format, m.Content)
	case !ok:
		return m, fmt.Errorf("gpu_metrics v%d.%d: a revision not read here", m.Format, m.Content)
	case size != l.size || len(b) < size:
		return m, fmt.Errorf("gpu_metrics v%d.%d: %d bytes (header: %d), want %d", m.Format, m.Content, len(b), size, l.size)
	}
	if e := binary.LittleEndian.Uint64(b[l.energy:]); e != ^uint64(0) {
		m.Joules, m.HasEnergy = float64(e)*energyUnit, true
	}
	if l.indepThrottle >= 0 {
		if t := binary.LittleEndian.Uint64(b[l.indepThrottle:]); t != ^uint64(0) {
			m.HasThrottle = true
			m.PowerCapped, m.Thermal = t&throttlePowerBits != 0, t&throttleThermalBits != 0
		}
	}
	if l.accumulation >= 0 {
		acc := binary.LittleEndian.Uint32(b[l.accumulation:])
		ppt, thm := binary.LittleEndian.Uint32(b[l.ppt:]), binary.LittleEndian.Uint32(b[l.socketTherm:])
		if acc != ^uint32(0) && ppt != ^uint32(0) && thm != ^uint32(0) {
			m.HasResidency, m.Ticks, m.PowerResidency, m.ThermalResidency = true, acc, ppt, thm
		}
	}
	if l.xcp >= 0 {
		m.XCPBusy = xcpBusy(b[l.xcp:], l.xcpEntry)
	}
	return m, nil
}

// xcpBusy reads each partition's busy share from xcp_stats: the mean of its XCCs'
// gfx_busy_inst that are set.
func xcpBusy(b []byte, entry int) map[int]float64 {
	var out map[int]float64
	for x := range numXCP {
		sum, n := 0.0, 0
		for c := range maxXCC {
			if v := binary.LittleEndian.Uint32(b[x*entry+4*c:]); v != ^uint32(0) {
				sum, n = sum+min(float64(v), 100), n+1
			}
		}
		if n > 0 {
			if out == nil {
				out = map[int]float64{}
			}
			out[x] = sum / float64(n)
		}
	}
	return out
}

// EncodeMetrics writes a gpu_metrics table of format 1, content revision content, with
// m's values and every other field all ones, as the driver leaves what it does not set:
// what a FAKE card serves (fakeamdgpu).
func EncodeMetrics(content int, m Metrics) ([]byte, error) {
	l, ok := metricsLayouts[content]
	if !ok {
		return nil, fmt.Errorf("gpu_metrics v1.%d: a revision not written here", content)
	}
	b := make([]byte, l.size)
	for i := range b {
		b[i] = 0xff
	}
	binary.LittleEndian.PutUint16(b, uint16(l.size))
	b[2], b[3] = 1, byte(content)
	if m.HasEnergy {
		binary.LittleEndian.PutUint64(b[l.energy:], uint64(m.Joules/energyUnit))
	}
	if l.indepThrottle >= 0 && m.HasThrottle {
		var t uint64
		if m.PowerCapped {
			t |= 1 // PPT0
		}
		if m.Thermal {
			t |= 1 << 36 // TEMP_HOTSPOT
		}
		binary.LittleEndian.PutUint64(b[l.indepThrottle:], t)
	}
	if l.accumulation >= 0 && m.HasResidency {
		binary.LittleEndian.PutUint32(b[l.accumulation:], m.Ticks)
		binary.LittleEndian.PutUint32(b[l.ppt:], m.PowerResidency)
		binary.LittleEndian.PutUint32(b[l.socketTherm:], m.ThermalResidency)
	}
	for x, busy := range m.XCPBusy {
		if l.xcp < 0 || x < 0 || x >= numXCP {
			return nil, fmt.Errorf("gpu_metrics v1.%d: no partition %d", content, x)
		}
		binary.LittleEndian.PutUint32(b[l.xcp+x*l.xcpEntry:], uint32(busy)) // its first XCC
	}
	return b, nil
}
