package syscount

import (
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// costMeter measures what one system call costs more while the programs count (the raw
// tracepoint: the kernel's slow path and the program; fentry: the program beyond its
// closed gate), which the sampler's budget and the scaling of sampled counts need: this
// process's own calls (openat and close, counted either way) timed counting and not.
// Its user (Counter) holds its lock around it.
type costMeter struct {
	counts *ebpf.Map // the Counter's: the key this process's calls look up is watched while they are timed
	zeros  []Counts
	// mount and self are Options.Mount and Self.
	mount, self string
	ring        costs
	// cost: calibrated at the first Watch, then from the probes too (costs.cost); 0
	// while not measurable.
	cost time.Duration
	// pauses counts the sampler's pauses (wantsProbe).
	pauses int
}

// calibrate makes the programs count (link: attaches them, or opens gated ones' gate)
// and measures the cost on both sides of that, at the first Watch: costCalls calls timed (the best of calibrateRounds) right before
// and, counted, right after; both sides see the same CPU speed, and noise (which only
// adds time) drops out. Attaching and detaching once more only to measure would cost the
// job an RCU grace period each (12 ms here). Where the difference is not positive the
// cost stays 0 and the sampler probes for it.
func (m *costMeter) calibrate(lv []uint32, link func() error) error {
	off := timeCalls(costCalls, calibrateRounds)
	if err := link(); err != nil {
		return err
	}
	m.ring.add(m.timeCounted(lv, costCalls, calibrateRounds)/costCalls, off/costCalls)
	m.cost = m.ring.cost()
	return nil
}

// wantsProbe says whether to probe at this pause: always while the cost is not known or
// fewer than costSamples probes were taken, then at one pause in probeEvery (each probe
// makes 768 calls of the daemon's own: under emulation, where a call takes 40 µs, 3 % of
// a CPU each second).
func (m *costMeter) wantsProbe() bool {
	m.pauses++
	return m.cost == 0 || m.ring.n < costSamples || m.pauses%probeEvery == 0
}

// wantsEarlyProbe says whether the cost is unknown and fewer than earlyProbes probes
// were taken (the calibration's and those left out counted): a storm is then probed as
// soon as it comes.
func (m *costMeter) wantsEarlyProbe() bool { return m.cost == 0 && m.ring.tried < earlyProbes }

// probe times probeCalls on both sides of pausing p (which it leaves paused), and
// takes the cost anew from the last costSamples probes and the calibration.
func (m *costMeter) probe(p *programs, lv []uint32) {
	on := m.timeCounted(lv, probeCalls, 3)
	p.pause()
	m.ring.add(on/probeCalls, timeCalls(probeCalls, 3)/probeCalls)
	m.cost = m.ring.cost()
}

// timeCounted times n calls (timeCalls) counted as a measured job's are: a counted call
// finds its cgroup in the counts map and adds to its counts, which costs more than the
// miss of an unmeasured call (timed side by side here: 55-72 ns against 45-56), so the
// key this process's calls look up first is watched meanwhile, unless it is already.
func (m *costMeter) timeCounted(lv []uint32, n, rounds int) time.Duration {
	if key, ok := m.key(lv); ok && m.counts.Update(key, m.zeros, ebpf.UpdateNoExist) == nil {
		defer m.counts.Delete(key)
	}
	return timeCalls(n, rounds)
}

// key is the key this process's calls look up at the first watched level: its cgroup's
// ancestor there, or 0 where it lies higher (the kernel's helper gives 0 then, which is
// also the guess where Self is not known).
func (m *costMeter) key(lv []uint32) (uint64, bool) {
	if len(lv) == 0 {
		return 0, false
	}
	level := int(lv[0])
	if m.self == "" {
		return 0, true
	}
	depth, err := Level(m.mount, m.self)
	if err != nil {
		return 0, false
	}
	if level > depth {
		return 0, true
	}
	dir := m.self
	for range depth - level {
		dir = filepath.Dir(dir)
	}
	id, err := CgroupID(dir)
	return id, err == nil
}

// costCalls is how many counted system calls (opens of / for its path, and closes)
// each of calibrate's timings makes: about a millisecond each, 6 ms in all, once. A
// counted call pays the lookup of the caller's cgroup at each watched level besides the
// slow path. While sampling, probeCalls are timed on both sides of a pause (each, then
// one in probeEvery once costSamples are in), and the cost is taken from the last
// costSamples timings (costs.cost).
const (
	costCalls       = 2000
	calibrateRounds = 3
	probeCalls      = 128
	costSamples     = 15
	probeEvery      = 4
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

// costs are the last costSamples timings of a call, counted (on) and not (off): the
// calibration's, then the probes'; tried counts those left out too.
type costs struct {
	on, off  [costSamples]time.Duration
	n, tried int
}

// add keeps a pair of timings whose counted side was the slower. One whose counted side
// was not tells of noise on its other side only (the calibration's uncounted calls
// timed as a job's first processes start): kept, its fast counted timing could stand
// below every uncounted one of a storm that followed, and the cost would stay 0, the
// storm counted whole (1 run in 50 of the storm here, +21 % for it).
func (c *costs) add(on, off time.Duration) {
	c.tried++
	if on <= off {
		return
	}
	c.on[c.n%costSamples], c.off[c.n%costSamples] = on, off
	c.n++
}

// cost is what a call costs more counted: the fastest call of those timed counted less
// the fastest of those not, at least 0 (0 also before any timing). Noise only adds
// time, on either side, so each side's fastest is its best measure; the difference of
// each probe's two sides is not: during a storm here the calls timed counted took 299
// to 540 ns, those not 248 to 294 ns, and the probes' differences 18 to 280 ns, where a
// call costs about 50 ns more. A short storm's estimate rested on the median of a
// handful of those, and its count came out up to 18 % high.
func (c *costs) cost() time.Duration {
	k := min(c.n, costSamples)
	if k == 0 {
		return 0
	}
	return max(slices.Min(c.on[:k])-slices.Min(c.off[:k]), 0)
}
