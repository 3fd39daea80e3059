package hostfs

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/persyst/persyst/sample"
)

// OnlineCPUs returns the node's online CPUs.
func (f FS) OnlineCPUs() ([]int, error) {
	s, err := f.ReadString("sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	cpus, err := sample.ParseCPUList(s)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Path("sys/devices/system/cpu/online"), err)
	}
	return cpus, nil
}

// CgroupCPUs returns the CPUs a cpuset cgroup directory (v1 cpuset hierarchy or v2 with
// the cpuset controller) allows: cpuset.effective_cpus, else cpuset.cpus. ok is false when
// the directory has no cpuset files.
func (f FS) CgroupCPUs(dir string) (cpus []int, ok bool, err error) {
	for _, name := range []string{"cpuset.effective_cpus", "cpuset.cpus.effective", "cpuset.cpus"} {
		s, err := f.ReadString(dir, name)
		if err != nil || s == "" {
			continue
		}
		cpus, err := sample.ParseCPUList(s)
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", f.Path(dir, name), err)
		}
		return cpus, true, nil
	}
	return nil, false, nil
}

// cpuInt reads an integer file of a CPU's sysfs directory, or def.
func (f FS) cpuInt(cpu int, name string, def int) int {
	s, err := f.ReadString("sys/devices/system/cpu", "cpu"+strconv.Itoa(cpu), name)
	if err != nil {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// Topology returns the core and socket of each CPU; a CPU whose topology files are
// missing is its own core on socket 0.
func (f FS) Topology(cpus []int) []sample.CPUTopo {
	out := make([]sample.CPUTopo, len(cpus))
	for i, c := range cpus {
		out[i] = sample.CPUTopo{CPU: c, Core: f.cpuInt(c, "topology/core_id", c), Socket: f.cpuInt(c, "topology/physical_package_id", 0)}
	}
	return out
}

// PackageCPUs returns one of cpus per physical package (the lowest), from sysfs.
func (f FS) PackageCPUs(cpus []int) []int {
	first := map[int]int{}
	for _, c := range cpus {
		pkg := f.cpuInt(c, "topology/physical_package_id", 0)
		if x, ok := first[pkg]; !ok || c < x {
			first[pkg] = c
		}
	}
	var out []int
	for _, c := range first {
		out = append(out, c)
	}
	sort.Ints(out)
	return out
}

// CPUInfo is what /proc/cpuinfo says about the node's first processor.
type CPUInfo struct {
	Vendor string // "GenuineIntel", "AuthenticAMD" (x86 only)
	Family int
	Model  int
	Name   string // "model name"
	// Flags are the feature flags: the "flags" line on x86, "Features" on arm64.
	Flags string
}

// CPUInfo reads <root>/proc/cpuinfo.
func (f FS) CPUInfo() (CPUInfo, error) {
	r, err := f.Open("proc/cpuinfo")
	if err != nil {
		return CPUInfo{}, err
	}
	defer r.Close()
	info, err := ParseCPUInfo(r)
	if err != nil {
		return CPUInfo{}, fmt.Errorf("read %s: %w", r.Name(), err)
	}
	return info, nil
}

// ParseCPUInfo reads the first processor's vendor, family, model, name and flags. A
// cpuinfo without any of them (some arm64 kernels name no vendor) is not an error; a
// number that does not parse is, with its line.
func ParseCPUInfo(r io.Reader) (CPUInfo, error) {
	var info CPUInfo
	fields := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			if strings.TrimSpace(sc.Text()) == "" && fields > 0 {
				break // end of the first processor
			}
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var err error
		switch k {
		case "vendor_id":
			info.Vendor = v
		case "cpu family":
			info.Family, err = strconv.Atoi(v)
		case "model":
			info.Model, err = strconv.Atoi(v)
		case "model name":
			info.Name = v
		case "flags", "Features":
			info.Flags = v
		default:
			continue
		}
		fields++
		if err != nil {
			return CPUInfo{}, fmt.Errorf("line %d: %s: %w", line, k, err)
		}
	}
	if err := sc.Err(); err != nil {
		return CPUInfo{}, fmt.Errorf("cpuinfo: %w", err)
	}
	return info, nil
}
