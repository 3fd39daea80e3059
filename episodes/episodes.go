// Package episodes finds site-wide file-system episodes: stretches in which many of the
// site's jobs stall on I/O at once. A job that stalls on I/O alone may be reading in
// small pieces; when a quarter of the site's jobs stall in the same minutes, the file
// system they share is the cause, and each of them is told so.
//
// Each node reports, per measurement cycle (its Unix time, a multiple of the cycle
// length, so that the nodes' cycles line up), the jobs it measured and those whose I/O
// stall (the io_wait property, PSI) was severe. A cycle is stalled site-wide when at
// least MinJobs jobs stalled in it and at least MinShare of the jobs measured in it; an
// episode is a run of at least MinCycles such cycles, a missing cycle or one not
// stalled ending it.
package episodes

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// The rule's numbers.
const (
	MinJobs   = 3
	MinShare  = 0.25
	MinCycles = 2
	// MaxCycles bounds the cycles kept (the oldest go first): at a 60 s cycle, 34 hours.
	MaxCycles = 2048
	// MaxJobs bounds the job ids kept per cycle, measured and stalled each.
	MaxJobs = 1 << 16
	// maxEpisodeJobs bounds the stalled job ids an episode names.
	maxEpisodeJobs = 4096
)

// Cycle is what one node measured in one cycle: the jobs, and those stalled on I/O.
type Cycle struct {
	TS       int64
	Measured []uint32
	Stalled  []uint32
}

// Episode is one site-wide stretch of I/O stalls.
type Episode struct {
	// Cluster is the cluster whose frontend found it, in a store several share ("" on
	// the nodes, and for a store's unnamed cluster).
	Cluster string    `json:"cluster,omitempty"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	// Jobs is the most jobs measured in one of its cycles; Stalled the jobs that stalled
	// in it; Peak the largest share of the measured jobs stalled in one cycle.
	Jobs    int     `json:"jobs"`
	Stalled int     `json:"stalled"`
	Peak    float64 `json:"peak"`
	// JobIDs are the stalled jobs (at most 4096 of them).
	JobIDs []uint32 `json:"-"`
}

// Source gives the episodes that stalled a job, as the frontend last sent them to its
// node (the uplink).
type Source interface {
	Episodes(job uint32) []Episode
}

// Touched says whether the episode stalled job id.
func (e Episode) Touched(id uint32) bool {
	_, ok := slices.BinarySearch(e.JobIDs, id)
	return ok
}

// cycle is one cycle's jobs: while nodes may still report it, the sets of jobs measured
// and stalled; once settled (compactAfter cycles older than the newest), how many were
// measured and which stalled, which is all an episode needs.
type cycle struct {
	measured, stalled map[uint32]bool
	n                 int
	ids               []uint32 // stalled, sorted, once settled
}

func (c *cycle) settled() bool { return c.measured == nil }

func (c *cycle) nMeasured() int {
	if c.settled() {
		return c.n
	}
	return len(c.measured)
}

func (c *cycle) nStalled() int {
	if c.settled() {
		return len(c.ids)
	}
	return len(c.stalled)
}

// settle keeps the counts of a cycle the nodes have reported.
func (c *cycle) settle() {
	c.n = len(c.measured)
	for id := range c.stalled {
		c.ids = append(c.ids, id)
	}
	slices.Sort(c.ids)
	c.measured, c.stalled = nil, nil
}

// compactAfter is how many cycles after its own a cycle is settled: the nodes answer
// the frontend once a cycle, so a node's report of a cycle comes within two.
const compactAfter = 4

// Detector gathers the nodes' cycles and finds the episodes in them. It owns its cycles
// and their lock.
type Detector struct {
	mu     sync.Mutex
	period time.Duration
	cycles map[int64]*cycle
	newest int64 // the newest cycle reported
}

// NewDetector returns a detector for cycles period apart.
func NewDetector(period time.Duration) *Detector {
	return &Detector{period: max(period, time.Second), cycles: map[int64]*cycle{}}
}

// Add takes one node's cycles.
func (d *Detector) Add(cs []Cycle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	newest := int64(0)
	for _, c := range cs {
		k := d.cycles[c.TS]
		if k == nil {
			k = &cycle{measured: map[uint32]bool{}, stalled: map[uint32]bool{}}
			d.cycles[c.TS] = k
		}
		newest = max(newest, c.TS)
		if k.settled() {
			// A late report: its jobs are counted (a job other nodes reported too is
			// counted again), its stalled jobs named.
			k.n += len(c.Measured)
			for _, id := range c.Stalled {
				if i, found := slices.BinarySearch(k.ids, id); !found && len(k.ids) < MaxJobs {
					k.ids = slices.Insert(k.ids, i, id)
				}
			}
			continue
		}
		for _, id := range c.Measured {
			if len(k.measured) < MaxJobs {
				k.measured[id] = true
			}
		}
		for _, id := range c.Stalled {
			if len(k.stalled) < MaxJobs {
				k.stalled[id] = true
				k.measured[id] = true
			}
		}
	}
	if newest > d.newest {
		d.newest = newest
		for t, k := range d.cycles {
			if !k.settled() && t < d.newest-compactAfter*int64(d.period/time.Second) {
				k.settle()
			}
		}
	}
	if n := len(d.cycles) - MaxCycles; n > 0 {
		ts := make([]int64, 0, len(d.cycles))
		for t := range d.cycles {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		for _, t := range ts[:n] {
			delete(d.cycles, t)
		}
	}
}

// Episodes are the episodes in the cycles kept, oldest first. The last may still go on.
func (d *Detector) Episodes() []Episode {
	d.mu.Lock()
	defer d.mu.Unlock()
	ts := make([]int64, 0, len(d.cycles))
	for t := range d.cycles {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	var out []Episode
	var run []int64
	flush := func() {
		if len(run) >= MinCycles {
			out = append(out, d.episode(run))
		}
		run = run[:0]
	}
	step := int64(d.period / time.Second)
	for _, t := range ts {
		if len(run) > 0 && t-run[len(run)-1] > step {
			flush()
		}
		if d.stalledLocked(t) {
			run = append(run, t)
		} else {
			flush()
		}
	}
	flush()
	return out
}

// stalledLocked says whether cycle t stalled site-wide.
func (d *Detector) stalledLocked(t int64) bool {
	c := d.cycles[t]
	n := c.nStalled()
	return n >= MinJobs && float64(n) >= MinShare*float64(c.nMeasured())
}

// episode makes the episode of a run of stalled cycles.
func (d *Detector) episode(run []int64) Episode {
	e := Episode{From: time.Unix(run[0], 0).Add(-d.period), To: time.Unix(run[len(run)-1], 0)}
	ids := map[uint32]bool{}
	for _, t := range run {
		c := d.cycles[t]
		e.Jobs = max(e.Jobs, c.nMeasured())
		if c.nMeasured() > 0 {
			e.Peak = max(e.Peak, float64(c.nStalled())/float64(c.nMeasured()))
		}
		for id := range c.stalled {
			ids[id] = true
		}
		for _, id := range c.ids {
			ids[id] = true
		}
	}
	e.Stalled = len(ids)
	for id := range ids {
		e.JobIDs = append(e.JobIDs, id)
	}
	sort.Slice(e.JobIDs, func(a, b int) bool { return e.JobIDs[a] < e.JobIDs[b] })
	if len(e.JobIDs) > maxEpisodeJobs {
		e.JobIDs = e.JobIDs[:maxEpisodeJobs]
	}
	return e
}
