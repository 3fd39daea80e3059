package measure

import (
	"github.com/persyst/persyst/daemon/cgstats"
)

// Kind says how a metric combines over time.
type Kind int

const (
	// Counter values in a Sample are increases over the sample's interval; totals add up.
	Counter Kind = iota
	// Gauge values are the state at the read; the total is the last value.
	Gauge
	// Peak values are a high-water mark; the total is the maximum.
	Peak
)

// Metric names. They are part of the interface to the property engine and to
// `persyst jobs --json`: keep them stable. Perf events keep perf(1)'s names
// ("task-clock" in ns, "context-switches", "syscalls:sys_enter_openat", "cycles", ...),
// per CPU and summed over the job's CPUs.
const (
	// cgroup statistics (job on this node).
	CPUUserSeconds    = "cpu_user_seconds"
	CPUSystemSeconds  = "cpu_system_seconds"
	CPUPeriods        = "cpu_periods"
	CPUThrottled      = "cpu_throttled_periods"
	CPUThrottledSecs  = "cpu_throttled_seconds"
	MemBytes          = "mem_bytes"
	MemPeakBytes      = "mem_peak_bytes"
	MemAnonBytes      = "mem_anon_bytes" // anonymous memory, without the page cache
	OOMEvents         = "oom_events"
	OOMKills          = "oom_kills"
	PageFaults        = "page_faults"
	MajorPageFaults   = "major_page_faults"
	Tasks             = "tasks"
	BlkReadBytes      = "blk_read_bytes"
	BlkWriteBytes     = "blk_write_bytes"
	BlkReadOps        = "blk_read_ops"
	BlkWriteOps       = "blk_write_ops"
	PSICPUSomeSeconds = "psi_cpu_some_seconds"
	PSICPUFullSeconds = "psi_cpu_full_seconds"
	PSIMemSomeSeconds = "psi_memory_some_seconds"
	PSIMemFullSeconds = "psi_memory_full_seconds"
	PSIIOSomeSeconds  = "psi_io_some_seconds"
	PSIIOFullSeconds  = "psi_io_full_seconds"
	// process I/O (/proc/PID/io of the job's processes).
	ReadChars         = "read_chars"  // bytes passed to read(2) and friends
	WriteChars        = "write_chars" // bytes passed to write(2) and friends
	ReadSyscalls      = "read_syscalls"
	WriteSyscalls     = "write_syscalls"
	StorageReadBytes  = "storage_read_bytes"
	StorageWriteBytes = "storage_write_bytes"
	CancelledWrites   = "cancelled_write_bytes"
	Processes         = "processes"
	// node network, only when the job has the node to itself.
	NetRxBytes   = "net_rx_bytes"
	NetTxBytes   = "net_tx_bytes"
	NetRxPackets = "net_rx_packets"
	NetTxPackets = "net_tx_packets"
	IBRxBytes    = "ib_rcv_bytes"
	IBTxBytes    = "ib_xmit_bytes"
	IBRxPackets  = "ib_rcv_packets"
	IBTxPackets  = "ib_xmit_packets"
	// RAPL energy (package, DRAM), node-wide, only when the job has the node alone.
	EnergyPkgJoules = "energy_pkg_joules"
	EnergyRAMJoules = "energy_ram_joules"
)

// KindOf returns how the metric name combines over time (perf events are counters).
func KindOf(name string) Kind {
	switch name {
	case MemBytes, MemAnonBytes, Tasks, Processes:
		return Gauge
	case MemPeakBytes:
		return Peak
	}
	return Counter
}

// cgField maps a cgstats field to a metric and the factor from the field's unit.
type cgField struct {
	field cgstats.Field
	name  string
	scale float64
	get   func(*cgstats.Stats) uint64
}

var cgFields = []cgField{
	{cgstats.CPUUser, CPUUserSeconds, 1e-9, func(s *cgstats.Stats) uint64 { return s.CPUUserNs }},
	{cgstats.CPUSystem, CPUSystemSeconds, 1e-9, func(s *cgstats.Stats) uint64 { return s.CPUSystemNs }},
	{cgstats.CPUPeriods, CPUPeriods, 1, func(s *cgstats.Stats) uint64 { return s.NrPeriods }},
	{cgstats.CPUThrottled, CPUThrottled, 1, func(s *cgstats.Stats) uint64 { return s.NrThrottled }},
	{cgstats.CPUThrottledTime, CPUThrottledSecs, 1e-9, func(s *cgstats.Stats) uint64 { return s.ThrottledNs }},
	{cgstats.MemCurrent, MemBytes, 1, func(s *cgstats.Stats) uint64 { return s.MemCurrent }},
	{cgstats.MemPeak, MemPeakBytes, 1, func(s *cgstats.Stats) uint64 { return s.MemPeak }},
	{cgstats.MemAnon, MemAnonBytes, 1, func(s *cgstats.Stats) uint64 { return s.MemAnon }},
	{cgstats.MemOOM, OOMEvents, 1, func(s *cgstats.Stats) uint64 { return s.OOM }},
	{cgstats.MemOOMKill, OOMKills, 1, func(s *cgstats.Stats) uint64 { return s.OOMKill }},
	{cgstats.PgFault, PageFaults, 1, func(s *cgstats.Stats) uint64 { return s.PgFault }},
	{cgstats.PgMajFault, MajorPageFaults, 1, func(s *cgstats.Stats) uint64 { return s.PgMajFault }},
	{cgstats.PidsCurrent, Tasks, 1, func(s *cgstats.Stats) uint64 { return s.Pids }},
	{cgstats.IOReadBytes, BlkReadBytes, 1, func(s *cgstats.Stats) uint64 { return s.IOReadBytes }},
	{cgstats.IOWriteBytes, BlkWriteBytes, 1, func(s *cgstats.Stats) uint64 { return s.IOWriteBytes }},
	{cgstats.IOReadOps, BlkReadOps, 1, func(s *cgstats.Stats) uint64 { return s.IOReadOps }},
	{cgstats.IOWriteOps, BlkWriteOps, 1, func(s *cgstats.Stats) uint64 { return s.IOWriteOps }},
	{cgstats.PSICPUSome, PSICPUSomeSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.CPUSome.TotalUs }},
	{cgstats.PSICPUFull, PSICPUFullSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.CPUFull.TotalUs }},
	{cgstats.PSIMemSome, PSIMemSomeSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.MemSome.TotalUs }},
	{cgstats.PSIMemFull, PSIMemFullSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.MemFull.TotalUs }},
	{cgstats.PSIIOSome, PSIIOSomeSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.IOSome.TotalUs }},
	{cgstats.PSIIOFull, PSIIOFullSeconds, 1e-6, func(s *cgstats.Stats) uint64 { return s.IOFull.TotalUs }},
}

// Names lists every metric a Sample's Job map can hold apart from perf events (whose
// names are perfcg's): cgroup statistics, process I/O and node network.
func Names() []string {
	out := make([]string, 0, len(cgFields)+len(procNames)+len(netNames))
	for _, f := range cgFields {
		out = append(out, f.name)
	}
	out = append(out, procNames...)
	out = append(out, netNames...)
	return append(out, EnergyPkgJoules, EnergyRAMJoules)
}
