package measure

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/persyst/persyst/daemon/wire"
)

// ParseCPUList parses the kernel's CPU list format (cpuset.cpus, cpu/online, "0-3,8");
// an empty list yields no CPUs. The result is sorted and without duplicates.
func ParseCPUList(s string) ([]int, error) { return parseCPUList(s) }

func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	cpus, err := wire.ParseCPUList(s)
	if err != nil {
		return nil, err
	}
	sort.Ints(cpus)
	return slices.Compact(cpus), nil
}

// FS is a view of a filesystem rooted at Root ("/" in production).
type FS struct{ Root string }

// OnlineCPUs returns the node's online CPUs.
func (fs FS) OnlineCPUs() ([]int, error) {
	p := filepath.Join(fs.Root, "sys/devices/system/cpu/online")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	cpus, err := parseCPUList(string(b))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return cpus, nil
}

// CgroupCPUs returns the CPUs a cpuset cgroup directory (v1 cpuset hierarchy or v2 with
// the cpuset controller) allows: cpuset.effective_cpus, else cpuset.cpus. ok is false when
// the directory has no cpuset files.
func (fs FS) CgroupCPUs(dir string) (cpus []int, ok bool, err error) {
	for _, name := range []string{"cpuset.effective_cpus", "cpuset.cpus.effective", "cpuset.cpus"} {
		p := filepath.Join(fs.Root, dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.TrimSpace(string(b)) == "" {
			continue
		}
		cpus, err := parseCPUList(string(b))
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", p, err)
		}
		return cpus, true, nil
	}
	return nil, false, nil
}

// FormatCPUList renders CPUs in the kernel's list format ("0-3,8").
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

var errNotExist = fs.ErrNotExist

// CPUTopo says where a CPU sits: its core and socket (package), from sysfs. Core ids are
// unique only within a socket.
type CPUTopo struct {
	CPU    int `json:"cpu"`
	Core   int `json:"core"`
	Socket int `json:"socket"`
}

// Topology returns the core and socket of each CPU; a CPU whose topology files are
// missing is its own core on socket 0.
func (fs FS) Topology(cpus []int) []CPUTopo {
	read := func(cpu int, name string, def int) int {
		b, err := os.ReadFile(filepath.Join(fs.Root, "sys/devices/system/cpu", "cpu"+strconv.Itoa(cpu), "topology", name))
		if err != nil {
			return def
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return def
		}
		return n
	}
	out := make([]CPUTopo, len(cpus))
	for i, c := range cpus {
		out[i] = CPUTopo{CPU: c, Core: read(c, "core_id", c), Socket: read(c, "physical_package_id", 0)}
	}
	return out
}

// Core identifies a physical core.
type Core struct{ Socket, Core int }

// PerCore adds per-CPU values up per physical core (hyperthreads share one), the "core"
// device level of PerSyst's properties.
func PerCore(values []CPUValues, topo []CPUTopo) map[Core]map[string]float64 {
	where := make(map[int]Core, len(topo))
	for _, t := range topo {
		where[t.CPU] = Core{t.Socket, t.Core}
	}
	out := map[Core]map[string]float64{}
	for _, v := range values {
		k, ok := where[v.CPU]
		if !ok {
			k = Core{0, v.CPU}
		}
		if out[k] == nil {
			out[k] = map[string]float64{}
		}
		for name, x := range v.Values {
			out[k][name] += x
		}
	}
	return out
}
