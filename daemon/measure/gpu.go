package measure

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/persyst/persyst/nvml"
	"github.com/persyst/persyst/sample"
)

// The job's NVIDIA GPUs, read through persyst-nvml (package nvml). Values are summed over
// the job's GPUs on the node. A GPU's device-wide values (utilization, SM activity,
// energy, throttling, memory) count for the job only over intervals in which every
// process on the GPU is the job's, as RAPL counts only for a job alone on its node; a
// shared GPU (shards, MPS, a GPU Slurm gave out twice) keeps the memory of the job's own
// processes and says why the rest is not measured.
var gpuRegistration = Registration{Name: "gpu", Default: true, Metrics: vocabulary(gpuNames...),
	New: func(env *Env, spec *Spec) (Source, error) {
		return &gpuSource{prev: map[int]nvml.Reading{}, xids: map[int]float64{}, warned: map[int]bool{}}, nil
	}}

var gpuNames = []string{sample.GPUs, sample.GPUSlices, sample.GPUBusySeconds, sample.GPUUnusedSeconds, sample.GPUSMActiveSeconds,
	sample.GPUOccupancySeconds, sample.GPUTensorSeconds, sample.GPUDRAMSeconds, sample.GPUMemPeakBytes,
	sample.GPUMemTotalBytes, sample.GPUEnergyJoules, sample.GPUThermalSeconds, sample.GPUPowerCappedSeconds, sample.GPUErrors}

// gpuShared are the metrics a shared GPU does not give the job.
var gpuShared = []string{sample.GPUBusySeconds, sample.GPUUnusedSeconds, sample.GPUSMActiveSeconds,
	sample.GPUOccupancySeconds, sample.GPUTensorSeconds, sample.GPUDRAMSeconds, sample.GPUEnergyJoules,
	sample.GPUThermalSeconds, sample.GPUPowerCappedSeconds}

// gpuActivity maps the helper's cumulative activities to metrics: the seconds of the
// activity and the seconds they cover.
var gpuActivity = []struct{ key, cover, metric string }{
	{"busy", "util_s", sample.GPUBusySeconds},
	{"sm", "sm_s", sample.GPUSMActiveSeconds},
	{"occupancy", "occupancy_s", sample.GPUOccupancySeconds},
	{"tensor", "tensor_s", sample.GPUTensorSeconds},
	{"dram", "dram_s", sample.GPUDRAMSeconds},
}

// GPUFresh is how old a reading of the helper may be for another job's read to share it:
// the jobs of one cycle boundary are read one after another.
const GPUFresh = 250 * time.Millisecond

// unusedShare is the busy share under which a GPU ran nothing in an interval.
const unusedShare = 0.01

type gpuSource struct {
	prev   map[int]nvml.Reading // by NVML index, the previous read's
	xids   map[int]float64      // the driver's hardware error reports on the GPU so far
	alone  map[int]bool         // the GPU was the job's alone at the previous read
	warned map[int]bool         // a process of the job on a GPU it was not given, logged
	model  string               // the job's GPUs, vendor first (gpuModel), at the last read
}

// Method names the job's GPUs, vendor and model (sample.GPUModelMethod).
func (g *gpuSource) Method() (string, string) { return sample.GPUModelMethod, g.model }

// migInstances counts the GPUs idx of hello that are MIG instances.
func migInstances(hello nvml.Hello, idx []int) int {
	n := 0
	for _, d := range hello.Devices {
		if d.Parent >= 0 && slices.Contains(idx, d.Index) {
			n++
		}
	}
	return n
}

// gpuModel names the GPUs idx of hello, vendor first: one name where they are alike,
// else each with its count ("1 × NVIDIA H100, 2 × AMD Instinct MI210").
func gpuModel(hello nvml.Hello, idx []int) string {
	count := map[string]int{}
	var names []string
	for _, i := range idx {
		var d nvml.Device
		for _, x := range hello.Devices {
			if x.Index == i {
				d = x
				break
			}
		}
		vendor := cmp.Or(d.Vendor, "NVIDIA")
		name := cmp.Or(d.Name, vendor+" GPU")
		if !strings.HasPrefix(strings.ToUpper(name), strings.ToUpper(vendor)) {
			name = vendor + " " + name
		}
		if count[name] == 0 {
			names = append(names, name)
		}
		count[name]++
	}
	if len(names) == 1 {
		return names[0]
	}
	for i, n := range names {
		names[i] = fmt.Sprintf("%d × %s", count[n], n)
	}
	return strings.Join(names, ", ")
}

func (g *gpuSource) notMeasured(r *Read, why string) {
	for _, n := range gpuNames {
		r.NotMeasured(n, why)
	}
	clear(g.prev)
}

func (g *gpuSource) Read(r *Read) error {
	if len(r.Spec.GPUs) == 0 && !r.Spec.AllGPUs {
		return nil // no GPU: no GPU metrics, and nothing to say
	}
	hello, byIndex, idx, why := g.fetch(r)
	if why != "" {
		if r.Spec.AllGPUs && len(hello.Devices) == 0 {
			return nil // "every GPU" of a node without any: none
		}
		g.notMeasured(r, why)
		return nil
	}
	g.model = gpuModel(hello, idx)
	mine := jobPIDs(r)
	g.warnStray(r, byIndex, idx, mine)
	alone, memPeak, memTotal := gpuMemory(hello, byIndex, idx, mine)
	r.Sample.Job[sample.GPUs] = float64(len(idx))
	r.Sample.Job[sample.GPUSlices] = float64(migInstances(hello, idx))
	r.Sample.Job[sample.GPUMemTotalBytes] = memTotal
	errs, errsWhy := g.errors(r, hello, byIndex, idx)
	if r.Reason == sample.Start {
		g.prev, g.alone = byIndex, alone
		return nil
	}
	if errsWhy != "" {
		r.NotMeasured(sample.GPUErrors, errsWhy)
	} else {
		r.Sample.Job[sample.GPUErrors] = errs
	}
	r.Sample.Job[sample.GPUMemPeakBytes] = memPeak
	sum, missing, per := g.deltas(hello, byIndex, idx, alone, r.Sample.Seconds)
	r.Sample.GPU = per
	g.prev, g.alone = byIndex, alone
	for _, n := range gpuShared {
		if why, ok := missing[n]; ok {
			// One GPU without a value makes the job's sum wrong: not measured.
			r.NotMeasured(n, why)
			continue
		}
		if v, ok := sum[n]; ok {
			r.Sample.Job[n] = v
		}
	}
	return nil
}

// fetch reads the node's GPUs and picks the job's (idx, by NVML index); why says why
// there are none to measure.
func (g *gpuSource) fetch(r *Read) (hello nvml.Hello, byIndex map[int]nvml.Reading, idx []int, why string) {
	h := r.env.GPU
	if h == nil {
		if why = r.env.GPUWhy; why == "" {
			why = "GPUs are not measured here"
		}
		return hello, nil, nil, why
	}
	ctx := context.Background() // the helper bounds every request itself
	hello, err := h.Start(ctx)
	if err != nil {
		return hello, nil, nil, err.Error()
	}
	idx, unknown := matchGPUs(r.Spec.GPUs, r.Spec.AllGPUs, hello.Devices)
	if len(idx) == 0 {
		return hello, nil, nil, fmt.Sprintf("none of the job's GPUs (%s) is among the node's %d", strings.Join(unknown, ","), len(hello.Devices))
	}
	readings, err := h.Read(ctx, GPUFresh)
	if err != nil {
		return hello, nil, nil, err.Error()
	}
	byIndex = map[int]nvml.Reading{}
	for _, x := range readings {
		byIndex[x.Index] = x
	}
	return hello, byIndex, idx, ""
}

// jobPIDs are the job's processes now, as a set.
func jobPIDs(r *Read) map[int]bool {
	pids, _ := r.PIDs()
	if r.Spec.ExtraPIDs != nil {
		pids = append(pids, r.Spec.ExtraPIDs()...)
	}
	mine := make(map[int]bool, len(pids))
	for _, p := range pids {
		mine[p] = true
	}
	return mine
}

// gpuMemory says which of the job's GPUs are the job's alone (every process on them
// is the job's) and sums their memory: in use at its highest since the previous read on
// a GPU of the job's alone, the job's processes' on a shared one; total: the GPUs'.
func gpuMemory(hello nvml.Hello, byIndex map[int]nvml.Reading, idx []int, mine map[int]bool) (alone map[int]bool, peak, total float64) {
	alone = map[int]bool{}
	for _, i := range idx {
		cur := byIndex[i]
		alone[i] = cur.ProcsWhy == ""
		for _, p := range cur.Procs {
			if !mine[p.PID] {
				alone[i] = false
			}
		}
		for _, d := range hello.Devices {
			if d.Index == i {
				total += float64(d.Memory)
			}
		}
		if alone[i] {
			peak += cur.Values["mem_peak"]
			continue
		}
		for _, p := range cur.Procs {
			if mine[p.PID] {
				peak += float64(p.Memory)
			}
		}
	}
	return alone, peak, total
}

// deltas sums what the job's GPUs did since the previous read; missing names the
// metrics a GPU could not give, with why.
func (g *gpuSource) deltas(hello nvml.Hello, byIndex map[int]nvml.Reading, idx []int, alone map[int]bool, seconds float64) (sum map[string]float64, missing map[string]string, per []sample.GPUValues) {
	sum, missing = map[string]float64{}, map[string]string{}
	for _, i := range idx {
		cur, ok := byIndex[i]
		prev, had := g.prev[i]
		why := ""
		switch {
		case !ok:
			why = fmt.Sprintf("GPU %d gave no reading", i)
		case !had:
			why = "the GPUs were first read at this read"
		case cur.ProcsWhy != "":
			why = fmt.Sprintf("GPU %d's processes are not known (%s): it may be shared", i, cur.ProcsWhy)
		case !alone[i] || !g.alone[i]:
			why = fmt.Sprintf("GPU %d is shared with processes outside the job", i)
		}
		if why != "" {
			for _, n := range gpuShared {
				missing[n] = why
			}
			continue
		}
		dt := cur.Time - prev.Time
		if dt <= 0 {
			// The reading another job's read took a moment ago (GPUFresh): nothing new,
			// and no values for this short interval.
			continue
		}
		secs := seconds
		if secs <= 0 {
			secs = dt
		}
		per = append(per, activities(prev, cur, secs, hello, i, sum, missing))
		for _, c := range []struct {
			key, metric string
			scale       float64
		}{{"energy", sample.GPUEnergyJoules, 1e-3}, {"thermal_ns", sample.GPUThermalSeconds, 1e-9}, {"power_ns", sample.GPUPowerCappedSeconds, 1e-9}} {
			if v, ok := counterDelta(prev, cur, c.key); ok {
				sum[c.metric] += v * c.scale
			} else {
				missing[c.metric] = gpuWhy(cur, c.key, hello, i)
			}
		}
	}
	return sum, missing, per
}

// errors counts the hardware errors of the job's GPUs since the previous read: the
// increase of uncorrected ECC errors, and the driver's hardware Xid reports on the GPU
// (the kernel's log). A GPU's errors count for every job on it: a shared GPU's too.
func (g *gpuSource) errors(r *Read, hello nvml.Hello, byIndex map[int]nvml.Reading, idx []int) (n float64, why string) {
	counted := false
	for _, i := range idx {
		cur, prev := byIndex[i], g.prev[i]
		if d, ok := counterDelta(prev, cur, "ecc"); ok {
			n += d
			counted = true
		}
		if e := r.env.GPUErrors; e != nil {
			for _, d := range hello.Devices {
				c, ok := e.Count(d.Bus)
				if d.Index != i || d.Bus == "" || !ok {
					continue
				}
				if p, had := g.xids[i]; had && c > p {
					n += c - p
				}
				g.xids[i] = c
				counted = true
			}
		}
	}
	if !counted {
		return 0, "neither ECC (off, or not on these GPUs) nor the driver's reports in the kernel's log are read here"
	}
	return n, ""
}

// activities adds GPU i's activities between two readings to the job's sums, as
// GPU-seconds of an interval of secs, names those it could not give in missing, and
// returns the GPU's own values.
func activities(prev, cur nvml.Reading, secs float64, hello nvml.Hello, i int, sum map[string]float64, missing map[string]string) sample.GPUValues {
	one := sample.GPUValues{GPU: i, Values: map[string]float64{sample.GPUValueMemoryBytes: cur.Values["mem_peak"]}}
	for _, a := range gpuActivity {
		v, cov, ok := gpuDelta(prev, cur, a.key, a.cover)
		if !ok && a.key == "busy" {
			// No utilization samples (a MIG instance): GPM's graphics activity, the
			// time a kernel ran, measured the same way.
			v, cov, ok = gpuDelta(prev, cur, "gpm_busy", "gpm_busy_s")
		}
		switch {
		case !ok:
			missing[a.metric] = gpuWhy(cur, a.key, hello, i)
			continue
		case cov <= 0:
			// No sample of the driver's fell in the interval: unknown, not idle.
			missing[a.metric] = fmt.Sprintf("GPU %d: no NVML sample in the interval", i)
			continue
		}
		// A share of the interval: GPU-seconds on the interval's clock (the helper's
		// read is a few ms off the meter's, and an idle GPU must be idle for exactly
		// the interval, or "busy / (GPUs · seconds − unused)" divides by a rounding).
		share := min(max(v/cov, 0), 1)
		sum[a.metric] += share * secs
		switch a.key {
		case "busy":
			one.Values[sample.GPUValueBusySeconds] = share * secs
		case "sm":
			one.Values[sample.GPUValueSMActiveSeconds] = share * secs
		}
		if a.key == "busy" {
			sum[sample.GPUUnusedSeconds] += 0
			if share < unusedShare {
				sum[sample.GPUUnusedSeconds] += secs
			}
		}
	}
	if _, ok := missing[sample.GPUBusySeconds]; ok {
		missing[sample.GPUUnusedSeconds] = missing[sample.GPUBusySeconds]
	}
	return one
}

// gpuDelta returns the increase of the helper's cumulative key and of the seconds it
// covers between two readings.
func gpuDelta(prev, cur nvml.Reading, key, cover string) (v, cov float64, ok bool) {
	v, ok1 := counterDelta(prev, cur, key)
	cov, ok2 := counterDelta(prev, cur, cover)
	return v, cov, ok1 && ok2
}

// counterDelta is a cumulative value's increase; a value that went down (a driver
// reloaded, a helper restarted) has none.
func counterDelta(prev, cur nvml.Reading, key string) (float64, bool) {
	a, ok1 := prev.Values[key]
	b, ok2 := cur.Values[key]
	if !ok1 || !ok2 || b < a {
		return 0, false
	}
	return b - a, true
}

// gpuWhy says why GPU i has no value for the helper's key.
func gpuWhy(cur nvml.Reading, key string, hello nvml.Hello, i int) string {
	if why, ok := cur.NotMeasured[key]; ok {
		if gpuVendor(hello, i) == "AMD" {
			return fmt.Sprintf("GPU %d (AMD, %s): %s", i, AMDDriver, why)
		}
		return fmt.Sprintf("GPU %d: NVML: %s", i, why)
	}
	for _, d := range hello.Devices {
		if d.Index != i {
			continue
		}
		switch {
		case d.Parent >= 0 && (key == "energy" || strings.HasSuffix(key, "_ns")):
			return fmt.Sprintf("GPU %d is a MIG instance: its GPU's power and throttling are shared with the other instances", i)
		case key != "busy" && key != "energy" && !strings.HasSuffix(key, "_ns") && !d.GPM:
			return fmt.Sprintf("GPU %d (%s) has no GPU performance monitoring (GPM: Hopper and newer)", i, d.Name)
		case d.MIG && (key == "busy" || key == "energy"):
			return fmt.Sprintf("GPU %d is in MIG mode: NVML gives no device-wide %s for it", i, key)
		}
	}
	if len(hello.Absent) > 0 {
		return fmt.Sprintf("GPU %d: this driver (%s) lacks %s", i, hello.Driver, strings.Join(hello.Absent, ", "))
	}
	return fmt.Sprintf("GPU %d: NVML gave no %s", i, key)
}

// gpuVendor is GPU i's vendor ("NVIDIA", "AMD").
func gpuVendor(hello nvml.Hello, i int) string {
	for _, d := range hello.Devices {
		if d.Index == i {
			return d.Vendor
		}
	}
	return ""
}

// warnStray logs, once per GPU, a process of the job on a GPU it was not given.
func (g *gpuSource) warnStray(r *Read, byIndex map[int]nvml.Reading, idx []int, mine map[int]bool) {
	for _, x := range byIndex {
		if slices.Contains(idx, x.Index) || g.warned[x.Index] {
			continue
		}
		for _, p := range x.Procs {
			if mine[p.PID] {
				g.warned[x.Index] = true
				r.env.Log.Warn().Str("job", r.Spec.Name).Int("gpu", x.Index).Int("pid", p.PID).
					Ints("given", idx).Msg("a process of the job uses a GPU it was not given (check gres.conf and ConstrainDevices)")
				break
			}
		}
	}
}

// matchGPUs maps the job's GPU names to NVML indices: an index, "minor:N" (/dev/nvidiaN),
// "render:M" (an AMD GPU's /dev/dri/renderD<M>), "amd:N" (the N-th AMD GPU, as
// ROCR_VISIBLE_DEVICES counts them),
// a UUID or its prefix ("GPU-…", "MIG-…"), or a PCI bus id (domain optional). unknown
// are names no GPU has.
func matchGPUs(ids []string, all bool, devs []nvml.Device) (idx []int, unknown []string) {
	if all {
		for _, d := range devs {
			idx = append(idx, d.Index)
		}
		return idx, nil
	}
	var amd []int // the AMD GPUs' indices, in their order ("amd:N" is the N-th)
	for _, d := range devs {
		if d.Vendor == "AMD" {
			amd = append(amd, d.Index)
		}
	}
	for _, id := range ids {
		id = strings.TrimSpace(id)
		found := -1
		if n, err := strconv.Atoi(strings.TrimPrefix(id, "amd:")); err == nil && strings.HasPrefix(id, "amd:") {
			if n >= 0 && n < len(amd) {
				found = amd[n]
			}
		}
		for _, d := range devs {
			if found < 0 && gpuIs(d, id) {
				found = d.Index
				break
			}
		}
		if found < 0 {
			unknown = append(unknown, id)
			continue
		}
		if !slices.Contains(idx, found) {
			idx = append(idx, found)
		}
	}
	slices.Sort(idx)
	return idx, unknown
}

func gpuIs(d nvml.Device, id string) bool {
	switch {
	case id == "" || strings.HasPrefix(id, "amd:"):
		return false // "amd:N": matchGPUs counts the AMD GPUs
	case strings.HasPrefix(id, "minor:"):
		n, err := strconv.Atoi(strings.TrimPrefix(id, "minor:"))
		return err == nil && d.Vendor != "AMD" && d.Minor >= 0 && n == d.Minor
	case strings.HasPrefix(id, "render:"):
		n, err := strconv.Atoi(strings.TrimPrefix(id, "render:"))
		return err == nil && d.Vendor == "AMD" && d.Minor >= 0 && n == d.Minor
	case strings.HasPrefix(id, "GPU-") || strings.HasPrefix(id, "MIG-"):
		return d.UUID != "" && strings.HasPrefix(d.UUID, id)
	case strings.Contains(id, ":"):
		return d.Bus != "" && gpuBusKey(d.Bus) == gpuBusKey(id)
	}
	n, err := strconv.Atoi(id)
	return err == nil && n == d.Index
}

func (g *gpuSource) Close() error { return nil }
