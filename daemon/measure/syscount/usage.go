package syscount

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// CPUSplit is a cgroup's CPU time (all its threads', on every CPU) by how its calls were
// counted meanwhile: in sampled windows, or not at all (the time counted whole is not
// kept: nothing is estimated for it).
//
// Why: the calls of the time not counted are estimated from those of the windows. By the
// wall clock (Unseen) a burst that ends between two windows is taken for a storm that
// went on (a job that opens 300,000 files in 1.2 s, then sleeps, was estimated at -21 to
// +55 %); a job's system calls come with its CPU time, which stops when it sleeps.
type CPUSplit struct{ Sampled, Off time.Duration }

// Sub is a's times less b's.
func (a CPUSplit) Sub(b CPUSplit) CPUSplit {
	return CPUSplit{Sampled: a.Sampled - b.Sampled, Off: a.Off - b.Off}
}

// cgroupCPU is one cgroup's cpu.stat, kept open, and its CPU time split so far.
type cgroupCPU struct {
	f     *os.File
	buf   []byte
	last  time.Duration // usage_usec at the last reading
	split CPUSplit
}

// read is the cgroup's CPU time now (cpu.stat's usage_usec, there on cgroup v2 without
// the cpu controller too).
func (u *cgroupCPU) read() (time.Duration, error) {
	n, err := unix.Pread(int(u.f.Fd()), u.buf, 0)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", u.f.Name(), err)
	}
	d, err := parseUsage(u.buf[:n])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", u.f.Name(), err)
	}
	return d, nil
}

// parseUsage is the usage_usec line of a cgroup v2 cpu.stat.
func parseUsage(b []byte) (time.Duration, error) {
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("usage_usec ")); ok {
			us, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("usage_usec: %w", err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, errors.New("no usage_usec")
}

// account adds the CPU time since the last reading to the way the calls were counted
// meanwhile: counting whole (dropped), in windows (sampled), or not (off).
func (u *cgroupCPU) account(counting, sampled bool) {
	now, err := u.read()
	if err != nil {
		return // the cgroup is going: its split stays as it was
	}
	d := max(now-u.last, 0)
	u.last = now
	switch {
	case !counting:
		u.split.Off += d
	case sampled:
		u.split.Sampled += d
	}
}

// Usage has the sampler split cgroup id's CPU time by how its calls were counted
// (CPUTime): dir is its directory on the cgroup v2 hierarchy, whose cpu.stat is read at
// each turn of the programs (a window's start and end: twice a Period for each watched
// cgroup while sampling; never while every call is counted). Unwatch ends it.
func (c *Counter) Usage(id uint64, dir string) error {
	f, err := os.Open(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return fmt.Errorf("syscount: CPU time of cgroup %d: %w", id, err)
	}
	u := &cgroupCPU{f: f, buf: make([]byte, 512)}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, watched := c.usages[id]
	if c.closed || watched {
		f.Close()
		return errors.New("syscount: CPU time of cgroup " + strconv.FormatUint(id, 10) + ": closed, or split already")
	}
	if u.last, err = u.read(); err != nil {
		f.Close()
		return fmt.Errorf("syscount: %w", err)
	}
	c.usages[id] = u
	return nil
}

// CPUTime is cgroup id's CPU time so far by how its calls were counted; false where it
// is not split (Usage).
func (c *Counter) CPUTime(id uint64) (CPUSplit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.usages[id]
	if !ok {
		return CPUSplit{}, false
	}
	if !c.progs.counting() || c.progs.sampled {
		// The time since the last turn is in the split now; counted whole, it is left
		// to the next turn (no reading while every call is counted).
		u.account(c.progs.counting(), c.progs.sampled)
	}
	return u.split, true
}

// cpuSplits are the watched cgroups' CPU time splits (Counter.Usage) by cgroup id. Their
// user (Counter) holds its lock around them.
type cpuSplits map[uint64]*cgroupCPU

// turn accounts each cgroup's CPU time up to now to the way the calls were counted until
// now: the programs call it where they change that.
func (s cpuSplits) turn(counting, sampled bool) {
	for _, u := range s {
		u.account(counting, sampled)
	}
}

// drop ends cgroup id's split.
func (s cpuSplits) drop(id uint64) {
	if u, ok := s[id]; ok {
		u.f.Close()
		delete(s, id)
	}
}

// MinSampledCPU is the least CPU time of a cgroup in sampled windows that its calls
// not counted are estimated from (UnseenCPU); NoneOff the most CPU time not counted that
// is taken for none (a storm makes a few hundred calls in it).
const (
	MinSampledCPU = time.Millisecond
	NoneOff       = 100 * time.Microsecond
)

// UnseenCPU says how to estimate a cgroup's calls in the CPU time it spent while they
// were not counted (d.Off), from the calls counted in its windows (sampled, of all
// kinds): each stands for perSampled more, d.Off over the windows' CPU time less what
// counting cost those calls (cost each, at most a third of it, against a cost measured
// high: a storm's calls on the test machine spent 13 to 22 % of the windows' CPU time
// being counted, and a probe measured high, as under emulation, would otherwise double
// the estimate). ok is false where the windows hold less than MinSampledCPU.
func UnseenCPU(d CPUSplit, sampled float64, cost time.Duration) (perSampled float64, ok bool) {
	if d.Sampled < MinSampledCPU {
		return 0, false
	}
	net := max(d.Sampled.Seconds()-sampled*cost.Seconds(), d.Sampled.Seconds()*2/3)
	return max(d.Off.Seconds(), 0) / net, true
}
