package calibrate

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// barrier lets a team of workers start each step together. The last worker to arrive
// runs next (the step bookkeeping: the workers' timestamps of the step before are
// complete then) before anyone is released; next returning false ends the run.
type barrier struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	count int
	gen   uint64
	stop  bool
	err   error
	next  func() bool
}

func newBarrier(n int, next func() bool) *barrier {
	b := &barrier{n: n, next: next}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// wait blocks until all n workers called it, and says whether to run another step.
func (b *barrier) wait() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop {
		return false
	}
	b.count++
	if b.count == b.n {
		b.count = 0
		b.gen++
		if !b.next() {
			b.stop = true
		}
		b.cond.Broadcast()
		return !b.stop
	}
	for g := b.gen; g == b.gen && !b.stop; {
		b.cond.Wait()
	}
	return !b.stop
}

// abort ends the run for every worker (one could not set up).
func (b *barrier) abort(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	b.stop = true
	b.cond.Broadcast()
}

// onCPUs runs work(i) on one goroutine per CPU, each locked to its OS thread and the
// thread pinned to cpus[i] (sched_setaffinity). The goroutines exit locked, so the Go
// runtime ends their threads: no pinned thread outlives the benchmark. work must call
// bar.abort if it fails before its first bar.wait. GOMAXPROCS is raised for the run if
// it is lower than the team (a CPU quota on the cgroup), so that no two workers share a
// processor of the scheduler.
func onCPUs(cpus []int, bar *barrier, work func(i int) error) error {
	if n := len(cpus) + 1; runtime.GOMAXPROCS(0) < n {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	errs := make([]error, len(cpus))
	var wg sync.WaitGroup
	for i, c := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			var set unix.CPUSet
			set.Set(c)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs[i] = fmt.Errorf("pin a thread to CPU %d: %w", c, err)
				bar.abort(errs[i])
				return
			}
			errs[i] = work(i)
		}()
	}
	wg.Wait()
	bar.mu.Lock()
	err := bar.err
	bar.mu.Unlock()
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

// span is the wall time of a step: from the first worker's start to the last one's end.
func span(start, end []time.Time) time.Duration {
	lo, hi := start[0], end[0]
	for i := range start {
		if start[i].Before(lo) {
			lo = start[i]
		}
		if end[i].After(hi) {
			hi = end[i]
		}
	}
	return hi.Sub(lo)
}
