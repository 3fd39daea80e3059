package perfevents

import "golang.org/x/sys/unix"

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

// CPUID is what chooses a raw event table: the processor's vendor, family and model
// (hostfs.CPUInfo has them).
type CPUID struct {
	Vendor string // "GenuineIntel", "AuthenticAMD"
	Family int
	Model  int
}

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
