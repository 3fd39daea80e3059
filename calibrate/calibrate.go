// Package calibrate measures what a node type can do, for the thresholds of the properties
// that depend on the hardware (`persyst calibrate`): its sustainable memory bandwidth
// (stream_bw_node, stream_bw_core) and its peak floating-point rate (peak_flops_core,
// peak_flops_node), next to what the node says about itself (properties.NodeFacts).
// Mundra's thesis on dynamic metric thresholds (§4, §6.3; docs/references.md) argues for
// such measured values over fixed numbers: thresholds follow the
// machine, and a sustainable peak (65–75 % of the theoretical one for memory) is what jobs
// can reach.
//
// Memory bandwidth: a STREAM-like benchmark (Stream) with one pinned thread per CPU, the
// arrays at least 4 × the last-level caches (STREAM's rule) and at most 1/8 of the memory
// (ArrayBytes). The calibrated stream_bw_node is the average of the best rates of the four
// kernels (copy, scale, add, triad), as PerSyst did (the PerSyst thesis, Table 7.10); triad, the
// figure usually quoted, is reported too. stream_bw_core is stream_bw_node / cores.
//
// Floating point: Go has no SIMD instructions (and no intrinsics for them), so only the
// scalar double-precision rate is measured (Flops: independent chains on every CPU at
// once, of math.FMA — one FMA instruction where the processor has it — and of a multiply
// and an add; the higher rate is kept, see Flops for why both). peak_flops_core is that
// rate per core times the number of double-precision lanes of the widest vector extension
// in /proc/cpuinfo's flags (VectorLanes: avx512f 8, avx2/avx 4, sse2/asimd 2). The vector
// factor is derived, not measured: it assumes the vector units issue as many operations
// per cycle as the scalar path, which holds for AMD Zen 2/3 and Intel cores with two
// 512-bit FMA units, over-estimates 2× on Zen 4 (512-bit operations double-pumped) and on
// Intel parts with one 512-bit FMA unit, and ignores the lower clock of wide vector code.
// The calibration's methods say so.
//
// "cores" are physical cores (hyperthreads count once, as in the core domain of the
// properties); per-core values divide node values by them.
//
// Run uses the whole node for its budget (default 10 s; 60 % memory, 40 % floating
// point): an admin command for an idle node. It refuses to run inside a cpuset that
// leaves out online CPUs, and never maps more than 1/8 of MemTotal or half of
// MemAvailable.
package calibrate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/properties"
)

// Options configure Run.
type Options struct {
	// Host is the root of /proc and /sys.
	Host hostfs.FS
	// Budget is the time for both benchmarks (default 10 s): 60 % memory, 40 % floating
	// point. The run ends within about twice the budget.
	Budget time.Duration
	// NodeType names the calibration (default: properties.NodeType of the processor
	// model and the online CPUs, as properties.LoadForNode looks it up).
	NodeType string
	// CPUs to run on (default: every online CPU, all of which must be in the process's
	// affinity mask). Fewer than the node's CPUs measure less than the node: for tests.
	CPUs []int
	// ArrayBytes overrides the size of each STREAM array, summed over the threads
	// (default: ArrayBytes of the last-level caches and the memory).
	ArrayBytes int64
	// Dir, if set, is where the calibration is written (properties.CalibrationFile).
	Dir string
	// Progress, if set, gets a line as each benchmark starts.
	Progress io.Writer
}

// Result is a calibration and how it was measured.
type Result struct {
	Calibration properties.Calibration `json:"calibration"`
	File        string                 `json:"file,omitempty"` // where it was written
	CPUs        int                    `json:"cpus"`           // threads of the benchmarks
	Cores       int                    `json:"cores"`
	LLCBytes    int64                  `json:"llc_bytes"`
	Stream      StreamResult           `json:"stream"`
	Flops       FlopsResult            `json:"flops"`
	Lanes       int                    `json:"lanes"`
	VectorExt   string                 `json:"vector_ext"`
	Elapsed     time.Duration          `json:"elapsed_ns"`
}

// Run measures this node and returns its calibration, written to o.Dir if set.
func Run(ctx context.Context, o Options) (Result, error) {
	t0 := time.Now()
	if o.Budget <= 0 {
		o.Budget = 10 * time.Second
	}
	if o.Dir != "" { // fail now rather than after the benchmarks
		if err := checkWritable(o.Dir); err != nil {
			return Result{}, err
		}
	}
	online, cpus, err := runCPUs(o)
	if err != nil {
		return Result{}, err
	}
	if o.NodeType == "" {
		info, _ := o.Host.CPUInfo() // as properties.LoadForNode: no model is "unknown"
		o.NodeType = properties.NodeType(info.Name, len(online))
	}
	res, arrayBytes, err := survey(o.Host, cpus, o.ArrayBytes)
	if err != nil {
		return Result{}, err
	}
	if err := benchmark(ctx, o, cpus, arrayBytes, &res); err != nil {
		return res, err
	}
	res.Calibration = calibration(o.Host, o.NodeType, len(online), len(cpus), res)
	if o.Dir != "" {
		if res.File, err = Save(o.Dir, res.Calibration); err != nil {
			return res, err
		}
	}
	res.Elapsed = time.Since(t0)
	return res, nil
}

// runCPUs is the node's online CPUs and those the benchmarks run on: o.CPUs, or
// else every online CPU, provided this process may run on all of them.
func runCPUs(o Options) (online, cpus []int, err error) {
	online, err = onlineCPUs(o.Host)
	if err != nil {
		return nil, nil, err
	}
	cpus = o.CPUs
	if len(cpus) == 0 {
		if err := checkAffinity(online); err != nil {
			return nil, nil, err
		}
		cpus = online
	}
	return online, cpus, nil
}

// survey reads what the benchmarks need to know of the node before they start: its
// physical cores and last-level caches below the CPUs, its vector extension, and the
// size of the STREAM arrays (arrayBytes if positive, else from the caches and the
// memory). The Result it starts has those filled in.
func survey(h hostfs.FS, cpus []int, arrayBytes int64) (Result, int64, error) {
	fsys := h.Dir()
	res := Result{CPUs: len(cpus), Cores: PhysicalCores(fsys, cpus)}
	var err error
	if res.LLCBytes, err = LLCBytes(fsys, cpus); err != nil {
		return Result{}, 0, err
	}
	var mem hostfs.MemInfo
	if _, err := os.Stat(h.Path("proc/meminfo")); err == nil {
		if mem, err = h.MemInfo(); err != nil {
			return Result{}, 0, err
		}
	}
	info, _ := h.CPUInfo() // no flags: scalar
	res.Lanes, res.VectorExt = VectorLanes(info.Flags)
	if arrayBytes <= 0 {
		arrayBytes = ArrayBytes(res.LLCBytes, mem.Total, mem.Available)
	}
	return res, arrayBytes, nil
}

// benchmark runs the memory-bandwidth benchmark on 60 % of the budget, then the
// floating-point one on 40 %, into res. On an error res keeps what was measured.
func benchmark(ctx context.Context, o Options, cpus []int, arrayBytes int64, res *Result) error {
	var err error
	progress(o.Progress, "persyst calibrate: %s: memory bandwidth, %d threads, 3 arrays of %s (%.1f s)",
		o.NodeType, len(cpus), fmtSize(arrayBytes), 0.6*o.Budget.Seconds())
	if res.Stream, err = Stream(ctx, StreamOptions{CPUs: cpus, ArrayBytes: arrayBytes, Duration: o.Budget * 6 / 10}); err != nil {
		return err
	}
	progress(o.Progress, "persyst calibrate: %s: floating point, %d threads (%.1f s)", o.NodeType, len(cpus), 0.4*o.Budget.Seconds())
	if res.Flops, err = Flops(ctx, FlopsOptions{CPUs: cpus, Duration: o.Budget * 4 / 10}); err != nil {
		return err
	}
	return nil
}

// calibration is the calibration of node type nodeType from a run's measurements
// (res, on cpus CPUs) and what the node says about itself (online CPUs of host h),
// each value with how it was obtained. Values that are not positive are left out,
// as properties.LoadCalibration refuses them.
func calibration(h hostfs.FS, nodeType string, online, cpus int, res Result) properties.Calibration {
	cal := properties.Calibration{NodeType: nodeType, Measured: time.Now().UTC().Truncate(time.Second),
		Values: map[string]float64{}, Methods: map[string]string{}}
	addFacts(&cal, h, online)
	addMeasured(&cal, res, cpus)
	for k, v := range cal.Values {
		if !(v > 0) {
			delete(cal.Values, k)
			delete(cal.Methods, k)
		}
	}
	return cal
}

// addFacts adds what the node says about itself (properties.NodeFacts), with the
// method of each fact it has.
func addFacts(cal *properties.Calibration, h hostfs.FS, online int) {
	for k, v := range properties.NodeFacts(h, online) {
		cal.Values[k] = v
	}
	cal.Methods["mem_total_bytes"] = "MemTotal of /proc/meminfo"
	cal.Methods["max_freq_hz"] = "cpufreq cpuinfo_max_freq of CPU 0"
	cal.Methods["min_freq_hz"] = "cpufreq cpuinfo_min_freq of CPU 0"
	for k := range cal.Methods {
		if _, ok := cal.Values[k]; !ok {
			delete(cal.Methods, k)
		}
	}
}

// addMeasured adds the values derived from the benchmarks: cores, the STREAM
// bandwidths and the floating-point peaks. The methods say how each was measured
// and, for the vector factor, what it assumes.
func addMeasured(cal *properties.Calibration, res Result, cpus int) {
	cores := float64(res.Cores)
	s, f := res.Stream, res.Flops
	cal.Values["cores"] = cores
	cal.Methods["cores"] = fmt.Sprintf("physical cores (distinct package and core_id in sysfs topology) of the %d CPUs measured", cpus)
	cal.Values["stream_bw_node"] = s.Average()
	cal.Methods["stream_bw_node"] = fmt.Sprintf("average of the best rates of the 4 STREAM kernels (the PerSyst thesis, Table 7.10): "+
		"copy %s/s, scale %s/s, add %s/s, triad %s/s; Go loops, one thread pinned to each of %d CPUs, each mapping and "+
		"first-touching its share of 3 arrays of %s (at least 4 x the last-level caches of %s), all threads started by a barrier, "+
		"best of %d rounds after a warm-up, bytes counted as STREAM does (no write-allocate)",
		fmtBytes(s.Copy), fmtBytes(s.Scale), fmtBytes(s.Add), fmtBytes(s.Triad), cpus,
		fmtSize(s.ArrayBytes), fmtSize(res.LLCBytes), max(s.Rounds-1, 1))
	cal.Values["stream_bw_core"] = s.Average() / cores
	cal.Methods["stream_bw_core"] = "stream_bw_node / cores"
	scalarCore := f.Scalar() / cores
	cal.Values["peak_flops_core"] = scalarCore * float64(res.Lanes)
	cal.Methods["peak_flops_core"] = fmt.Sprintf("measured scalar double-precision rate per core %s flop/s (%s, 2 flops per step, all %d CPUs at once, "+
		"best round; math.FMA %s, multiply-add %s for the node) x %d lanes of %s from /proc/cpuinfo flags. "+
		"The vector factor is derived, not measured: Go has no SIMD instructions, so the benchmark cannot run vector code; "+
		"it assumes the vector units issue as many operations per cycle as the scalar path",
		fmtNum(scalarCore), f.Kernel(), cpus, fmtNum(f.FMARate), fmtNum(f.MulAddRate), res.Lanes, res.VectorExt)
	cal.Values["peak_flops_node"] = cal.Values["peak_flops_core"] * cores
	cal.Methods["peak_flops_node"] = "peak_flops_core x cores"
}

// Save writes a calibration to properties.CalibrationFile(dir, c.NodeType) atomically (a
// temporary file renamed over it), creating dir (0755) if needed.
func Save(dir string, c properties.Calibration) (string, error) {
	if c.NodeType == "" || strings.ContainsAny(c.NodeType, `/\`) || c.NodeType == "." || c.NodeType == ".." {
		return "", fmt.Errorf("calibration: bad node type %q", c.NodeType)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := properties.CalibrationFile(dir, c.NodeType)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".tmp*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing of that name is left
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return "", err
	}
	if d, err := os.Open(dir); err == nil { // the rename itself durable
		d.Sync()
		d.Close()
	}
	return p, nil
}

// checkWritable creates dir (0755) if needed and checks that a file can be created in it.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".calibrate-check*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// Text is the short human summary of a run.
func Text(r Result) string {
	var b strings.Builder
	c := r.Calibration
	fmt.Fprintf(&b, "node type %s: %d CPUs, %d cores, last-level caches %s, %.1f s\n",
		c.NodeType, r.CPUs, r.Cores, fmtSize(r.LLCBytes), r.Elapsed.Seconds())
	if r.File != "" {
		fmt.Fprintf(&b, "written to %s\n", r.File)
	}
	s, f := r.Stream, r.Flops
	fmt.Fprintf(&b, "\nmemory bandwidth, STREAM counting (3 arrays of %s, best of %d rounds)\n", fmtSize(s.ArrayBytes), max(s.Rounds-1, 1))
	for _, k := range []struct {
		name string
		v    float64
	}{{"copy", s.Copy}, {"scale", s.Scale}, {"add", s.Add}, {"triad", s.Triad}} {
		fmt.Fprintf(&b, "  %-8s %10s/s\n", k.name, fmtBytes(k.v))
	}
	fmt.Fprintf(&b, "  %-8s %10s/s   -> stream_bw_node\n", "average", fmtBytes(s.Average()))
	fmt.Fprintf(&b, "\nfloating point, scalar double precision, all CPUs (best of %d rounds per kernel)\n", f.Rounds/max(f.Kernels(), 1))
	if f.FMA {
		fmt.Fprintf(&b, "  %-12s %10s flop/s\n", "math.FMA", fmtNum(f.FMARate))
	} else {
		fmt.Fprintf(&b, "  %-12s %10s\n", "math.FMA", "no FMA")
	}
	fmt.Fprintf(&b, "  %-12s %10s flop/s\n", "multiply-add", fmtNum(f.MulAddRate))
	fmt.Fprintf(&b, "  per core %s flop/s x %d lanes (%s, derived from the CPU flags, not measured)\n",
		fmtNum(f.Scalar()/float64(max(r.Cores, 1))), r.Lanes, r.VectorExt)
	fmt.Fprintf(&b, "\ncalibration values\n")
	for _, k := range []string{"stream_bw_node", "stream_bw_core", "peak_flops_core", "peak_flops_node", "cores", "mem_total_bytes", "max_freq_hz", "min_freq_hz"} {
		v, ok := c.Values[k]
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "stream_bw"):
			fmt.Fprintf(&b, "  %-16s %10s/s\n", k, fmtBytes(v))
		case k == "mem_total_bytes":
			fmt.Fprintf(&b, "  %-16s %10s\n", k, fmtSize(int64(v)))
		case k == "cores":
			fmt.Fprintf(&b, "  %-16s %10.0f\n", k, v)
		case strings.HasSuffix(k, "_hz"):
			fmt.Fprintf(&b, "  %-16s %10sHz\n", k, fmtNum(v))
		default:
			fmt.Fprintf(&b, "  %-16s %10s flop/s\n", k, fmtNum(v))
		}
	}
	return b.String()
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// fmtBytes prints a rate in decimal units (GB/s, as STREAM does).
func fmtBytes(v float64) string {
	return fmtNum(v) + "B"
}

// fmtSize prints a size in binary units.
func fmtSize(n int64) string {
	for _, u := range []struct {
		f int64
		s string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.f {
			return fmt.Sprintf("%.3g %s", float64(n)/float64(u.f), u.s)
		}
	}
	return fmt.Sprintf("%d B", n)
}

func fmtNum(v float64) string {
	for _, u := range []struct {
		f float64
		s string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= u.f {
			return fmt.Sprintf("%.3g %s", v/u.f, u.s)
		}
	}
	return fmt.Sprintf("%.3g ", v)
}

// onlineCPUs reads sys/devices/system/cpu/online under the root; without it, the CPUs of
// the process's affinity mask.
func onlineCPUs(h hostfs.FS) ([]int, error) {
	if _, err := os.Stat(h.Path("sys/devices/system/cpu/online")); err == nil {
		return h.OnlineCPUs()
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	var out []int
	for c := 0; c < len(set)*64 && len(out) < set.Count(); c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		for c := range runtime.NumCPU() {
			out = append(out, c)
		}
	}
	return out, nil
}

// checkAffinity refuses to calibrate a node on part of it (inside a job's or a
// service's cpuset): the bandwidth of the node would be that of fewer cores.
func checkAffinity(cpus []int) error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("affinity: %w", err)
	}
	var missing []string
	for _, c := range cpus {
		if !set.IsSet(c) {
			missing = append(missing, fmt.Sprint(c))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("this process may not run on CPUs %s of the %d online ones (a job's or a service's cpuset?): "+
			"calibrate the node from outside any cpuset", strings.Join(missing, ","), len(cpus))
	}
	return nil
}
