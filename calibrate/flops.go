package calibrate

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/cpu"
)

// FlopsOptions configure the floating-point benchmark.
type FlopsOptions struct {
	CPUs     []int         // one pinned thread on each
	Duration time.Duration // time budget
}

// FlopsResult is the best scalar double-precision rate of all threads together
// (flop/s), per kernel.
type FlopsResult struct {
	Threads int  `json:"threads"`
	FMA     bool `json:"fma"` // the processor has FMA (golang.org/x/sys/cpu): the fma kernel ran
	// FMARate: fmaChains chains of math.FMA (1 instruction, 2 flops); 0 without FMA.
	FMARate float64 `json:"fma_rate"`
	// MulAddRate: mulAddChains chains of x*m + c (a multiply and an add, 2 flops; the
	// compiler fuses them into one FMA when built with GOAMD64=v3 or on arm64).
	MulAddRate float64       `json:"muladd_rate"`
	Rounds     int           `json:"rounds"`
	Elapsed    time.Duration `json:"elapsed_ns"`
}

// Kernels is the number of kernels that ran (2 with FMA, else 1).
func (r FlopsResult) Kernels() int {
	if r.FMA {
		return 2
	}
	return 1
}

// Scalar is the best of the two kernels.
func (r FlopsResult) Scalar() float64 { return max(r.FMARate, r.MulAddRate) }

// Kernel returns the name of the kernel that gave Scalar.
func (r FlopsResult) Kernel() string {
	if r.FMARate >= r.MulAddRate && r.FMARate > 0 {
		return fmt.Sprintf("math.FMA, %d chains", fmaChains)
	}
	return fmt.Sprintf("multiply-add, %d chains", mulAddChains)
}

const (
	fmaChains    = 8  // an FMA's latency (4–5 cycles) × 2 pipes
	mulAddChains = 12 // multiply then add: twice the latency per chain
	flopsChunk   = 1 << 14
)

// hasFMA says whether math.FMA is one instruction here rather than the software fallback.
func hasFMA() bool {
	switch runtime.GOARCH {
	case "amd64":
		return cpu.X86.HasFMA
	case "arm64", "ppc64le", "ppc64", "s390x", "riscv64":
		return true
	}
	return false
}

// Flops measures the scalar double-precision floating-point rate of the CPUs together:
// every thread, pinned to its CPU, runs independent dependency chains of a = a*m + c
// (with m < 1 the chains converge to c/(1−m) = 1: no overflow, no denormals), long enough
// to fill the pipelines. Rounds alternate two kernels, math.FMA and a separate multiply
// and add, each round timed per thread, all threads started by a barrier; the best round
// of each kernel is kept (sum of the threads' rates).
//
// Both kernels count 2 flops per chain step. Two are needed because Go has no SIMD and
// compiles math.FMA, unless built for GOAMD64=v3, to a run-time check of the CPU's FMA
// flag with a call to the software FMA on the other branch: the chains are then spilled
// to memory around each FMA, and the FMA kernel reaches a fraction of the pipelines'
// rate. The multiply-add kernel keeps its chains in registers; on processors with
// separate multiply and add pipes (AMD Zen) it reaches the FMA peak, elsewhere half of it.
func Flops(ctx context.Context, o FlopsOptions) (FlopsResult, error) {
	t0 := time.Now()
	nt := len(o.CPUs)
	if nt == 0 {
		return FlopsResult{}, fmt.Errorf("flops: no CPUs")
	}
	fr := newFlopsRun(nt, hasFMA(), o.Duration, t0.Add(o.Duration))
	bar := newBarrier(nt, func() bool { return fr.next(ctx) })
	err := onCPUs(o.CPUs, bar, func(w int) error { return fr.work(bar, w) })
	fr.res.Elapsed = time.Since(t0)
	if err != nil {
		return fr.res, err
	}
	if fr.ctxErr != nil {
		return fr.res, fr.ctxErr
	}
	return fr.res, nil
}

// flopsRun is one run of Flops, shared by its threads. The last thread to reach the
// barrier updates it (next) before the others are released; they only read it.
type flopsRun struct {
	kernels   []int         // the kernels the rounds alternate, in order
	minRounds int           // two of each kernel
	roundDur  time.Duration // each thread's time in one round
	deadline  time.Time
	rates     []float64 // per thread: its rate in the round just run
	round     int       // rounds started
	res       FlopsResult
	ctxErr    error
}

// newFlopsRun plans a run of nt threads: with FMA, the rounds alternate the FMA and
// multiply-add kernels, else only multiply-add runs. Rounds are long enough that the
// barrier's wake-ups do not count, short enough for a few of each kernel in budget.
func newFlopsRun(nt int, fma bool, budget time.Duration, deadline time.Time) *flopsRun {
	fr := &flopsRun{kernels: []int{kernelMulAdd}, deadline: deadline, rates: make([]float64, nt),
		res: FlopsResult{Threads: nt, FMA: fma}}
	if fma {
		fr.kernels = []int{kernelFMA, kernelMulAdd}
	}
	fr.minRounds = 2 * len(fr.kernels)
	fr.roundDur = min(max(budget/time.Duration(4*len(fr.kernels)), 10*time.Millisecond), 500*time.Millisecond)
	return fr
}

// next is the barrier's bookkeeping between rounds: it keeps the round just run if
// it is its kernel's best (the sum of the threads' rates), then says whether to run
// another. The run ends on ctx's error, or once the deadline has passed, each kernel
// has run at least twice and every kernel as often as the others.
func (fr *flopsRun) next(ctx context.Context) bool {
	if fr.round > 0 {
		sum := 0.0
		for _, r := range fr.rates {
			sum += r
		}
		switch fr.kernels[(fr.round-1)%len(fr.kernels)] {
		case kernelFMA:
			fr.res.FMARate = max(fr.res.FMARate, sum)
		case kernelMulAdd:
			fr.res.MulAddRate = max(fr.res.MulAddRate, sum)
		}
	}
	if err := ctx.Err(); err != nil {
		fr.ctxErr = err
		return false
	}
	if fr.round >= fr.minRounds && fr.round%len(fr.kernels) == 0 && !time.Now().Before(fr.deadline) {
		fr.res.Rounds = fr.round
		return false
	}
	fr.round++
	return true
}

// work is thread w of the run: each round it runs the round's kernel on its own
// chains for roundDur and records its rate. At the end it checks that the chains
// stayed finite.
func (fr *flopsRun) work(bar *barrier, w int) error {
	var fa [fmaChains]float64
	var ma [mulAddChains]float64
	for i := range fa {
		fa[i] = 1 + float64(i)/64
	}
	for i := range ma {
		ma[i] = 1 + float64(i)/64
	}
	const m, c = 1 - 1.0/(1<<20), 1.0 / (1 << 20)
	for bar.wait() {
		k := fr.kernels[(fr.round-1)%len(fr.kernels)] // round is written under the barrier's lock, before the release
		ops := 0
		start := time.Now()
		var d time.Duration
		for d < fr.roundDur {
			if k == kernelFMA {
				fmaKernel(flopsChunk, m, c, &fa)
				ops += flopsChunk * fmaChains
			} else {
				mulAddKernel(flopsChunk, m, c, &ma)
				ops += flopsChunk * mulAddChains
			}
			d = time.Since(start)
		}
		fr.rates[w] = 2 * float64(ops) / d.Seconds()
	}
	if s := fa[0] + ma[0]; math.IsNaN(s) || math.IsInf(s, 0) {
		return fmt.Errorf("flops: chains diverged (%v)", s)
	}
	return nil
}

const (
	kernelFMA = iota
	kernelMulAdd
)

func fmaKernel(n int, m, c float64, acc *[fmaChains]float64) {
	a0, a1, a2, a3, a4, a5, a6, a7 := acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]
	for range n {
		a0 = math.FMA(a0, m, c)
		a1 = math.FMA(a1, m, c)
		a2 = math.FMA(a2, m, c)
		a3 = math.FMA(a3, m, c)
		a4 = math.FMA(a4, m, c)
		a5 = math.FMA(a5, m, c)
		a6 = math.FMA(a6, m, c)
		a7 = math.FMA(a7, m, c)
	}
	acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7] = a0, a1, a2, a3, a4, a5, a6, a7
}

func mulAddKernel(n int, m, c float64, acc *[mulAddChains]float64) {
	a0, a1, a2, a3, a4, a5 := acc[0], acc[1], acc[2], acc[3], acc[4], acc[5]
	a6, a7, a8, a9, a10, a11 := acc[6], acc[7], acc[8], acc[9], acc[10], acc[11]
	for range n {
		a0 = a0*m + c
		a1 = a1*m + c
		a2 = a2*m + c
		a3 = a3*m + c
		a4 = a4*m + c
		a5 = a5*m + c
		a6 = a6*m + c
		a7 = a7*m + c
		a8 = a8*m + c
		a9 = a9*m + c
		a10 = a10*m + c
		a11 = a11*m + c
	}
	acc[0], acc[1], acc[2], acc[3], acc[4], acc[5] = a0, a1, a2, a3, a4, a5
	acc[6], acc[7], acc[8], acc[9], acc[10], acc[11] = a6, a7, a8, a9, a10, a11
}
