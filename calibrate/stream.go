package calibrate

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// StreamOptions configure the memory-bandwidth benchmark.
type StreamOptions struct {
	CPUs       []int         // one pinned thread on each
	ArrayBytes int64         // size of each array, summed over the threads (ArrayBytes)
	Duration   time.Duration // time budget, setting up the arrays included
}

// Kernels of STREAM, in its order, and the bytes each moves per element, counted as
// STREAM does (no write-allocate traffic for the stored array).
var streamKernels = []struct {
	name  string
	bytes int
}{{"copy", 16}, {"scale", 16}, {"add", 24}, {"triad", 24}}

// StreamResult is the best bandwidth of each kernel (bytes/s, STREAM counting), all
// threads together.
type StreamResult struct {
	Threads           int           `json:"threads"`
	ArrayBytes        int64         `json:"array_bytes"` // each array, all threads
	ElementsPerThread int           `json:"elements_per_thread"`
	Rounds            int           `json:"rounds"` // rounds of the four kernels; the first is a warm-up when there are more
	Copy              float64       `json:"copy"`
	Scale             float64       `json:"scale"`
	Add               float64       `json:"add"`
	Triad             float64       `json:"triad"`
	Setup             time.Duration `json:"setup_ns"`   // mapping and first touch of the arrays
	Elapsed           time.Duration `json:"elapsed_ns"` // setup included
}

// Average is the mean of the four kernels' best bandwidths (the PerSyst thesis, Table 7.10).
func (r StreamResult) Average() float64 { return (r.Copy + r.Scale + r.Add + r.Triad) / 4 }

const (
	streamMinRounds = 3 // at least two timed after the warm-up
	streamMaxRounds = 200
)

// Stream measures the sustainable memory bandwidth of the CPUs together, like McCalpin's
// STREAM with OpenMP: every thread, pinned to its CPU, maps and first-touches its own
// part of the arrays a, b and c (so pages are local to its NUMA node), then all threads
// run each kernel together, started by a barrier, timed from the first thread's start to
// the last one's end:
//
//	copy  c[i] = a[i]             16 bytes per element
//	scale b[i] = s*c[i]           16
//	add   c[i] = a[i] + b[i]      24
//	triad a[i] = b[i] + s*c[i]    24
//
// Rounds of the four kernels repeat until the duration is spent (at least 3, at most
// 200); the best rate of each kernel over the rounds after the first is kept. It stops
// early with ctx's error.
func Stream(ctx context.Context, o StreamOptions) (StreamResult, error) {
	t0 := time.Now()
	nt := len(o.CPUs)
	if nt == 0 {
		return StreamResult{}, fmt.Errorf("stream: no CPUs")
	}
	n := ElementsPerThread(o.ArrayBytes, nt)
	sr := &streamRun{t0: t0, deadline: t0.Add(o.Duration), n: n, start: make([]time.Time, nt), end: make([]time.Time, nt),
		res: StreamResult{Threads: nt, ArrayBytes: int64(n) * 8 * int64(nt), ElementsPerThread: n}}
	bar := newBarrier(nt, func() bool { return sr.next(ctx) })
	err := onCPUs(o.CPUs, bar, func(w int) error { return sr.work(bar, w) })
	sr.res.Elapsed = time.Since(t0)
	if err != nil {
		return sr.res, err
	}
	if sr.ctxErr != nil {
		return sr.res, sr.ctxErr
	}
	return sr.result(), nil
}

// streamRun is one run of Stream, shared by its threads. The last thread to reach the
// barrier updates it (next) before the others are released; they only read step and
// write their own start and end times.
type streamRun struct {
	t0, deadline time.Time
	n            int         // elements of each array per thread
	start, end   []time.Time // per thread: when it started and ended the step just run
	best, first  [4]float64  // per kernel: the best rate after the warm-up round, and in it
	step         int         // steps started; step s runs kernel s%4 of round s/4
	res          StreamResult
	ctxErr       error
}

// next is the barrier's bookkeeping between steps: it records the setup time or the
// rate of the step just run, then says whether to run another. The run ends on ctx's
// error, or after a whole round once there have been streamMaxRounds rounds, or
// streamMinRounds and the deadline has passed.
func (sr *streamRun) next(ctx context.Context) bool {
	if sr.step == 0 {
		sr.res.Setup = time.Since(sr.t0)
	} else {
		sr.record()
	}
	if err := ctx.Err(); err != nil {
		sr.ctxErr = err
		return false
	}
	if sr.step%4 == 0 && sr.step > 0 {
		rounds := sr.step / 4
		if rounds >= streamMaxRounds || (rounds >= streamMinRounds && !time.Now().Before(sr.deadline)) {
			sr.res.Rounds = rounds
			return false
		}
	}
	sr.step++
	return true
}

// record keeps the rate of the step just run, timed from the first thread's start to
// the last one's end, if it is its kernel's best so far. The first round's rates are
// kept apart: it is a warm-up, counted only when there is no other round.
func (sr *streamRun) record() {
	k, round := (sr.step-1)%4, (sr.step-1)/4
	d := span(sr.start, sr.end).Seconds()
	rate := float64(streamKernels[k].bytes) * float64(sr.n) * float64(sr.res.Threads) / d
	if round == 0 {
		sr.first[k] = max(sr.first[k], rate)
	} else {
		sr.best[k] = max(sr.best[k], rate)
	}
}

// work is thread w of the run: it maps and first-touches its part of the arrays, then
// runs each step's kernel on it, timing itself.
func (sr *streamRun) work(bar *barrier, w int) error {
	mem, a, b, c, err := mapStreamArrays(sr.n)
	if err != nil {
		bar.abort(err)
		return err
	}
	defer unix.Munmap(mem)
	for i := range a {
		a[i], b[i], c[i] = 1, 2, 0
	}
	const s = 3.0
	for bar.wait() {
		k := (sr.step - 1) % 4 // step is only written under the barrier's lock, before the release
		sr.start[w] = time.Now()
		switch k {
		case 0:
			streamCopy(c, a)
		case 1:
			streamScale(b, c, s)
		case 2:
			streamAdd(c, a, b)
		case 3:
			streamTriad(a, b, c, s)
		}
		sr.end[w] = time.Now()
	}
	return nil
}

// streamPad is the padding between the arrays, in elements. 512 B, not a multiple of
// the page size, keeps a[i], b[i] and c[i] off the same cache set and page offset.
const streamPad = 64

// mapStreamArrays maps one thread's three arrays of n elements in one anonymous
// mapping (mem, for the caller to unmap), not yet touched: the thread that touches
// them first gets their pages on its NUMA node.
func mapStreamArrays(n int) (mem []byte, a, b, c []float64, err error) {
	mem, err = unix.Mmap(-1, 0, (3*n+2*streamPad)*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("stream: map %d MiB: %w", (3*n+2*streamPad)*8>>20, err)
	}
	// Huge pages where the kernel has them (THP "madvise" or "always"), as tuned HPC
	// codes get them: fewer faults at first touch and TLB misses while streaming.
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	all := unsafe.Slice((*float64)(unsafe.Pointer(&mem[0])), 3*n+2*streamPad)
	a, b, c = all[:n:n], all[n+streamPad:2*n+streamPad:2*n+streamPad], all[2*n+2*streamPad:]
	return mem, a, b, c, nil
}

// result is the run's StreamResult once it has ended well: the best rate of each
// kernel after the warm-up, or of the warm-up when there was no other round.
func (sr *streamRun) result() StreamResult {
	res, best := sr.res, sr.best
	if res.Rounds < 2 {
		best = sr.first
	}
	res.Copy, res.Scale, res.Add, res.Triad = best[0], best[1], best[2], best[3]
	return res
}

// The kernels are plain loops: Go compiles them to scalar loads and stores, which is
// enough to saturate memory with all cores at work (a core issues far more than its share
// of the node's bandwidth). copy is not Go's copy, whose large moves use non-temporal
// stores that no compiled loop of an application gets.

func streamCopy(c, a []float64) {
	a = a[:len(c)]
	for i := range c {
		c[i] = a[i]
	}
}

func streamScale(b, c []float64, s float64) {
	c = c[:len(b)]
	for i := range b {
		b[i] = s * c[i]
	}
}

func streamAdd(c, a, b []float64) {
	a, b = a[:len(c)], b[:len(c)]
	for i := range c {
		c[i] = a[i] + b[i]
	}
}

func streamTriad(a, b, c []float64, s float64) {
	b, c = b[:len(a)], c[:len(a)]
	for i := range a {
		a[i] = b[i] + s*c[i]
	}
}
