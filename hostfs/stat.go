package hostfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// userHZ is the unit of /proc/stat's CPU times: USER_HZ, 100 on every architecture Linux
// runs HPC nodes on (the kernel converts to it whatever its own tick rate is).
const userHZ = 100

// maxCPUNumber bounds the CPU numbers /proc/stat may name (the kernel's NR_CPUS limit).
const maxCPUNumber = 1 << 16

// CPUTimes is one CPU's time since boot, in seconds: busy (user, nice, system, irq,
// softirq and steal; guest time is in user already), and of that the hypervisor's steal
// (the time the virtual CPU wanted to run and the host ran something else).
type CPUTimes struct{ Busy, Steal float64 }

// ParseCPUBusy reads the "cpuN" lines of /proc/stat: each CPU's busy time since boot in
// seconds (ParseCPUTimes), indexed by CPU number; a CPU the file does not list
// (offline) is -1.
func ParseCPUBusy(r io.Reader) ([]float64, error) {
	times, err := ParseCPUTimes(r)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(times))
	for i, t := range times {
		out[i] = t.Busy
	}
	return out, nil
}

// ParseCPUTimes reads the "cpuN" lines of /proc/stat: each CPU's busy and steal time
// since boot, indexed by CPU number; a CPU the file does not list (offline) is -1 in
// both. Reading stops at the first line after the CPU lines (the long "intr" line is
// never read).
func ParseCPUTimes(r io.Reader) ([]CPUTimes, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	var out []CPUTimes
	for n := 1; sc.Scan(); n++ {
		name, rest := Field(sc.Bytes())
		if !bytes.HasPrefix(name, []byte("cpu")) {
			if n == 1 {
				return nil, fmt.Errorf("line 1: want the cpu line, got %q", name)
			}
			break
		}
		if len(name) == 3 {
			continue // the total of all CPUs
		}
		cpu, ok := ParseUint(name[3:])
		if !ok || cpu >= maxCPUNumber {
			return nil, fmt.Errorf("line %d: CPU %q", n, name)
		}
		var ticks, steal uint64
		for i := 0; i < 8; i++ {
			var f []byte
			if f, rest = Field(rest); f == nil {
				if i < 7 {
					return nil, fmt.Errorf("line %d: %s has %d fields, want at least 7", n, name, i)
				}
				break // before 2.6.11: no steal
			}
			v, ok := ParseUint(f)
			if !ok {
				return nil, fmt.Errorf("line %d: %s field %d %q is not a number", n, name, i+1, f)
			}
			if i != 3 && i != 4 { // idle and iowait are not busy
				ticks += v
			}
			if i == 7 {
				steal = v
			}
		}
		for int(cpu) >= len(out) {
			out = append(out, CPUTimes{-1, -1})
		}
		out[cpu] = CPUTimes{Busy: float64(ticks) / userHZ, Steal: float64(steal) / userHZ}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cpuN line")
	}
	return out, nil
}
