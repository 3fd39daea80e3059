package sample

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

func (k Kind) String() string {
	switch k {
	case Gauge:
		return "gauge"
	case Peak:
		return "peak"
	}
	return "counter"
}

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
	SchedWaitSeconds  = "sched_wait_seconds"
	SuspendedSeconds  = "suspended_seconds" // Slurm held the job suspended (frozen)
	SchedTimeslices   = "sched_timeslices"
	PSICPUSomeSeconds = "psi_cpu_some_seconds"
	PSICPUFullSeconds = "psi_cpu_full_seconds"
	PSIMemSomeSeconds = "psi_memory_some_seconds"
	PSIMemFullSeconds = "psi_memory_full_seconds"
	PSIIOSomeSeconds  = "psi_io_some_seconds"
	PSIIOFullSeconds  = "psi_io_full_seconds"

	// SchedBusyThreadSeconds: run and run-queue time of the threads runnable at least
	// half of an interval; over the interval's seconds, how many threads had work.
	SchedBusyThreadSeconds = "sched_busy_thread_seconds"

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
	// RAPL energy (packages, DRAM, the platform): the node's while the job has it alone,
	// else the job's share (measure's energy source).
	EnergyPkgJoules  = "energy_pkg_joules"
	EnergyRAMJoules  = "energy_ram_joules"
	EnergyPsysJoules = "energy_psys_joules"
	// The node's own power meter (its BMC): the whole node's energy, shared out like
	// RAPL's; the seconds of the job in which the meter could not be read.
	EnergyNodeJoules        = "energy_node_joules"
	EnergyNodeMissedSeconds = "energy_node_missed_seconds"
	// EnergyShareCPUSeconds is the job's CPU time its share of a shared node's energy
	// was taken by (in Slurm's cgroup of the job, as all jobs' is).
	EnergyShareCPUSeconds = "energy_share_cpu_seconds"
	// MethodEnergy is the Summary.Methods entry that says where a job's energy came from
	// and how its share of a shared node's was taken.
	MethodEnergy = "energy"
	// GPUs of the job (NVIDIA's through NVML and persyst-nvml, AMD's through the amdgpu
	// driver's sysfs), summed over the job's GPUs on the node; device-wide values only
	// while no other job shares a GPU. GPUSlices counts those that are MIG instances.
	GPUs                  = "gpus"
	GPUSlices             = "gpu_slices"
	GPUBusySeconds        = "gpu_busy_seconds"
	GPUUnusedSeconds      = "gpu_unused_seconds"
	GPUSMActiveSeconds    = "gpu_sm_active_seconds"
	GPUOccupancySeconds   = "gpu_sm_occupancy_seconds"
	GPUTensorSeconds      = "gpu_tensor_active_seconds"
	GPUDRAMSeconds        = "gpu_dram_active_seconds"
	GPUMemPeakBytes       = "gpu_memory_peak_bytes"
	GPUMemTotalBytes      = "gpu_memory_total_bytes"
	GPUEnergyJoules       = "gpu_energy_joules"
	GPUThermalSeconds     = "gpu_thermal_throttled_seconds"
	GPUPowerCappedSeconds = "gpu_power_capped_seconds"
	GPUErrors             = "gpu_errors"
	// What happened on the node outside the job (interference): CPU time its CPUs spent
	// on anything, the job's own included; the node's I/O and memory pressure stall.
	NodeCPUsBusySeconds    = "node_cpus_busy_seconds"
	NodeCPUsStealSeconds   = "node_cpus_steal_seconds"
	NodeIOPressureSeconds  = "node_io_pressure_seconds"
	NodeMemPressureSeconds = "node_memory_pressure_seconds"
)

// Metric describes one metric of the vocabulary.
type Metric struct {
	Name string
	Kind Kind
	Unit string // "seconds", "bytes", "count", "joules", ...
	Help string
}

// Read and write calls by what they went to: read(2)/pread(2) and write(2)/pwrite(2)
// calls and the bytes they moved, on regular files, pipes, sockets, and terminals and
// character devices, told apart per call by the file's type (eBPF).
const (
	FileReadCalls    = "file_read_calls"
	FileReadBytes    = "file_read_bytes"
	FileWriteCalls   = "file_write_calls"
	FileWriteBytes   = "file_write_bytes"
	PipeReadCalls    = "pipe_read_calls"
	PipeReadBytes    = "pipe_read_bytes"
	PipeWriteCalls   = "pipe_write_calls"
	PipeWriteBytes   = "pipe_write_bytes"
	SocketReadCalls  = "socket_read_calls"
	SocketReadBytes  = "socket_read_bytes"
	SocketWriteCalls = "socket_write_calls"
	SocketWriteBytes = "socket_write_bytes"
	DeviceReadCalls  = "chardev_read_calls"
	DeviceReadBytes  = "chardev_read_bytes"
	DeviceWriteCalls = "chardev_write_calls"
	DeviceWriteBytes = "chardev_write_bytes"
)

// Metrics is the vocabulary of metrics a Sample's Job map can hold besides perf events
// (whose names are perf(1)'s, see perfevents): every metric a measurement source
// produces, and every name the property engine's expressions may use for them. A source
// with a new metric adds it here.
var metrics = []Metric{
	{CPUUserSeconds, Counter, "seconds", "CPU time in user mode (cgroup cpuacct / cpu.stat)"},
	{CPUSystemSeconds, Counter, "seconds", "CPU time in the kernel on the job's behalf"},
	{CPUPeriods, Counter, "count", "CFS enforcement periods of the job's CPU quota"},
	{CPUThrottled, Counter, "count", "periods in which the job was throttled by its CPU quota"},
	{CPUThrottledSecs, Counter, "seconds", "time the job was throttled by its CPU quota"},
	{MemBytes, Gauge, "bytes", "memory in use, page cache included, at the read"},
	{MemPeakBytes, Peak, "bytes", "highest memory in use so far"},
	{MemAnonBytes, Gauge, "bytes", "anonymous memory (without the page cache) at the read"},
	{OOMEvents, Counter, "count", "times the job's memory limit was hit"},
	{OOMKills, Counter, "count", "processes of the job killed by the OOM killer"},
	{PageFaults, Counter, "count", "page faults"},
	{MajorPageFaults, Counter, "count", "page faults that needed I/O"},
	{Tasks, Gauge, "count", "tasks (threads) in the job's cgroup at the read"},
	{BlkReadBytes, Counter, "bytes", "bytes read from block devices"},
	{BlkWriteBytes, Counter, "bytes", "bytes written to block devices"},
	{BlkReadOps, Counter, "count", "read requests to block devices"},
	{BlkWriteOps, Counter, "count", "write requests to block devices"},
	{SchedWaitSeconds, Counter, "seconds", "time the job's threads waited on a run queue for a CPU"},
	{SchedTimeslices, Counter, "count", "times the job's threads were put on a CPU"},
	{FileReadCalls, Counter, "count", "read(2) and pread(2) calls on regular files (not pipes, sockets, terminals or devices), per call with eBPF"},
	{FileReadBytes, Counter, "bytes", "bytes those reads returned"},
	{FileWriteCalls, Counter, "count", "write(2) and pwrite(2) calls on regular files, per call with eBPF"},
	{FileWriteBytes, Counter, "bytes", "bytes those writes wrote"},
	{PipeReadCalls, Counter, "count", "read(2) and pread(2) calls on pipes and FIFOs, per call with eBPF"},
	{PipeReadBytes, Counter, "bytes", "bytes those reads returned"},
	{PipeWriteCalls, Counter, "count", "write(2) and pwrite(2) calls on pipes and FIFOs, per call with eBPF"},
	{PipeWriteBytes, Counter, "bytes", "bytes those writes wrote"},
	{SocketReadCalls, Counter, "count", "read(2) calls on sockets (not recv(2) and its kin), per call with eBPF"},
	{SocketReadBytes, Counter, "bytes", "bytes those reads returned"},
	{SocketWriteCalls, Counter, "count", "write(2) calls on sockets (not send(2) and its kin), per call with eBPF"},
	{SocketWriteBytes, Counter, "bytes", "bytes those writes wrote"},
	{DeviceReadCalls, Counter, "count", "read(2) and pread(2) calls on terminals and character devices (/dev/null, /dev/urandom), per call with eBPF"},
	{DeviceReadBytes, Counter, "bytes", "bytes those reads returned"},
	{DeviceWriteCalls, Counter, "count", "write(2) and pwrite(2) calls on terminals and character devices, per call with eBPF"},
	{DeviceWriteBytes, Counter, "bytes", "bytes those writes wrote"},
	{SchedBusyThreadSeconds, Counter, "seconds", "run and run-queue time of the job's threads that were runnable at least half of the interval (per second: threads with work)"},
	{SuspendedSeconds, Counter, "seconds", "time Slurm held the job suspended (its step cgroups frozen); not judged"},
	{PSICPUSomeSeconds, Counter, "seconds", "time some of the job's tasks waited for a CPU (pressure stall)"},
	{PSICPUFullSeconds, Counter, "seconds", "time all of the job's tasks waited for a CPU"},
	{PSIMemSomeSeconds, Counter, "seconds", "time some of the job's tasks stalled on memory"},
	{PSIMemFullSeconds, Counter, "seconds", "time all of the job's tasks stalled on memory"},
	{PSIIOSomeSeconds, Counter, "seconds", "time some of the job's tasks stalled on I/O"},
	{PSIIOFullSeconds, Counter, "seconds", "time all of the job's tasks stalled on I/O"},
	{ReadChars, Counter, "bytes", "bytes passed to read(2) and friends by the job's processes"},
	{WriteChars, Counter, "bytes", "bytes passed to write(2) and friends by the job's processes"},
	{ReadSyscalls, Counter, "count", "read(2)-like system calls of the job's processes"},
	{WriteSyscalls, Counter, "count", "write(2)-like system calls of the job's processes"},
	{StorageReadBytes, Counter, "bytes", "bytes the job's processes caused to be read from storage"},
	{StorageWriteBytes, Counter, "bytes", "bytes the job's processes caused to be written to storage"},
	{CancelledWrites, Counter, "bytes", "written bytes whose writeback was cancelled (truncated files)"},
	{Processes, Gauge, "count", "processes of the job at the read"},
	{NetRxBytes, Counter, "bytes", "bytes received on the node's network interfaces (job alone on the node)"},
	{NetTxBytes, Counter, "bytes", "bytes sent on the node's network interfaces (job alone on the node)"},
	{NetRxPackets, Counter, "count", "packets received on the node's network interfaces (job alone)"},
	{NetTxPackets, Counter, "count", "packets sent on the node's network interfaces (job alone)"},
	{IBRxBytes, Counter, "bytes", "bytes received on the node's InfiniBand ports (job alone)"},
	{IBTxBytes, Counter, "bytes", "bytes sent on the node's InfiniBand ports (job alone)"},
	{IBRxPackets, Counter, "count", "packets received on the node's InfiniBand ports (job alone)"},
	{IBTxPackets, Counter, "count", "packets sent on the node's InfiniBand ports (job alone)"},
	{EnergyPkgJoules, Counter, "joules", "energy of the processor packages (RAPL): the node's while the job had it alone, else the job's share by its CPU time"},
	{EnergyRAMJoules, Counter, "joules", "energy of the DRAM (RAPL): the node's while the job had it alone, else the job's share by its memory"},
	{EnergyPsysJoules, Counter, "joules", "energy of the platform (RAPL psys, where the processor counts it): the node's while the job had it alone, else the job's share by its CPU time"},
	{EnergyNodeJoules, Counter, "joules", "energy of the whole node from its own power meter (BMC, Redfish): the node's while the job had it alone, else the job's share by its CPU time"},
	{EnergyShareCPUSeconds, Counter, "seconds", "the job's CPU time (in Slurm's cgroup of the job) its share of a shared node's energy was taken by, out of all jobs' on the node"},
	{EnergyNodeMissedSeconds, Counter, "seconds", "seconds of the job in which the node's power meter (BMC) gave no reading: its energy is then RAPL's alone"},
	{GPUs, Gauge, "count", "GPUs of the job on the node, measured (NVIDIA's and AMD's)"},
	{GPUSlices, Gauge, "count", "of the job's GPUs on the node, those that are MIG instances (slices of a GPU)"},
	{GPUBusySeconds, Counter, "seconds", "GPU-seconds in which a kernel ran (NVML utilization, per GPU, times the interval)"},
	{GPUUnusedSeconds, Counter, "seconds", "GPU-seconds of GPUs that ran no kernel in the interval (under 1 % busy)"},
	{GPUSMActiveSeconds, Counter, "seconds", "GPU-seconds weighted by the share of SMs busy (GPM, Hopper and newer)"},
	{GPUOccupancySeconds, Counter, "seconds", "GPU-seconds weighted by the warps resident against the maximum (GPM)"},
	{GPUTensorSeconds, Counter, "seconds", "GPU-seconds weighted by the tensor cores' activity (GPM)"},
	{GPUDRAMSeconds, Counter, "seconds", "GPU-seconds weighted by the share of DRAM bandwidth used (GPM)"},
	{GPUMemPeakBytes, Peak, "bytes", "GPU memory the job held, the highest of the intervals (sum over its GPUs)"},
	{GPUMemTotalBytes, Gauge, "bytes", "memory of the job's GPUs"},
	{GPUEnergyJoules, Counter, "joules", "energy of the job's GPUs (GPUs not shared)"},
	{GPUThermalSeconds, Counter, "seconds", "GPU-seconds in which heat held the clocks down (GPUs not shared)"},
	{GPUPowerCappedSeconds, Counter, "seconds", "GPU-seconds in which the power limit held the clocks down (GPUs not shared; usual at full load)"},
	{NodeCPUsBusySeconds, Counter, "seconds", "CPU time the job's CPUs spent on anything, the job and other work (/proc/stat); less the job's own: other work on its CPUs"},
	{NodeCPUsStealSeconds, Counter, "seconds", "of that, the hypervisor's steal: time the job's virtual CPUs wanted to run and the host ran something else (/proc/stat; 0 on bare metal)"},
	{NodeIOPressureSeconds, Counter, "seconds", "time some task on the node stalled on I/O (the node's pressure stall information, whoever caused it)"},
	{NodeMemPressureSeconds, Counter, "seconds", "time some task on the node stalled on memory (the node's pressure stall information)"},
	{GPUErrors, Counter, "count", "hardware errors of the job's GPUs: uncorrected ECC memory errors and the driver's hardware Xid reports"},
}

var kinds = func() map[string]Kind {
	m := make(map[string]Kind, len(metrics))
	for _, x := range metrics {
		m[x.Name] = x.Kind
	}
	return m
}()

// Metrics returns the vocabulary, in a stable order.
func Metrics() []Metric { return append([]Metric(nil), metrics...) }

// Names lists every metric of the vocabulary (not perf events), in a stable order.
func Names() []string {
	out := make([]string, len(metrics))
	for i, m := range metrics {
		out[i] = m.Name
	}
	return out
}

// KindOf returns how the metric name combines over time (perf events, which are not in
// the vocabulary, are counters).
func KindOf(name string) Kind {
	if k, ok := kinds[name]; ok {
		return k
	}
	return Counter
}

// Lookup returns the vocabulary's definition of a metric.
func Lookup(name string) (Metric, bool) {
	for _, m := range metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}
