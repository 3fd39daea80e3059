package syscount

import (
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// Sampling, where an admin sets a budget, bounds what the raw tracepoint costs the node. Attached, it sends every
// system call of the node through the kernel's slow path (a few hundred ns each here),
// counted or not, whoever makes it. While the node's calls would cost more than Budget
// of its CPUs, the program is attached only for a share of each Period (a power of two,
// at least MinShare), and the counts are scaled by the time it was attached
// (AttachedTime); a job's counts are then an estimate, and say so. Sampling begins only
// after `sustained` periods in a row over the budget (a second), so that bursts (10,000
// opens take 30 ms, 64 MiB in 4 KiB writes 50 ms) are counted in full: the estimate is
// good for a steady storm, and poor for a burst that falls partly between samples.
// fentry programs cost only the calls they count and are never sampled.
type Sampling struct {
	Period   time.Duration // default 250 ms
	Budget   float64       // share of the node's CPUs (persyst.conf's SyscallBudget); 0: no sampling
	MinShare float64       // default 1/32
}

// sustained is how many periods in a row must be over the budget before sampling.
const sustained = 4

func (s Sampling) withDefaults() Sampling {
	if s.Period <= 0 {
		s.Period = 250 * time.Millisecond
	}
	if s.MinShare <= 0 || s.MinShare > 1 {
		s.MinShare = 1.0 / 32
	}
	return s
}

// shareFor is the share of a period to stay attached when the node makes rate system
// calls a second, each costing cost more while attached, on ncpu CPUs.
func shareFor(rate float64, cost time.Duration, ncpu int, s Sampling) float64 {
	if s.Budget <= 0 {
		return 1
	}
	load := rate * cost.Seconds() / float64(max(ncpu, 1))
	if load <= s.Budget {
		return 1
	}
	share := math.Exp2(math.Floor(math.Log2(s.Budget / load)))
	return max(share, s.MinShare)
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

// sample runs the periods: attached for share × Period, the node's call rate measured
// meanwhile, the next share chosen from it, detached for the rest.
func (c *Counter) sample(stop, done chan struct{}) {
	defer close(done)
	p := c.sampling.Period
	over := 0 // periods in a row over the budget, counted in full
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
		a0, t0, on := c.allCalls(), c.now(), time.Duration(float64(p)*c.share)
		c.mu.Unlock()
		if !sleep(on, stop) {
			return
		}
		c.mu.Lock()
		if stopped(stop) {
			c.mu.Unlock()
			return
		}
		rate := float64(c.allCalls()-a0) / max(c.now().Sub(t0).Seconds(), 1e-3)
		share := shareFor(rate, c.cost, c.ncpu, c.sampling)
		switch {
		case share == 1:
			over = 0
		case c.share == 1 && over < sustained-1:
			share, over = 1, over+1 // over the budget: counted in full until it lasts
		}
		c.share = share
		off := time.Duration(0)
		if c.share < 1 {
			c.progs.unlink()
			off = p - on
		}
		c.mu.Unlock()
		if off > 0 && !sleep(off, stop) {
			return
		}
	}
}

// allCalls is the node's system calls counted while attached.
func (c *Counter) allCalls() uint64 {
	vals := make([]uint64, c.ncpu)
	if err := c.all.Lookup(uint32(0), vals); err != nil {
		return 0
	}
	var n uint64
	for _, v := range vals {
		n += v
	}
	return n
}

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

// Cost is what one system call costs more while the raw tracepoint is attached, as
// measured when it was first attached (0 in fentry mode, or before).
func (c *Counter) Cost() time.Duration { return c.cost }

// costCalls is how many cheap system calls (getppid) timeCalls makes: the raw
// tracepoint's cost per call is the difference between their time with the program
// attached (at the first Watch) and without (at New), best of 3 rounds each (about a
// millisecond; no attaching only to measure it).
const costCalls = 2000

func timeCalls() time.Duration {
	best := time.Duration(math.MaxInt64)
	for range 3 {
		t := time.Now()
		for range costCalls {
			unix.Getppid()
		}
		best = min(best, time.Since(t))
	}
	return best
}
