// Package fakepowercap writes a fake powercap tree for tests: no machine here has RAPL
// (docs/metrics.md says the energy figures were checked against this fake only). Its
// counters advance as the test says, at a power (Run) or by hand, and wrap at their range
// as the kernel's do. Together and Span sum what two jobs that shared a node were given.
package fakepowercap

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/persyst/persyst/sample"
)

// Zone is one zone of the fake tree: Dir is its directory name ("intel-rapl:0",
// "intel-rapl:0:0"), Name what its name file says ("package-0", "dram", "psys", "core").
type Zone struct {
	Dir, Name string
	MaxRange  uint64 // µJ; 0: no max_energy_range_uj file
}

// Tree is a fake powercap directory.
type Tree struct {
	Root string

	mu     sync.Mutex
	zones  []Zone
	energy []float64 // µJ counted, before the wrap
}

// New writes the zones under root, their counters at start µJ.
func New(root string, start uint64, zones ...Zone) (*Tree, error) {
	t := &Tree{Root: root, zones: zones, energy: make([]float64, len(zones))}
	for i, z := range zones {
		dir := filepath.Join(root, z.Dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "name"), []byte(z.Name+"\n"), 0o644); err != nil {
			return nil, err
		}
		if z.MaxRange > 0 {
			if err := os.WriteFile(filepath.Join(dir, "max_energy_range_uj"), []byte(strconv.FormatUint(z.MaxRange, 10)+"\n"), 0o644); err != nil {
				return nil, err
			}
		}
		t.energy[i] = float64(start)
		if err := t.write(i); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Add counts joules more on the zone named dir.
func (t *Tree) Add(dir string, joules float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, z := range t.zones {
		if z.Dir == dir {
			t.energy[i] += joules * 1e6
			return t.write(i)
		}
	}
	return fmt.Errorf("fakepowercap: no zone %s", dir)
}

// Set sets the zone's counter to uj as read (a reset, when below what it read).
func (t *Tree) Set(dir string, uj uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, z := range t.zones {
		if z.Dir == dir {
			t.energy[i] = float64(uj)
			return t.write(i)
		}
	}
	return fmt.Errorf("fakepowercap: no zone %s", dir)
}

// write writes zone i's energy_uj, wrapped at its range, replacing the file whole (a
// reader never sees half a number).
func (t *Tree) write(i int) error {
	z := t.zones[i]
	v := uint64(t.energy[i])
	if z.MaxRange > 0 {
		v %= z.MaxRange
	}
	p := filepath.Join(t.Root, z.Dir, "energy_uj")
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(v, 10)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Run advances the zones (directory name to watts) at their power from now on, every
// period, until ctx is done: each zone's counter is its power times the time since Run
// began (added to what it held), so that a read between two writes is at most a period
// behind.
func (t *Tree) Run(ctx context.Context, watts map[string]float64, every time.Duration) error {
	t.mu.Lock()
	base := map[string]float64{}
	for i, z := range t.zones {
		if _, ok := watts[z.Dir]; ok {
			base[z.Dir] = t.energy[i]
		}
	}
	t.mu.Unlock()
	if len(base) != len(watts) {
		return fmt.Errorf("fakepowercap: a zone of %v is not in the tree", watts)
	}
	t0 := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		s := time.Since(t0).Seconds()
		for dir, w := range watts {
			if err := t.Set(dir, uint64(base[dir]+w*s*1e6)); err != nil {
				return err
			}
		}
	}
}

// Joint is what two jobs on one node were given in the intervals both were measured in
// (their samples at the same times, within a tolerance): their energy of a metric, their
// CPU time, the intervals' seconds and count, and the interval whose energies' ratio was
// the farthest from their CPU times' (Worst: |energy ratio / CPU ratio - 1|).
type Joint struct {
	A, B       float64 // joules
	CPUA, CPUB float64 // seconds
	// BasisA and BasisB are the CPU seconds the shares were taken by
	// (sample.EnergyShareCPUSeconds: in Slurm's cgroups of the jobs).
	BasisA, BasisB float64
	Seconds        float64
	Intervals      int
	Worst          float64
}

// Together sums metric (e.g. sample.EnergyPkgJoules) and the CPU time of jobs a and b over
// the intervals both have it in, matched by their end within 200 ms and their length
// within 0.2 s (a node reads all its jobs at each cycle boundary).
func Together(a, b []sample.Sample, metric string) Joint {
	var j Joint
	for _, x := range a {
		xe, ok := x.Job[metric]
		if !ok {
			continue
		}
		for _, y := range b {
			ye, ok := y.Job[metric]
			if !ok || y.Time.Sub(x.Time).Abs() > 200*time.Millisecond || (y.Seconds-x.Seconds) > 0.2 || (x.Seconds-y.Seconds) > 0.2 {
				continue
			}
			j.A, j.B, j.Seconds, j.Intervals = j.A+xe, j.B+ye, j.Seconds+x.Seconds, j.Intervals+1
			ca := x.Job[sample.CPUUserSeconds] + x.Job[sample.CPUSystemSeconds]
			cb := y.Job[sample.CPUUserSeconds] + y.Job[sample.CPUSystemSeconds]
			j.CPUA, j.CPUB = j.CPUA+ca, j.CPUB+cb
			j.BasisA, j.BasisB = j.BasisA+x.Job[sample.EnergyShareCPUSeconds], j.BasisB+y.Job[sample.EnergyShareCPUSeconds]
			if ye > 0 && cb > 0 && ca > 0 {
				j.Worst = max(j.Worst, math.Abs((xe/ye)/(ca/cb)-1))
			}
			break
		}
	}
	return j
}

// Overlap is what each of two jobs on one node was given over the span both were
// measured in, its own intervals summed however they fall: a node under load may read
// its jobs a second apart in a cycle, so no interval of one need match the other's.
type Overlap struct {
	From, To time.Time
	A, B     Share
}

// Share is one job's part of an Overlap: its energy of a metric, its CPU time (its
// tasks', and Basis: in Slurm's cgroup of the job, sample.EnergyShareCPUSeconds, what
// the share was taken by), and the count and seconds of its intervals wholly in the span.
type Share struct {
	Joules, CPU, Basis, Seconds float64
	Intervals                   int
}

// Watts is the job's mean power over its intervals in the span.
func (s Share) Watts() float64 {
	if s.Seconds <= 0 {
		return 0
	}
	return s.Joules / s.Seconds
}

// Span sums metric and the CPU time of jobs a and b over their intervals that lay wholly
// within the time both had metric measured: from the later one's first interval's start
// to the earlier one's last interval's end.
func Span(a, b []sample.Sample, metric string) Overlap {
	fa, ta := measuredSpan(a, metric)
	fb, tb := measuredSpan(b, metric)
	o := Overlap{From: later(fa, fb), To: earlier(ta, tb)}
	o.A, o.B = o.share(a, metric), o.share(b, metric)
	return o
}

func (o Overlap) share(ss []sample.Sample, metric string) Share {
	var s Share
	for _, x := range ss {
		e, ok := x.Job[metric]
		if !ok || x.From().Before(o.From) || x.Time.After(o.To) {
			continue
		}
		s.Joules, s.Seconds, s.Intervals = s.Joules+e, s.Seconds+x.Seconds, s.Intervals+1
		s.CPU += x.Job[sample.CPUUserSeconds] + x.Job[sample.CPUSystemSeconds]
		s.Basis += x.Job[sample.EnergyShareCPUSeconds]
	}
	return s
}

// measuredSpan is the start of the first and the end of the last interval with metric.
func measuredSpan(ss []sample.Sample, metric string) (from, to time.Time) {
	for _, x := range ss {
		if _, ok := x.Job[metric]; !ok {
			continue
		}
		if from.IsZero() || x.From().Before(from) {
			from = x.From()
		}
		if x.Time.After(to) {
			to = x.Time
		}
	}
	return from, to
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
