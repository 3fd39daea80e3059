package amdgpu

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Reading is one card's values at a read, cumulative where they add up over time, in the
// keys persyst-nvml gives for an NVIDIA GPU (package nvml), so that a job's GPU values
// are taken the same way whatever the vendor: busy and util_s (seconds busy, seconds
// sampled), energy (millijoules), thermal_ns and power_ns (time held back by heat, by
// the power limit), ecc (uncorrectable errors), mem (bytes in use now), mem_peak (the
// most in use since the previous Read).
type Reading struct {
	Index       int     // the card's place among the node's, by PCI address
	Time        float64 // seconds on the sampler's clock
	Values      map[string]float64
	NotMeasured map[string]string
	// Procs are the processes using the card, with its VRAM they hold; ProcsWhy says
	// why they are not known.
	Procs    []ProcUse
	ProcsWhy string
}

// ProcUse is a process using a card, and the card's VRAM it holds.
type ProcUse struct {
	PID    int
	Memory uint64
}

// Options configure a Sampler.
type Options struct {
	// Interval is how often the cards are read between Reads (default 1 s):
	// gpu_busy_percent and the throttle status are a moment's, summed over time here.
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Stale is how old a card's last sample may be for Read to give it (default five
	// Intervals): a card whose files stopped answering (a hung GPU) is not measured
	// rather than read as idle, and no Read waits for it.
	Stale time.Duration
}

// Sampler reads the node's cards every Interval in the background (Run) and at every
// Read, and keeps their cumulative values: any number of jobs, read at any times, take
// their differences.
type Sampler struct {
	sys   *Sysfs
	o     Options
	start time.Time

	mu   sync.Mutex
	devs []Device
	st   []cardState
}

// cardState is what a card added up so far.
type cardState struct {
	sampled bool
	last    time.Time
	busy    float64 // seconds
	util    float64 // seconds sampled
	energy  float64 // millijoules
	joules  float64 // the counter at the last sample (hasJ)
	hasJ    bool
	watts   float64 // the power at the last sample (hasW)
	hasW    bool
	// ticks, pptTicks, thmTicks: the throttle residency counters at the last sample
	// (hasRes: gpu_metrics v1.6 on).
	ticks, pptTicks, thmTicks uint32
	hasRes                    bool
	thermal                   float64 // nanoseconds
	power                     float64
	peak                      uint64
	now                       Now // the last sample
}

// NewSampler lists the node's cards; none is not an error (Devices is empty).
func NewSampler(sys *Sysfs, o Options) (*Sampler, error) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Stale <= 0 {
		o.Stale = 5 * o.Interval
	}
	devs, err := sys.Devices()
	s := &Sampler{sys: sys, o: o, start: o.Now(), devs: devs, st: make([]cardState, len(devs))}
	return s, err
}

// Devices are the cards the sampler reads, in the order of their Index.
func (s *Sampler) Devices() []Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Device(nil), s.devs...)
}

// Run samples the cards every Interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	if len(s.devs) == 0 {
		return
	}
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	s.Sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sample()
		}
	}
}

// Sample reads every card once and adds the time since its previous sample (Run calls
// it every Interval).
func (s *Sampler) Sample() {
	for i, d := range s.devs {
		n := s.sys.Read(d)
		at := s.o.Now()
		s.mu.Lock()
		s.st[i].add(n, at)
		s.mu.Unlock()
	}
}

// add counts a sample taken at at: the time since the previous one is taken as the
// sample says (busy, throttled); the energy by the counter's increase (an increase that
// goes back is a reset: that stretch is not counted), else by the power's mean.
func (c *cardState) add(n Now, at time.Time) {
	if c.sampled && !at.After(c.last) {
		return // a sample taken before the last one counted (Run's beside a Read's)
	}
	if n.VRAMUsed > c.peak {
		c.peak = n.VRAMUsed
	}
	if c.sampled {
		dt := at.Sub(c.last).Seconds()
		if dt > 0 {
			if n.Has["busy"] {
				c.busy += n.Busy / 100 * dt
				c.util += dt
			}
			switch {
			case n.Has["throttle"]:
				if n.Thermal {
					c.thermal += dt * 1e9
				}
				if n.PowerCapped {
					c.power += dt * 1e9
				}
			case n.Has["residency"] && c.hasRes:
				// The share of the table's ticks since the last sample that were held back
				// (the counters wrap as uint32s: their difference does not).
				if ticks := n.Ticks - c.ticks; ticks > 0 {
					c.power += dt * 1e9 * min(float64(n.PowerTicks-c.pptTicks)/float64(ticks), 1)
					c.thermal += dt * 1e9 * min(float64(n.ThermalTicks-c.thmTicks)/float64(ticks), 1)
				}
			}
			switch {
			case n.Has["joules"] && c.hasJ:
				if d := n.Joules - c.joules; d >= 0 {
					c.energy += d * 1e3
				}
			case n.Has["watts"] && c.hasW && !n.Has["joules"]:
				c.energy += (n.Watts + c.watts) / 2 * dt * 1e3
			}
		}
	}
	c.sampled, c.last, c.now = true, at, n
	c.joules, c.hasJ = n.Joules, n.Has["joules"]
	c.watts, c.hasW = n.Watts, n.Has["watts"]
	c.ticks, c.pptTicks, c.thmTicks, c.hasRes = n.Ticks, n.PowerTicks, n.ThermalTicks, n.Has["residency"]
}

// Read returns the cards' cumulative values as of their last sample, with the processes
// the KFD lists on each now. It never reads a card itself: a card whose last sample is
// older than Stale is not measured, with since when.
func (s *Sampler) Read() []Reading {
	procs, kfdOK, kfdErr := s.sys.Processes()
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Dies that report no power share their package's with a die that does: the
	// package's power is no one die's (which die is whose pair is not said here).
	shared := false
	for i := range s.st {
		shared = shared || s.st[i].now.NoPower
	}
	out := make([]Reading, len(s.devs))
	for i, d := range s.devs {
		c := &s.st[i]
		r := Reading{Index: i, Time: c.last.Sub(s.start).Seconds(), Values: map[string]float64{}, NotMeasured: map[string]string{}}
		if !c.sampled || now.Sub(c.last) > s.o.Stale {
			why := fmt.Sprintf("%s (%s) has not been read since %s", d.Card, d.Bus, c.last.Format(time.TimeOnly))
			if !c.sampled {
				why = fmt.Sprintf("%s (%s) has not been read yet", d.Card, d.Bus)
			}
			for _, k := range []string{"busy", "util_s", "mem", "mem_peak", "thermal_ns", "power_ns", "ecc", "energy"} {
				r.NotMeasured[k] = why
			}
			r.ProcsWhy = why
			out[i] = r
			continue
		}
		n := c.now
		set := func(has bool, why, key string, v float64) {
			if has {
				r.Values[key] = v
			} else {
				r.NotMeasured[key] = why
			}
		}
		set(n.Has["busy"], n.Why["busy"], "busy", c.busy)
		set(n.Has["busy"], n.Why["busy"], "util_s", c.util)
		set(n.Has["vram"], n.Why["vram"], "mem", float64(n.VRAMUsed))
		set(n.Has["vram"], n.Why["vram"], "mem_peak", float64(c.peak))
		throttle := n.Has["throttle"] || n.Has["residency"]
		set(throttle, n.Why["throttle"], "thermal_ns", c.thermal)
		set(throttle, n.Why["throttle"], "power_ns", c.power)
		set(n.Has["ras"], n.Why["ras"], "ecc", float64(n.Uncorrectable))
		switch {
		case shared && !n.NoPower:
			r.NotMeasured["energy"] = packagePower
		case n.Has["joules"] || n.Has["watts"]:
			r.Values["energy"] = c.energy
		default:
			r.NotMeasured["energy"] = n.Why["joules"]
		}
		c.peak = n.VRAMUsed
		switch {
		case kfdErr != nil:
			r.ProcsWhy = kfdErr.Error()
		case !kfdOK:
			r.ProcsWhy = "the KFD (ROCm's compute driver) lists no processes here"
		case len(d.GPUIDs) == 0:
			r.ProcsWhy = fmt.Sprintf("%s is not among the KFD's GPUs", d.Bus)
		default:
			for _, p := range procs {
				var m uint64
				found := false
				for _, id := range d.GPUIDs { // any of its partitions
					if v, ok := p.VRAM[id]; ok {
						m, found = m+v, true
					}
				}
				if found {
					r.Procs = append(r.Procs, ProcUse{PID: p.PID, Memory: m})
				}
			}
		}
		out[i] = r
	}
	return out
}
