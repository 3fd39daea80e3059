package properties

import (
	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/sample"
)

// Derived values the engine provides besides the metrics. They are part of the
// expression language of the catalog.
const (
	// every domain
	NameSeconds = "seconds" // length of the interval (job domain: of the whole job)
	// cpu and core
	NameThreads = "threads" // CPUs in the device (1 for a CPU)
	// node
	NameNCPUs    = "ncpus"     // the job's CPUs on the node
	NameBusyMin  = "busy_min"  // lowest share of the interval a CPU of the job was busy (task-clock)
	NameBusyMax  = "busy_max"  // highest
	NameBusyMean = "busy_mean" // mean over the job's CPUs
	NameIdleCPUs = "idle_cpus" // CPUs of the job busy less than 5 % of the interval
	NameBusyCPUs = "busy_cpus" // CPUs' worth of time the job ran (sum of busy shares)
	// NameFileOpens counts the files opened by every open system call that is traced
	// (openat, open, openat2, creat): legacy open(2) opens files too.
	NameFileOpens = "file_opens"
	// The read and write calls judged as I/O, and their bytes: the calls on files where
	// they are counted apart from pipes, sockets and terminals (file_read_calls, ...),
	// else every read and write call of the job (read_syscalls, read_chars, ...).
	NameIOReadCalls  = "io_read_calls"
	NameIOReadBytes  = "io_read_bytes"
	NameIOWriteCalls = "io_write_calls"
	NameIOWriteBytes = "io_write_bytes"
	NameMemRequest   = "mem_requested_bytes"
	NameMemGrowth    = "mem_growth" // job: memory growth along a steady trend, as a share of the peak
	// NameMemGrowthBytes is that growth in bytes.
	NameMemGrowthBytes = "mem_growth_bytes"
	NameSamples        = "samples"     // job: number of samples
	NameNodes          = "nnodes"      // job: nodes with data
	NameLoadBalance    = "busy_spread" // job: spread of per-node mean busy share (max − min)
	// cpu, core and node, from the raw floating-point events of the processor's table
	NameFlops       = "flops"        // floating-point operations
	NameVectorFlops = "vector_flops" // of which in packed (vector) instructions
	NameSPFlops     = "sp_flops"     // single precision
	NameDPFlops     = "dp_flops"     // double precision
	// node: Ethernet and InfiniBand together, whichever were measured
	NameTxBytes   = "tx_bytes"
	NameRxBytes   = "rx_bytes"
	NameTxPackets = "tx_packets"
	NameRxPackets = "rx_packets"
)

// calibrationNames are values from `persyst calibrate` (or their defaults), usable in
// thresholds and values. syscall_seconds is measured on the node when the daemon or
// `persyst run` starts (NodeFacts' caller, LoadForNode).
var calibrationNames = []string{
	"stream_bw_node", "stream_bw_core", "peak_flops_core", "peak_flops_node",
	"cores", "mem_total_bytes", "max_freq_hz", "min_freq_hz", NameSyscallSeconds,
}

// NameSyscallSeconds is the time a small read or write call takes on the node
// (internal/syscost); where it was not measured, defaultSyscallSeconds.
const NameSyscallSeconds = "syscall_seconds"

// defaultSyscallSeconds is a small call's cost on today's servers: 1 µs.
const defaultSyscallSeconds = 1e-6

func calibrationTemplate() map[string]float64 {
	m := map[string]float64{}
	for _, n := range calibrationNames {
		m[n] = 0
	}
	return m
}

// perfNames are every perf event the catalog may count, generic and raw.
func perfNames() []string {
	var out []string
	for _, e := range perfevents.Catalog() {
		out = append(out, e.Name)
	}
	for _, id := range []perfevents.CPUID{{Vendor: "GenuineIntel", Family: 6, Model: 0x8F}, {Vendor: "AuthenticAMD", Family: 0x19}} {
		_, raw := perfevents.RawEvents(id)
		for _, e := range raw {
			out = append(out, e.Name)
		}
	}
	return out
}

// envTemplate is every name an expression of domain d may use.
func envTemplate(d Domain) map[string]float64 {
	m := calibrationTemplate()
	m[NameSeconds] = 0
	for _, n := range perfNames() {
		m[Sanitize(n)] = 0
	}
	for _, n := range []string{NameFlops, NameVectorFlops, NameSPFlops, NameDPFlops} {
		m[n] = 0
	}
	switch d {
	case CPU, Core:
		m[NameThreads] = 0
	case Node:
		for _, n := range sample.Names() {
			m[Sanitize(n)] = 0
		}
		for _, n := range []string{NameNCPUs, NameBusyMin, NameBusyMax, NameBusyMean, NameIdleCPUs, NameBusyCPUs, NameFileOpens, NameMemRequest,
			NameIOReadCalls, NameIOReadBytes, NameIOWriteCalls, NameIOWriteBytes, NameTxBytes, NameRxBytes, NameTxPackets, NameRxPackets} {
			m[n] = 0
		}
	case Job:
		for _, n := range sample.Names() {
			m[Sanitize(n)] = 0
		}
		for _, n := range []string{NameNCPUs, NameMemRequest, NameMemGrowth, NameMemGrowthBytes, NameSamples, NameNodes, NameLoadBalance} {
			m[n] = 0
		}
	}
	return m
}
