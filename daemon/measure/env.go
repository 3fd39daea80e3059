package measure

import (
	"cmp"
	"context"
	"errors"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/amdgpu"
	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/daemon/measure/redfish"
	"github.com/persyst/persyst/daemon/measure/syscount"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/nvml"
	"github.com/persyst/persyst/perfevents"
)

// EnvOptions configure NewEnv.
type EnvOptions struct {
	Host hostfs.FS
	// How the perf events are chosen: with PerfWhy set, none (every catalog event is not
	// measured, for that reason); with ProbeCgroup set (a cgroup directory as the kernel
	// names it), every event of the node's catalog is tried once there (the daemon);
	// otherwise the catalog's events whose tracepoints resolve, and each job's open tells
	// which exist (`persyst run`: one command, and every probe of a syscall tracepoint
	// costs the kernel an RCU grace period, about 30 ms).
	PerfWhy     string
	ProbeCgroup string
	// SyscallMount, if set, is the cgroup v2 hierarchy (as Host's path) that jobs' perf
	// cgroups lie on: their system calls are then counted with eBPF where the kernel
	// allows it (Env.Syscalls).
	SyscallMount string
	// SyscallBudget is the share of one CPU the extra time of counting system calls may
	// take before they are counted in samples (0: every call; persyst.conf's
	// SyscallBudget).
	SyscallBudget float64
	// SyscallLinger keeps the eBPF programs attached that long after the last measured
	// job ended (the daemon: SyscallLinger; `persyst run`, which measures one command: 0).
	SyscallLinger time.Duration
	// Energy opens the node's RAPL counters (NodeEnergy): from the powercap tree in
	// PowercapDir ("": the host's sys/class/powercap), else the perf power PMU.
	Energy      bool
	PowercapDir string
	// NodeMeter, with Energy, reads the node's own power meter (its BMC) in the
	// background (nil: none).
	NodeMeter *redfish.Options
	// GPU, if set, reads the node's NVIDIA GPUs through persyst-nvml with these options
	// (Env.GPU), the helper started at once in the background where it is installed,
	// and its AMD GPUs through the amdgpu driver's sysfs under Host.
	GPU *nvml.Options
	// AMDGPUSysfs is the sysfs the AMD GPUs are read in, under Host ("": /sys).
	AMDGPUSysfs string
	Enable      map[string]bool
	Log         zerolog.Logger
	Now         func() time.Time
	SampleBytes int
}

// SyscallLinger is how long the node daemon keeps its eBPF programs attached after the
// last measured job ended: jobs that follow each other within it find them attached, and
// a node that runs no job for longer pays nothing.
const SyscallLinger = 30 * time.Second

// NewEnv prepares what all meters of a daemon or of `persyst run` share: the cgroup
// statistics reader, the perf events this node has, the RAPL counters.
func NewEnv(o EnvOptions) *Env {
	if o.Now == nil {
		o.Now = time.Now
	}
	env := &Env{
		Host: o.Host, Stats: cgstats.NewReader(o.Host, cgstats.Options{}), Enable: o.Enable,
		Log: o.Log, Now: o.Now, SampleBytes: o.SampleBytes, Node: NewNodeView(o.Host, o.Now),
	}
	if o.Energy {
		env.NodeEnergy = OpenNodeEnergy(o.Host, o.PowercapDir, env.Stats, o.Now, o.Log)
		env.startMeter(o)
	}
	env.openGPU(o)
	finish := env.syscalls(o)
	defer finish()
	switch {
	case o.PerfWhy != "":
		env.Unavailable = map[string]string{}
		for _, e := range perfevents.Catalog() {
			env.Unavailable[e.Name] = "not measured: " + o.PerfWhy
		}
	case o.ProbeCgroup != "":
		probed, err := perfcg.Probe(o.Host, o.Host.Path(o.ProbeCgroup), o.Log)
		if err != nil {
			o.Log.Warn().Err(err).Msg("perf events not measured")
			env.Unavailable = map[string]string{}
			for _, e := range perfevents.Catalog() {
				env.Unavailable[e.Name] = "not measured: " + err.Error()
			}
			break
		}
		env.Unavailable = map[string]string{}
		for _, st := range probed {
			if !st.Available {
				env.Unavailable[st.Event.Name] = "not available: " + perfcg.Reason(st.Event, st.Err)
			}
		}
		env.Events = perfevents.WithIPC(probed.Available())
		names := make([]string, 0, len(env.Events))
		for _, e := range env.Events {
			names = append(names, e.Name)
		}
		o.Log.Info().Strs("events", names).Int("not_available", len(env.Unavailable)).
			Str("cgroups", o.ProbeCgroup).Msg("perf events probed")
	default:
		env.Unavailable = map[string]string{}
		all, _ := perfcg.NodeCatalog(o.Host)
		for _, e := range all {
			re, err := perfcg.Resolve(o.Host, e)
			if err != nil {
				env.Unavailable[e.Name] = "not available: " + perfcg.Reason(e, err)
				continue
			}
			env.Events = append(env.Events, re)
		}
		env.Events = perfevents.WithIPC(env.Events)
	}
	return env
}

// startMeter reads the node's own power meter in the background, until Close.
func (env *Env) startMeter(o EnvOptions) {
	if o.NodeMeter == nil {
		return
	}
	mo := *o.NodeMeter
	mo.Now, mo.Log = o.Now, o.Log
	m, err := redfish.New(mo)
	if err != nil {
		o.Log.Warn().Err(err).Msg("the node's power meter (BMC) is not read")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	env.NodeEnergy.Meter = m
	env.stopMeter = func() { cancel(); <-done }
}

// outsideShare is how much less than the budget the calls counted for no job may cost
// (syscount.Sampling.Outside) once they would cost half of it: a program outside every
// measured job that makes calls without pause, such as a job that opted out, pays an
// eighth of the budget (0.03 % of one CPU's time at 0.25 %), or 1/256 of what counting
// each of its calls would cost where that is more (the sampler's least share), below
// what a benchmark resolves (docs/performance.md), for the jobs beside it.
const outsideShare = 8

// syscalls starts counting system calls with eBPF where it can; finish, called once the
// perf events are chosen, takes what eBPF counts out of them.
func (env *Env) syscalls(o EnvOptions) (finish func()) {
	switch {
	case o.Host.Root() != "/":
		// eBPF counts the calls of the kernel this process runs on: not a host under
		// another root (tests' fake hosts).
		env.SyscallsWhy = "the host is not this machine's root"
	case o.SyscallMount != "" && o.PerfWhy == "":
		s := syscount.Sampling{Budget: o.SyscallBudget, Outside: o.SyscallBudget / outsideShare}
		return env.startSyscalls(o.SyscallMount, syscount.Options{Sampling: s, Linger: o.SyscallLinger})
	case o.PerfWhy != "":
		env.SyscallsWhy = o.PerfWhy
	default:
		env.SyscallsWhy = "no cgroup v2 hierarchy to count in"
	}
	return func() {}
}

// Close releases what the environment holds for the node: the eBPF programs, the RAPL
// counters, the GPU helper and the node's files.
func (env *Env) Close() error {
	var errs []error
	if env.Syscalls != nil {
		errs = append(errs, env.Syscalls.Close())
		env.Syscalls = nil
	}
	if env.stopMeter != nil {
		env.stopMeter()
		env.stopMeter = nil
	}
	if env.NodeEnergy != nil {
		errs = append(errs, env.NodeEnergy.Close())
		env.NodeEnergy = nil
	}
	if env.GPU != nil {
		errs = append(errs, env.GPU.Close())
		env.GPU = nil
	}
	if env.Node != nil {
		errs = append(errs, env.Node.Close())
	}
	return errors.Join(errs...)
}

// openGPU prepares the GPU helper: started now, in the background, where it is installed
// (NVML's start takes seconds on a GPU without persistence mode); elsewhere at the first
// read of a job that holds GPUs.
func (env *Env) openGPU(o EnvOptions) {
	switch {
	case o.GPU == nil:
		env.GPUWhy = "GPUs are not measured here"
		return
	case !env.enabled(gpuRegistration):
		return
	}
	opts := *o.GPU
	opts.Log = o.Log
	if opts.Path == "" {
		opts.Path = nvml.HelperPath()
	}
	nv := nvml.New(opts)
	env.GPU = nv
	env.GPUErrors = &GPUErrors{} // counted where the kernel's log is followed (Following)
	if st, err := os.Stat(opts.Path); err == nil && st.Mode().IsRegular() {
		go func() { _, _ = nv.Start(context.Background()) }()
	}
	// AMD's GPUs, where the amdgpu driver has any: beside NVIDIA's, after them.
	amd, err := OpenAMDGPUs(amdgpu.New(hostfs.New(o.Host.Path(cmp.Or(o.AMDGPUSysfs, "/sys")))), amdgpu.Options{})
	if err != nil {
		o.Log.Warn().Err(err).Msg("AMD GPUs: a card could not be read")
	}
	if amd != nil {
		env.GPU = &gpuSet{nv: nv, amd: amd}
	}
}
