// Command persyst-workload runs known workloads for persyst's correctness tests and
// benchmarks: what it does is fixed by its arguments, so a test can compare what persyst
// measured with what was done. It writes nothing except what the workload asks for
// (no report on stdout unless -report is given), so its own output never pollutes the
// I/O being measured.
//
//	spin      -seconds S [-threads N] [-pin CPU,...]  busy threads for S seconds of CPU time each
//	write     -file F -bytes B -size S                 B bytes in write(2) calls of S bytes
//	openclose [-legacy] -file F -n N                   N openat(2) (open(2) with -legacy)/close(2) pairs
//	alloc     -mib M -steps K -step-seconds T [-hold T] allocate and touch M MiB in K steps
//	stat      -seconds S                               stat(2) in a loop for S seconds: time in the kernel
//	cpu       -iterations N                            fixed CPU-bound work (benchmarks)
//	membw     -mib M -passes N                         fixed memory-bound work (benchmarks)
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: persyst-workload spin|write|openclose|alloc|cpu|membw [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	seconds := fs.Float64("seconds", 2, "spin: CPU seconds per thread")
	threads := fs.Int("threads", 1, "spin: threads")
	pin := fs.String("pin", "", "spin: pin thread i to the i-th CPU of this list")
	file := fs.String("file", "", "write/openclose: file")
	nbytes := fs.Int64("bytes", 64<<20, "write: total bytes")
	size := fs.Int("size", 4096, "write: bytes per write(2)")
	n := fs.Int("n", 10000, "openclose: pairs")
	legacy := fs.Bool("legacy", false, "openclose: open with open(2), not openat(2)")
	mib := fs.Int("mib", 256, "alloc/membw: MiB")
	steps := fs.Int("steps", 8, "alloc: steps")
	stepSecs := fs.Float64("step-seconds", 0.5, "alloc: seconds between steps")
	hold := fs.Float64("hold", 0, "alloc: seconds to hold the memory at the end")
	iters := fs.Int64("iterations", 300_000_000, "cpu: iterations")
	passes := fs.Int("passes", 20, "membw: passes over the array")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "spin":
		err = spin(time.Duration(*seconds*float64(time.Second)), *threads, *pin)
	case "write":
		err = write(*file, *nbytes, *size)
	case "openclose":
		err = openClose(*file, *n, *legacy)
	case "alloc":
		alloc(*mib, *steps, time.Duration(*stepSecs*float64(time.Second)), time.Duration(*hold*float64(time.Second)))
	case "stat":
		err = statLoop(time.Duration(*seconds * float64(time.Second)))
	case "cpu":
		cpu(*iters)
	case "membw":
		membw(*mib, *passes)
	default:
		err = fmt.Errorf("unknown workload %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "persyst-workload:", err)
		os.Exit(1)
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

var sink uint64

func spin(d time.Duration, threads int, pin string) error {
	var cpus []int
	if pin != "" {
		for _, f := range strings.Split(pin, ",") {
			c, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("-pin %q: %w", pin, err)
			}
			cpus = append(cpus, c)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			runtime.LockOSThread()
			if len(cpus) > 0 {
				var set unix.CPUSet
				set.Set(cpus[i%len(cpus)])
				if err := unix.SchedSetaffinity(0, &set); err != nil {
					errs <- fmt.Errorf("pin to CPU %d: %w", cpus[i%len(cpus)], err)
					return
				}
			}
			start := threadCPU()
			x := uint64(i)
			for threadCPU()-start < d {
				for k := 0; k < 100000; k++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			sink += x
		}(i)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func write(path string, total int64, size int) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	for done := int64(0); done < total; {
		chunk := buf
		if rest := total - done; rest < int64(len(chunk)) {
			chunk = chunk[:rest]
		}
		n, err := unix.Write(fd, chunk)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		done += int64(n)
	}
	return nil
}

func openClose(path string, n int, legacy bool) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	unix.Close(fd)
	open := unix.Open
	if legacy {
		open = legacyOpen
	}
	for i := 0; i < n; i++ {
		fd, err := open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		unix.Close(fd)
	}
	return nil
}

func alloc(mib, steps int, every, hold time.Duration) {
	page := os.Getpagesize()
	per := (mib << 20) / steps
	var keep [][]byte
	for i := 0; i < steps; i++ {
		b := make([]byte, per)
		for j := 0; j < len(b); j += page {
			b[j] = 1
		}
		keep = append(keep, b)
		if i < steps-1 {
			time.Sleep(every)
		}
	}
	time.Sleep(hold)
	runtime.KeepAlive(keep)
}

// statLoop spends its time in the kernel (path lookups) without opening files or doing
// I/O.
func statLoop(d time.Duration) error {
	var st unix.Stat_t
	for start := time.Now(); time.Since(start) < d; {
		for i := 0; i < 1000; i++ {
			if err := unix.Stat("/proc/self/status", &st); err != nil {
				return err
			}
		}
	}
	return nil
}

func cpu(n int64) {
	x := uint64(1)
	for i := int64(0); i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink = x
}

func membw(mib, passes int) {
	a := make([]uint64, (mib<<20)/8)
	b := make([]uint64, len(a))
	for p := 0; p < passes; p++ {
		for i := range a {
			a[i] = b[i] + uint64(p)
		}
		a, b = b, a
	}
	sink = a[len(a)/2]
}
