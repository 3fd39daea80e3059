package syscount

import (
	"errors"
	"math"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Sampling bounds what counting costs the programs of the node. The raw tracepoint,
// attached, sends every system call of the node through the kernel's slow path and the
// program (tens to hundreds of ns each), counted or not, whoever makes it; fentry
// programs cost each call of the functions they are on (openat, close, futex, and
// vfs_read and vfs_write: every read and write on a file) their run: a program making
// such calls without pause is slowed by that cost times its call rate. Budget is the
// most that extra time may be, all calls of the node together, as a share of one CPU's
// time (persyst.conf's SyscallBudget), so that no program, measured or not, is slowed by
// more: while the node's calls would cost more, the programs count only for a share of
// each Period (a power of two, at least MinShare; see Outside): the raw tracepoint is
// attached only then, fentry programs' gate is open only then (programs), counting into
// Counts.Sampled, whose calls stand for the time not attached too (Unseen, AttachedTime,
// Cost); a job's counts are then an estimate, and say so. The calls counted while
// attached for whole periods (Counts.Whole) are every call of their time and are never
// scaled. All calls may first spend Burst of extra time (a credit, earned back at Budget of
// the time), so that bursts (10,000 opens take a few ms) are counted in full: the
// estimate is good for a steady storm, and fair for a burst that falls partly between
// samples where it is made by the job's CPU time (CPUSplit). (The calls of one CPU would
// not do as the measure: a program's threads move between CPUs.) Closed, fentry
// programs' gate leaves each call the trampoline's cost (calling the program, which
// returns at once), which no budget bounds. Below, "attached" is "counting": the raw
// tracepoint attached, or fentry programs' gate open.
//
// Outside bounds apart what the calls counted for no job cost: other programs' (a job
// that opted out, the node's daemons) and the jobs' calls of kinds not counted (every
// call pays on the raw tracepoint). Counting is for the jobs: while such calls would cost
// more than outsideTrigger × Outside (a storm outside the jobs, not the few thousand
// calls a second of a node's daemons), the share is cut to keep them within Outside
// (down to MinShare/4), whatever credit is left, so that a program outside every job
// that makes calls without pause is slowed by no more than Outside of one CPU (persyst
// sets Budget/8) for the jobs beside it.
type Sampling struct {
	Period   time.Duration // default 1 s
	Budget   float64       // share of one CPU's time; 0: no sampling
	Outside  float64       // share of one CPU's time; 0: no bound but Budget
	MinShare float64       // default 1/64
	// Burst is the extra time the node's calls may cost before they are sampled (default
	// Budget × 1 s: 2.5 ms at persyst's 0.25 %, about 40,000 calls counted in full).
	Burst time.Duration
}

// While the cost of a call is not known (the calibration at the first Watch drowned in
// noise), a storm would be counted whole until the probe at the end of the Period (a
// second of 20 % more time for the storm): the first earlyProbes probes are taken as
// soon as a CPU has made noticeEvery calls (or checkBusy's worth), and the detach for
// them is the only cost to the job.
const earlyProbes = 3

// While the program is attached for whole periods, the calls are looked at every
// checkBusy once they cost more than the budget and the credit is spent; while credit is
// left, when it would run out at the rate of the last look, but not later than
// checkCredit nor sooner than checkMin: a storm's first look (at its first notice) sees
// it ramping up, and a look after the credit is spent lets the calls cost up to that
// much of their load more (a look 50 ms later let a storm of 27 % spend 13.5 ms of a 5
// ms credit); before, each time a CPU has made
// noticeEvery calls (a ring buffer record from the program, which wakes the sampler),
// and at least every quietWait; where the kernel has no ring buffers, every checkQuiet.
// A quiet node's sampler so sleeps: its daemon's own calls, a few hundred a second,
// wake it every few seconds, where looking every checkQuiet woke it four times a second
// and saw a storm only up to checkQuiet after it began (4,096 calls come in a few
// milliseconds).
const (
	checkQuiet  = 250 * time.Millisecond
	checkBusy   = 50 * time.Millisecond
	checkMin    = 2 * time.Millisecond
	checkCredit = 10 * time.Millisecond
	quietWait   = 10 * time.Second
	noticeEvery = 4096
)

// notices is the ring buffer the program wakes the sampler with, and its reader.
type notices struct {
	m  *ebpf.Map
	rd *ringbuf.Reader
}

// newNotices makes the ring buffer and its reader; nil where the kernel has none (before
// 5.8): the sampler then looks every checkQuiet.
func newNotices() *notices {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "persyst_notice", Type: ebpf.RingBuf, MaxEntries: uint32(os.Getpagesize())})
	if err != nil {
		return nil
	}
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		m.Close()
		return nil
	}
	return &notices{m: m, rd: rd}
}

// ringMap is the map the program writes notices to (nil: none).
func (n *notices) ringMap() *ebpf.Map {
	if n == nil {
		return nil
	}
	return n.m
}

// wait waits up to d for a notice from the program, and takes every notice there is;
// false if stop came or the reader is closed. (Only ReadInto may meet a reader closed
// meanwhile: it checks under the reader's lock.)
func (n *notices) wait(d time.Duration, stop <-chan struct{}) bool {
	var rec ringbuf.Record
	n.rd.SetDeadline(time.Now().Add(d))
	err := n.rd.ReadInto(&rec)
	if err == nil {
		n.rd.SetDeadline(time.Now()) // those that came meanwhile, without waiting
		for err == nil {
			err = n.rd.ReadInto(&rec)
		}
	}
	return !errors.Is(err, ringbuf.ErrClosed) && !stopped(stop)
}

// interrupt ends a wait.
func (n *notices) interrupt() {
	if n != nil {
		n.rd.Flush()
	}
}

func (n *notices) close() error {
	if n == nil {
		return nil
	}
	return errors.Join(n.rd.Close(), n.m.Close())
}

func (s Sampling) withDefaults() Sampling {
	if s.Period <= 0 {
		s.Period = time.Second
	}
	if s.MinShare <= 0 || s.MinShare > 1 {
		s.MinShare = 1.0 / 64
	}
	if s.Burst <= 0 {
		s.Burst = time.Duration(s.Budget * float64(time.Second))
	}
	return s
}

// shareFor is the share of a period to stay attached when the node's system calls cost
// load of one CPU's time more while attached, outside of it the calls counted for no
// job, and credit is what is left of the Burst.
func shareFor(load, outside float64, credit time.Duration, s Sampling) float64 {
	share := 1.0
	if s.Budget > 0 && load > s.Budget && credit <= 0 {
		share = max(pow2Below(s.Budget/load), s.MinShare)
	}
	if s.Budget > 0 && s.Outside > 0 && outside > outsideTrigger*s.Outside {
		share = min(share, max(pow2Below(s.Outside/outside), s.MinShare/4))
	}
	return min(share, 1)
}

// outsideTrigger is how many times Outside the calls counted for no job must cost before
// they are kept within it.
const outsideTrigger = 4

// pow2Below is the largest power of two at most x (x > 0).
func pow2Below(x float64) float64 { return math.Exp2(math.Floor(math.Log2(x))) }

// startSampler starts adapting the share of each period the programs count (c.mu held).
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
		c.notices.interrupt() // ends a wait for a notice
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
	p := pace{credit: c.sampling.Burst, check: checkQuiet}
	for {
		c.mu.Lock()
		if stopped(stop) {
			c.mu.Unlock()
			return
		}
		if !c.progs.counting() {
			if err := c.progs.resume(); err != nil {
				c.mu.Unlock()
				return // counted no longer: the reads' AttachedTime stops growing
			}
		}
		share := c.share
		c.mu.Unlock()
		if !c.attached(share, &p, stop) || !c.detached(&p, stop) {
			return
		}
	}
}

// busyCheck is how soon to look again at calls costing load of one CPU's time, with
// credit left of the burst: checkQuiet while within budget, checkBusy once the credit is
// spent, else when it would run out at that load (between checkMin and checkCredit).
func busyCheck(load float64, credit time.Duration, budget float64) time.Duration {
	if load <= budget {
		return checkQuiet
	}
	if credit <= 0 {
		return checkBusy
	}
	until := time.Duration(float64(credit) / (load - budget))
	return min(max(until, checkMin), checkCredit)
}

// pace is what the sampler carries from one look to the next: the credit left and how
// soon to look again.
type pace struct {
	credit, check time.Duration
}

// attached is one stretch attached: share of a Period, or until the share changes (the
// whole Period, looked at every p.check, or at each notice while quiet); false if
// stopped.
func (c *Counter) attached(share float64, p *pace, stop <-chan struct{}) bool {
	s := c.sampling
	for left := time.Duration(float64(s.Period) * share); left > 0; {
		c.mu.Lock()
		a0, j0, t0 := callsAt(c.all, allNode, c.calls), callsAt(c.all, allJobs, c.calls), c.now()
		known := c.cm.cost > 0
		c.mu.Unlock()
		step, wait := left, sleep
		if share == 1 {
			step = min(left, p.check)
			switch {
			case c.cm.wantsEarlyProbe():
				// Without a cost the load cannot be judged: a CPU's noticeEvery calls
				// (or checkBusy's worth where the kernel has no ring buffers) end the
				// stretch for a probe at once, not at the Period's end.
				step = min(left, checkBusy)
				if c.notices != nil {
					step, wait = left, c.notices.wait
				}
			case p.check == checkQuiet && c.notices != nil && known:
				step, wait = quietWait, c.notices.wait
			}
		}
		if !wait(step, stop) {
			return false
		}
		c.mu.Lock()
		if stopped(stop) {
			c.mu.Unlock()
			return false
		}
		calls := callsAt(c.all, allNode, c.calls) - a0
		if share == 1 && c.cm.wantsEarlyProbe() && calls >= noticeEvery {
			c.mu.Unlock()
			return true // detached probes
		}
		dt := max(c.now().Sub(t0), time.Millisecond)
		left -= dt
		spent := time.Duration(calls) * c.cm.cost
		p.credit = min(max(p.credit+time.Duration(s.Budget*float64(dt))-spent, -s.Burst), s.Burst)
		load := float64(spent) / float64(dt)
		// The jobs' counted calls, read after the node's: never more than those.
		jobs := min(callsAt(c.all, allJobs, c.calls)-j0, calls)
		outside := float64(time.Duration(calls-jobs)*c.cm.cost) / float64(dt)
		p.check = busyCheck(load, p.credit, s.Budget)
		next := shareFor(load, outside, p.credit, s)
		if err := c.progs.setSampled(next < 1); err != nil {
			// The counts could not tell a sample from the whole: count every call.
			next = 1
		}
		c.share = next
		c.mu.Unlock()
		if next != share {
			if share == 1 {
				// The first window is taken at once: the intervals between this turn and
				// the next window in the middle of a second are estimated from it (from
				// the calls counted whole before, a burst would be taken for a storm).
				// It is a window like the others, its calls charged to the credit: left
				// out, a storm whose credit came back by each window's end was counted
				// in two windows a second, twice the budget.
				share, left = next, time.Duration(float64(s.Period)*next)
				continue
			}
			break
		}
	}
	return true
}

// detached probes the cost where it must be known and stays detached until the next
// window while sampling, earning credit back meanwhile; false if stopped.
func (c *Counter) detached(p *pace, stop <-chan struct{}) bool {
	c.mu.Lock()
	if stopped(stop) {
		c.mu.Unlock()
		return false
	}
	off := time.Duration(0)
	if c.share < 1 || c.cm.cost == 0 {
		// What a call costs more attached, timed on both sides of each detach. While
		// the cost is not known (the calibration drowned in noise), the programs are
		// detached for a probe's time at the end of each Period to learn it: without
		// it no budget could be kept.
		if c.cm.wantsProbe() {
			c.cm.probe(&c.progs, c.lv)
		} else {
			c.progs.pause()
		}
		if c.share < 1 {
			off = untilWindow(c.now(), c.sampling.Period, c.share)
		}
	}
	c.mu.Unlock()
	p.credit = min(p.credit+time.Duration(c.sampling.Budget*float64(off)), c.sampling.Burst)
	return off == 0 || sleep(off, stop)
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

// The entries of the map all (with a budget): every system call of the node the
// programs ran for, and those counted for a watched cgroup.
const (
	allNode uint32 = iota
	allJobs
	allEntries
)

// callsAt is the calls counted at key of the map all while attached, all CPUs', read
// into buf (the Counter's; c.mu held).
func callsAt(all *ebpf.Map, key uint32, buf []uint64) uint64 {
	if err := all.Lookup(key, buf); err != nil {
		return 0
	}
	var n uint64
	for _, v := range buf {
		n += v
	}
	return n
}

// Bounds are the most counting may cost the node's programs (Sampling.Budget; 0: every
// call) and those outside the jobs once their calls pass the trigger (Sampling.Outside;
// 0: no bound but the budget).
func (c *Counter) Bounds() (budget, outside float64) {
	return c.sampling.Budget, c.sampling.Outside
}

// AttachedTime returns the time now and how long the programs have been attached in
// all up to it, by how they counted: a cgroup's Counts.Whole between two reads are every
// call of the Whole time between them, its Counts.Sampled those of the Sampled time,
// which stands for the rest (not attached) too.
func (c *Counter) AttachedTime() (now time.Time, attached Attached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.progs.attachedTime()
}

// Share is the share of each period the programs count now (1: always).
func (c *Counter) Share() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watched == 0 {
		return 1
	}
	return c.share
}

// Cost is what one counted call costs more while the programs count (the raw
// tracepoint attached, or fentry programs' gate open); 0 without a budget, before the
// first Watch, or while not measurable.
func (c *Counter) Cost() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cm.cost
}

// MinSampled is the least time in sampled windows an interval's calls between them are
// estimated from.
const MinSampled = 5 * time.Millisecond

// Unseen says how to estimate a cgroup's calls in the part of an interval of wall that
// the programs were not attached for (share of it), given that they counted d of it:
// each call counted in its sampled windows (Counts.Sampled) stands for perSampled more.
// The calls between the windows run faster than those counted by what counting cost
// them: sampled calls of all kinds counted in busy seconds of the cgroup's CPU time in
// the windows, each costing cost more, took sampled × cost of that time (at most half,
// against a cost measured high). Calls counted in Counts.Whole are every call of their
// time and stand for nothing more. ok is false when some time was not counted and the
// windows were shorter than MinSampled to estimate it from; every call counted (the last
// 0.1 % aside): share 0.
func Unseen(wall time.Duration, d Attached, sampled, busy float64, cost time.Duration) (share, perSampled float64, ok bool) {
	rest := wall - d.Total()
	if rest <= wall/1000 {
		return 0, 0, true
	}
	share = rest.Seconds() / wall.Seconds()
	if d.Sampled < MinSampled {
		return share, 0, false
	}
	speedup := 1.0
	if busy > 0 {
		speedup = 1 / (1 - min(sampled*cost.Seconds()/busy, 0.5))
	}
	return share, rest.Seconds() / d.Sampled.Seconds() * speedup, true
}
