package syscount

import (
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Sampling bounds what the raw tracepoint costs the programs of the node. Attached, it
// sends every system call of the node through the kernel's slow path and the program
// (tens to hundreds of ns each), counted or not, whoever makes it: a program making
// system calls without pause is slowed by that cost times its call rate. Budget is the
// most that extra time may be, all calls of the node together, as a share of one CPU's
// time (persyst.conf's SyscallBudget), so that no program, measured or not, is slowed by
// more: while the node's calls would cost more, the program is attached only for a
// share of each Period (a power of two, at least MinShare), and the counts are scaled
// to the whole time (AttachedTime, Cost); a job's counts are then an estimate, and say
// so. All calls may first spend Burst of extra time (a credit, earned back at Budget of
// the time), so that bursts (10,000 opens take a few ms) are counted in full: the
// estimate is good for a steady storm, and poor for a burst that falls partly between
// samples. (The calls of one CPU would not do as the measure: a program's threads move
// between CPUs.) fentry programs cost only the calls they count and are never sampled.
type Sampling struct {
	Period   time.Duration // default 1 s
	Budget   float64       // share of one CPU's time; 0: no sampling
	MinShare float64       // default 1/64
	// Burst is the extra time the node's calls may cost before they are sampled (default
	// Budget × 4 s: 20 ms at 0.5 %).
	Burst time.Duration
}

// While the program is attached for whole periods, the calls are looked at every
// checkQuiet, and every checkBusy once they cost more than the budget: a storm is sampled
// within that once the credit is spent, and a quiet node's daemon wakes 4 times a second.
const (
	checkQuiet = 250 * time.Millisecond
	checkBusy  = 50 * time.Millisecond
)

func (s Sampling) withDefaults() Sampling {
	if s.Period <= 0 {
		s.Period = time.Second
	}
	if s.MinShare <= 0 || s.MinShare > 1 {
		s.MinShare = 1.0 / 64
	}
	if s.Burst <= 0 {
		s.Burst = time.Duration(s.Budget * float64(4*time.Second))
	}
	return s
}

// shareFor is the share of a period to stay attached when the node's system calls cost
// load of one CPU's time more while attached, and credit is what is left of the Burst.
func shareFor(load float64, credit time.Duration, s Sampling) float64 {
	if s.Budget <= 0 || load <= s.Budget || credit > 0 {
		return 1
	}
	share := math.Exp2(math.Floor(math.Log2(s.Budget / load)))
	return min(max(share, s.MinShare), 1)
}

// startSampler starts adapting the share of the raw tracepoint (c.mu held).
func (c *Counter) startSampler() {
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go c.sample(c.stop, c.done)
}

// stopSampler ends the sampler (c.mu held); it does not wait for it: the sampler
// checks stop under c.mu before it touches the links.
func (c *Counter) stopSampler() {
	if c.stop != nil {
		close(c.stop)
		c.stop, c.done = nil, nil
	}
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// sleep waits d or until stop; false if stopped.
func sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// sample runs the periods: attached for share × Period (looked at every checkQuiet or
// checkBusy while attached throughout), the node's calls counted meanwhile, the next
// share chosen from what they cost and the credit left, detached for the rest.
func (c *Counter) sample(stop, done chan struct{}) {
	defer close(done)
	s := c.sampling
	credit := s.Burst
	check := checkQuiet
	for {
		c.mu.Lock()
		if stopped(stop) {
			c.mu.Unlock()
			return
		}
		if !c.progs.linked() {
			if err := c.progs.link(); err != nil {
				c.mu.Unlock()
				return // counted no longer: the reads' AttachedTime stops growing
			}
		}
		share := c.share
		c.mu.Unlock()
		left := time.Duration(float64(s.Period) * share)
		for left > 0 {
			step := left
			if share == 1 {
				step = min(left, check)
			}
			c.mu.Lock()
			a0, t0 := c.nodeCalls(), c.now()
			c.mu.Unlock()
			if !sleep(step, stop) {
				return
			}
			left -= step
			c.mu.Lock()
			if stopped(stop) {
				c.mu.Unlock()
				return
			}
			dt := max(c.now().Sub(t0), time.Millisecond)
			spent := time.Duration(c.nodeCalls()-a0) * c.cost
			credit = min(max(credit+time.Duration(s.Budget*float64(dt))-spent, -s.Burst), s.Burst)
			load := float64(spent) / float64(dt)
			check = checkQuiet
			if load > s.Budget {
				check = checkBusy
			}
			next := shareFor(load, credit, s)
			c.share = next
			c.mu.Unlock()
			if next != share {
				break
			}
		}
		c.mu.Lock()
		if stopped(stop) {
			c.mu.Unlock()
			return
		}
		off := time.Duration(0)
		if c.share < 1 || c.cost == 0 {
			// What a call costs more attached, timed on both sides of each detach (the
			// median of the last ones: the sampler shares its CPU with the storm). While
			// the cost is not known (the calibration drowned in noise), the programs are
			// detached for a probe's time at the end of each Period to learn it: without
			// it no budget could be kept.
			on := c.timeCounted(probeCalls, 3)
			c.progs.unlink()
			c.costs.add((on - timeCalls(probeCalls, 3)) / probeCalls)
			c.cost = c.costs.median()
			if c.share < 1 {
				off = untilWindow(c.now(), s.Period, c.share)
			}
		}
		c.mu.Unlock()
		// Between the samples the credit is earned back.
		credit = min(credit+time.Duration(s.Budget*float64(off)), s.Burst)
		if off > 0 && !sleep(off, stop) {
			return
		}
	}
}

// untilWindow is how long to stay detached from now: sampled windows begin half a
// Period after a multiple of Period on the wall clock, less half their length, so that
// each of the reads persyst takes at multiples of its cycle (whole seconds) falls
// between two windows and no interval of a cycle of a Period or longer is without one.
func untilWindow(now time.Time, period time.Duration, share float64) time.Duration {
	start := now.Truncate(period).Add(period/2 - time.Duration(float64(period)*share/2))
	for !start.After(now) {
		start = start.Add(period)
	}
	return start.Sub(now)
}

// nodeCalls is the node's system calls counted while attached, all CPUs' (c.mu held).
func (c *Counter) nodeCalls() uint64 {
	if err := c.all.Lookup(uint32(0), c.calls); err != nil {
		return 0
	}
	var n uint64
	for _, v := range c.calls {
		n += v
	}
	return n
}

// Budget is the most counting may slow a program (Sampling.Budget; 0: every call).
func (c *Counter) Budget() float64 { return c.sampling.Budget }

// AttachedTime returns the time now and how long the programs have been attached in
// all up to it: a cgroup's counts between two reads cover the part of the time between
// them that the attached time grew by.
func (c *Counter) AttachedTime() (now time.Time, attached time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.progs.attachedTime()
}

// Share is the share of each period the raw tracepoint is attached now (1: always).
func (c *Counter) Share() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watched == 0 {
		return 1
	}
	return c.share
}

// Cost is what one system call costs more while the raw tracepoint is attached (0 in
// fentry mode, before the first Watch, or while not measurable).
func (c *Counter) Cost() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cost
}

// calibrate measures the cost at the first Watch (c.mu held, the programs linked, no
// cgroup watched yet: detaching loses no count): costCalls calls timed attached and
// detached in turn, calibrateRounds times, the best of each, so that both sides see
// the same CPU speed and noise (which only adds time) drops out. Where even so the
// difference is not positive, the cost stays 0 and the sampler probes for it.
func (c *Counter) calibrate() error {
	on, off := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range calibrateRounds {
		on = min(on, c.timeCounted(costCalls, 1))
		c.progs.unlink()
		off = min(off, timeCalls(costCalls, 1))
		if err := c.progs.link(); err != nil {
			return err
		}
	}
	c.cost = max((on-off)/costCalls, 0)
	if c.cost > 0 {
		c.costs.add(c.cost)
	}
	return nil
}

// timeCounted times n calls (timeCalls) counted as a measured job's are: a counted call
// finds its cgroup in the counts map and adds to its counts, which costs more than the
// miss of an unmeasured call (about a fifth more here), so that the key this process's
// calls look up first is watched meanwhile, unless it is watched already (c.mu held).
func (c *Counter) timeCounted(n, rounds int) time.Duration {
	if key, ok := c.probeKey(); ok && c.counts.Update(key, c.zeros, ebpf.UpdateNoExist) == nil {
		defer c.counts.Delete(key)
	}
	return timeCalls(n, rounds)
}

// probeKey is the key this process's calls look up at the first watched level: its
// cgroup's ancestor there, or 0 where it lies higher (the kernel's helper gives 0 then,
// which is also the guess where Self is not known).
func (c *Counter) probeKey() (uint64, bool) {
	if len(c.lv) == 0 {
		return 0, false
	}
	level := int(c.lv[0])
	if c.self == "" {
		return 0, true
	}
	depth, err := Level(c.mount, c.self)
	if err != nil {
		return 0, false
	}
	if level > depth {
		return 0, true
	}
	dir := c.self
	for range depth - level {
		dir = filepath.Dir(dir)
	}
	id, err := CgroupID(dir)
	return id, err == nil
}

// costCalls is how many counted system calls (opens of / for its path, and closes)
// each of calibrate's timings makes: about a millisecond each, 5 ms in all, once. A
// counted call pays the lookup of the caller's cgroup at each watched level besides the
// slow path. While sampling, probeCalls are timed on both sides of each detach, and the
// cost is the median of the last costSamples.
const (
	costCalls       = 2000
	calibrateRounds = 3
	probeCalls      = 128
	costSamples     = 15
)

// timeCalls times n calls, the best of rounds.
func timeCalls(n, rounds int) time.Duration {
	best := time.Duration(math.MaxInt64)
	for range rounds {
		t := time.Now()
		for range n / 2 {
			if fd, err := unix.Open("/", unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
			}
		}
		best = min(best, time.Since(t))
	}
	return best
}

// costs are the last costSamples costs measured while sampling.
type costs struct {
	ring [costSamples]time.Duration
	n    int
}

func (c *costs) add(d time.Duration) {
	c.ring[c.n%costSamples] = d
	c.n++
}

// median of those measured, at least 0.
func (c *costs) median() time.Duration {
	v := slices.Clone(c.ring[:min(c.n, costSamples)])
	slices.Sort(v)
	return max(v[len(v)/2], 0)
}
