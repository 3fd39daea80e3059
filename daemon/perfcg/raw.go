package perfcg

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CPUID is what /proc/cpuinfo says about the node's processor, enough to choose a raw
// event table.
type CPUID struct {
	Vendor string // "GenuineIntel", "AuthenticAMD"
	Family int
	Model  int
	Name   string
}

// parseCPUInfo reads the first processor's vendor, family, model and name.
func parseCPUInfo(r io.Reader) (CPUID, error) {
	var id CPUID
	seen := 0
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			if strings.TrimSpace(sc.Text()) == "" && seen > 0 {
				break // end of the first processor
			}
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var err error
		switch k {
		case "vendor_id":
			id.Vendor = v
			seen++
		case "cpu family":
			id.Family, err = strconv.Atoi(v)
			seen++
		case "model":
			id.Model, err = strconv.Atoi(v)
			seen++
		case "model name":
			id.Name = v
		}
		if err != nil {
			return CPUID{}, fmt.Errorf("line %d: %s: %w", line, k, err)
		}
	}
	if err := sc.Err(); err != nil {
		return CPUID{}, err
	}
	if id.Vendor == "" {
		return CPUID{}, fmt.Errorf("no vendor_id")
	}
	return id, nil
}

// CPUID reads <root>/proc/cpuinfo.
func (fs FS) CPUID() (CPUID, error) {
	p := filepath.Join(fs.Root, "proc/cpuinfo")
	f, err := os.Open(p)
	if err != nil {
		return CPUID{}, fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	id, err := parseCPUInfo(f)
	if err != nil {
		return CPUID{}, fmt.Errorf("read %s: %w", p, err)
	}
	return id, nil
}

// rawEvent is one row of a microarchitecture's table: the vendor's name and encoding,
// and the generic name properties use.
type rawEvent struct {
	name   string // generic persyst name: "fp_scalar_double", ...
	vendor string // the vendor's event name, for the documentation and logs
	event  uint64 // event select (AMD: up to 12 bits)
	umask  uint64
}

// Raw event tables, from the vendors' published event lists (Intel's perfmon JSON files,
// AMD's Processor Programming Reference). The generic names are part of persyst's
// interface: the property engine computes flop rates, vector ratios and loads per store
// from them.
var (
	// Intel Xeon cores from Skylake-SP to Emerald Rapids share these encodings.
	intelServer = []rawEvent{
		{"fp_scalar_double", "FP_ARITH_INST_RETIRED.SCALAR_DOUBLE", 0xC7, 0x01},
		{"fp_scalar_single", "FP_ARITH_INST_RETIRED.SCALAR_SINGLE", 0xC7, 0x02},
		{"fp_128_double", "FP_ARITH_INST_RETIRED.128B_PACKED_DOUBLE", 0xC7, 0x04},
		{"fp_128_single", "FP_ARITH_INST_RETIRED.128B_PACKED_SINGLE", 0xC7, 0x08},
		{"fp_256_double", "FP_ARITH_INST_RETIRED.256B_PACKED_DOUBLE", 0xC7, 0x10},
		{"fp_256_single", "FP_ARITH_INST_RETIRED.256B_PACKED_SINGLE", 0xC7, 0x20},
		{"fp_512_double", "FP_ARITH_INST_RETIRED.512B_PACKED_DOUBLE", 0xC7, 0x40},
		{"fp_512_single", "FP_ARITH_INST_RETIRED.512B_PACKED_SINGLE", 0xC7, 0x80},
		{"loads", "MEM_INST_RETIRED.ALL_LOADS", 0xD0, 0x81},
		{"stores", "MEM_INST_RETIRED.ALL_STORES", 0xD0, 0x82},
	}
	// AMD Zen 2 to Zen 5. FpRetSseAvxOps counts flops (not instructions) and is a
	// large-increment event the kernel pairs with its merge event itself.
	amdZen = []rawEvent{
		{"fp_ops", "FpRetSseAvxOps (all)", 0x003, 0xFF},
		{"loads", "LsDispatch.LdDispatch", 0x029, 0x01},
		{"stores", "LsDispatch.StoreDispatch", 0x029, 0x02},
	}
)

// archTable chooses the raw event table for a processor. Unknown processors get none
// (the generic hardware events still apply).
func archTable(id CPUID) (arch string, table []rawEvent) {
	switch id.Vendor {
	case "GenuineIntel":
		if id.Family == 6 {
			switch id.Model {
			case 0x55:
				return "intel-skylake-sp", intelServer // also Cascade Lake, Cooper Lake
			case 0x6A, 0x6C:
				return "intel-icelake-sp", intelServer
			case 0x8F:
				return "intel-sapphirerapids", intelServer
			case 0xCF:
				return "intel-emeraldrapids", intelServer
			}
		}
	case "AuthenticAMD", "HygonGenuine":
		switch id.Family {
		case 0x17:
			return "amd-zen2", amdZen // Zen 1 has no FpRetSseAvxOps umask 0xFF semantics; treated alike
		case 0x19:
			return "amd-zen3-4", amdZen
		case 0x1A:
			return "amd-zen5", amdZen
		}
	}
	return "", nil
}

// rawConfig encodes an event for PERF_TYPE_RAW: Intel event | umask<<8; AMD puts bits
// 8–11 of the 12-bit event select at bits 32–35.
func rawConfig(vendor string, e rawEvent) uint64 {
	c := e.event&0xFF | e.umask<<8
	if vendor == "AuthenticAMD" || vendor == "HygonGenuine" {
		c |= (e.event >> 8 & 0xF) << 32
	}
	return c
}

// RawEvents returns the raw events of the processor's table, grouped ("raw") so that
// with WithIPC they are counted together with cycles and instructions.
func RawEvents(id CPUID) (arch string, events []Event) {
	arch, table := archTable(id)
	for _, r := range table {
		events = append(events, Event{Name: r.name, Kind: Hardware, Type: unix.PERF_TYPE_RAW,
			Config: rawConfig(id.Vendor, r), Group: "raw"})
	}
	return arch, events
}

// NodeCatalog is Catalog plus the raw events of this node's processor, read from
// <root>/proc/cpuinfo (none if it cannot be read or the processor is not in a table).
func (fs FS) NodeCatalog() (events []Event, arch string) {
	events = Catalog()
	if id, err := fs.CPUID(); err == nil {
		var raw []Event
		arch, raw = RawEvents(id)
		events = append(events, raw...)
	}
	return events, arch
}
