package sample

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPUs bounds a CPU list: ParseCPUList refuses lists of more CPUs than this, or CPU
// ids above MaxCPUID (input from the plugin and from Slurm is bounded).
const (
	MaxCPUs  = 65536
	MaxCPUID = 1 << 20
)

// ParseCPUList parses the kernel's and Slurm's CPU list format ("0-3,8,10-11", as in
// cpuset.cpus or /sys/devices/system/cpu/online) into CPU ids, sorted and without
// duplicates. The format is strict: no spaces (trim a file's newline first), no empty
// items; an error quotes the list.
func ParseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := cpuID(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = cpuID(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("cpu list %q: range %s is backwards", s, part)
			}
		}
		if len(out)+(b-a+1) > MaxCPUs {
			return nil, fmt.Errorf("cpu list %q: more than %d CPUs", s, MaxCPUs)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func cpuID(s string) (int, error) {
	if s == "" || len(s) > 7 {
		return 0, fmt.Errorf("bad cpu id %q", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxCPUID {
		return 0, fmt.Errorf("bad cpu id %q", s)
	}
	return n, nil
}

// FormatCPUList renders sorted CPUs in the kernel's list format ("0-3,8").
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
