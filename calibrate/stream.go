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
	res := StreamResult{Threads: nt, ArrayBytes: int64(n) * 8 * int64(nt), ElementsPerThread: n}
	deadline := t0.Add(o.Duration)
	start, end := make([]time.Time, nt), make([]time.Time, nt)
	var best, first [4]float64
	step := 0 // steps started; step s runs kernel s%4 of round s/4
	var ctxErr error
	next := func() bool {
		if step == 0 {
			res.Setup = time.Since(t0)
		} else {
			k, round := (step-1)%4, (step-1)/4
			d := span(start, end).Seconds()
			rate := float64(streamKernels[k].bytes) * float64(n) * float64(nt) / d
			if round == 0 {
				first[k] = max(first[k], rate)
			} else {
				best[k] = max(best[k], rate)
			}
		}
		if err := ctx.Err(); err != nil {
			ctxErr = err
			return false
		}
		if step%4 == 0 && step > 0 {
			rounds := step / 4
			if rounds >= streamMaxRounds || (rounds >= streamMinRounds && !time.Now().Before(deadline)) {
				res.Rounds = rounds
				return false
			}
		}
		step++
		return true
	}
	bar := newBarrier(nt, next)
	// Padding between the arrays (512 B, not a multiple of the page size) keeps a[i], b[i]
	// and c[i] off the same cache set and page offset.
	const pad = 64
	err := onCPUs(o.CPUs, bar, func(w int) error {
		mem, err := unix.Mmap(-1, 0, (3*n+2*pad)*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			err = fmt.Errorf("stream: map %d MiB: %w", (3*n+2*pad)*8>>20, err)
			bar.abort(err)
			return err
		}
		defer unix.Munmap(mem)
		// Huge pages where the kernel has them (THP "madvise" or "always"), as tuned HPC
		// codes get them: fewer faults at first touch and TLB misses while streaming.
		_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
		all := unsafe.Slice((*float64)(unsafe.Pointer(&mem[0])), 3*n+2*pad)
		a, b, c := all[:n:n], all[n+pad:2*n+pad:2*n+pad], all[2*n+2*pad:]
		for i := range a {
			a[i], b[i], c[i] = 1, 2, 0
		}
		const s = 3.0
		for bar.wait() {
			k := (step - 1) % 4 // step is only written under the barrier's lock, before the release
			start[w] = time.Now()
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
			end[w] = time.Now()
		}
		return nil
	})
	res.Elapsed = time.Since(t0)
	if err != nil {
		return res, err
	}
	if ctxErr != nil {
		return res, ctxErr
	}
	for k := range best {
		if res.Rounds < 2 {
			best[k] = first[k]
		}
	}
	res.Copy, res.Scale, res.Add, res.Triad = best[0], best[1], best[2], best[3]
	return res, nil
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
