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

// parseCPUList parses the kernel's CPU list format (cpuset.cpus, cpu/online); an empty
// list yields no CPUs. The result is sorted and without duplicates.
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
