// Command persyst-workload runs known workloads for persyst's correctness tests and
// benchmarks: what it does is fixed by its arguments, so a test can compare what persyst
// measured with what was done. It writes nothing except what the workload asks for
// (no report on stdout unless -report is given), so its own output never pollutes the
// I/O being measured. With -report it prints, at its end, its own run time on stdout
// ("elapsed_seconds S": from its start to its end, after the flags are parsed), so that a
// benchmark can tell what the workload paid from what a wrapper around it did.
//
//	spin      -seconds S [-threads N] [-pin CPU,...]  busy threads for S seconds of CPU time each
//	write     -file F -bytes B -size S                 B bytes in write(2) calls of S bytes
//	openclose [-legacy] -file F -n N                   N openat(2) (open(2) with -legacy)/close(2) pairs
//	alloc     -mib M -steps K -step-seconds T [-hold T] allocate and touch M MiB in K steps
//	stat      -seconds S                               stat(2) in a loop for S seconds: time in the kernel
//	cpu       -iterations N                            fixed CPU-bound work (benchmarks)
//	membw     -mib M -passes N                         fixed memory-bound work (benchmarks)
//	read      -file F -bytes B -size S                 read F (B bytes, created if absent) in read(2) calls of S bytes, until B bytes were read (and -min-seconds passed)
//	forkexec  -seconds S [-prog P]                     start P (default /bin/true) again and again for S seconds
//	mutex     -seconds S [-threads N]                  N OS threads take turns on one lock for S seconds
//	mapread   -file F -mib M -seconds S                read pages of a mapped M MiB file in random order, dropping them from the page cache after each pass, for S seconds
//	procs     -n N -seconds S                          N processes, each spinning S seconds of CPU time
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
		fmt.Fprintln(os.Stderr, "usage: persyst-workload spin|write|openclose|alloc|stat|cpu|membw|read|forkexec|mutex|mapread|procs [flags]")
		os.Exit(2)
	}
	o := parseFlags(os.Args[1], os.Args[2:])
	start := time.Now()
	if err := o.run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "persyst-workload:", err)
		os.Exit(1)
	}
	if o.report {
		fmt.Printf("elapsed_seconds %.6f\n", time.Since(start).Seconds())
	}
}

// flags are every workload's flags (each says which workloads read it).
type flags struct {
	seconds, minSecs, stepSecs, hold float64
	threads, size, n, mib, steps     int
	passes                           int
	pin, file, prog                  string
	nbytes, iters                    int64
	legacy, report                   bool
}

func parseFlags(name string, args []string) *flags {
	o := &flags{}
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.Float64Var(&o.seconds, "seconds", 2, "spin: CPU seconds per thread")
	fs.IntVar(&o.threads, "threads", 1, "spin: threads")
	fs.StringVar(&o.pin, "pin", "", "spin: pin thread i to the i-th CPU of this list")
	fs.StringVar(&o.file, "file", "", "write/openclose: file")
	fs.Int64Var(&o.nbytes, "bytes", 64<<20, "write: total bytes")
	fs.IntVar(&o.size, "size", 4096, "write: bytes per write(2)")
	fs.Float64Var(&o.minSecs, "min-seconds", 0, "write, read, openclose: go on for at least this long (write, read: from the file's start again after every -bytes; a pipe's writer goes on)")
	fs.IntVar(&o.n, "n", 10000, "openclose: pairs; procs: processes")
	fs.BoolVar(&o.legacy, "legacy", false, "openclose: open with open(2), not openat(2)")
	fs.IntVar(&o.mib, "mib", 256, "alloc/membw: MiB")
	fs.IntVar(&o.steps, "steps", 8, "alloc: steps")
	fs.Float64Var(&o.stepSecs, "step-seconds", 0.5, "alloc: seconds between steps")
	fs.Float64Var(&o.hold, "hold", 0, "alloc: seconds to hold the memory at the end")
	fs.Int64Var(&o.iters, "iterations", 300_000_000, "cpu: iterations")
	fs.IntVar(&o.passes, "passes", 20, "membw: passes over the array")
	fs.StringVar(&o.prog, "prog", "/bin/true", "forkexec: the program to start")
	fs.BoolVar(&o.report, "report", false, "print the workload's own run time on stdout at its end")
	_ = fs.Parse(args)
	return o
}

// secs turns a flag's seconds into a duration.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// run runs the workload name with the flags o.
func (o *flags) run(name string) error {
	switch name {
	case "spin":
		return spin(secs(o.seconds), o.threads, o.pin)
	case "write":
		return write(o.file, o.nbytes, o.size, secs(o.minSecs))
	case "openclose":
		return openClose(o.file, o.n, o.legacy, secs(o.minSecs))
	case "alloc":
		alloc(o.mib, o.steps, secs(o.stepSecs), secs(o.hold))
	case "stat":
		return statLoop(secs(o.seconds))
	case "cpu":
		cpu(o.iters)
	case "membw":
		membw(o.mib, o.passes)
	case "read":
		return readSmall(o.file, o.nbytes, o.size, secs(o.minSecs))
	case "forkexec":
		return forkExec(o.prog, secs(o.seconds))
	case "mutex":
		mutex(o.threads, secs(o.seconds))
	case "mapread":
		return mapRead(o.file, o.mib, secs(o.seconds))
	case "procs":
		return procs(o.n, o.seconds)
	default:
		return fmt.Errorf("unknown workload %q", name)
	}
	return nil
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
	// Every thread runs at once, as a C program's threads would (more threads than CPUs
	// then compete for them in the kernel, not in Go's scheduler).
	runtime.GOMAXPROCS(max(threads, runtime.NumCPU()))
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

// write writes total bytes to path in size-byte write(2) calls; with minTime, it goes on
// until minTime passed too, from the file's start again after every total bytes (a run
// long enough to be judged on any machine, a bounded file).
func write(path string, total int64, size int, minTime time.Duration) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	for done := int64(0); done < total || time.Since(start) < minTime; {
		if done >= total {
			// From the file's start again; a pipe or a socket just goes on.
			if _, err := unix.Seek(fd, 0, 0); err != nil && err != unix.ESPIPE {
				return fmt.Errorf("seek %s: %w", path, err)
			}
			done = 0
		}
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

// openClose opens and closes path n times; with minTime, it goes on until minTime
// passed too.
func openClose(path string, n int, legacy bool, minTime time.Duration) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	unix.Close(fd)
	open := unix.Open
	if legacy {
		open = legacyOpen
	}
	start := time.Now()
	for i := 0; i < n || time.Since(start) < minTime; i++ {
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

// readSmall reads path in read(2) calls of size bytes until total bytes were read,
// starting over at its end; a missing file is made first (1 MiB).
func readSmall(path string, total int64, size int, minTime time.Duration) error {
	if _, err := os.Stat(path); err != nil {
		if err := write(path, 1<<20, 1<<20, 0); err != nil {
			return err
		}
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, size)
	start := time.Now()
	for done := int64(0); done < total || time.Since(start) < minTime; {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if n == 0 {
			if _, err := unix.Seek(fd, 0, 0); err != nil {
				return err
			}
			continue
		}
		done += int64(n)
	}
	return nil
}

// forkExec starts prog again and again (fork and exec, wait) for d.
func forkExec(prog string, d time.Duration) error {
	for start := time.Now(); time.Since(start) < d; {
		p, err := os.StartProcess(prog, []string{prog}, &os.ProcAttr{})
		if err != nil {
			return fmt.Errorf("start %s: %w", prog, err)
		}
		if _, err := p.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// mutex has threads OS threads take turns on one lock for d: each turn wakes a
// sleeping thread (lock contention, not CPU work).
func mutex(threads int, d time.Duration) {
	runtime.GOMAXPROCS(max(threads, runtime.NumCPU()))
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a blocked turn blocks the thread, not only the goroutine
			x := uint64(i)
			for time.Now().Before(stop) {
				mu.Lock()
				for k := 0; k < 200; k++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
				mu.Unlock()
			}
			sink += x
		}()
	}
	wg.Wait()
}

// mapRead maps a file of mib MiB (made if absent) and reads one byte of each page in a
// random order, for d; after each pass it drops the file's pages from the page cache
// (madvise, fadvise), so that every page is read from storage again: major page faults.
func mapRead(path string, mib int, d time.Duration) error {
	size := int64(mib) << 20
	if st, err := os.Stat(path); err != nil || st.Size() != size {
		if err := write(path, size, 1<<20, 0); err != nil {
			return err
		}
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	_ = unix.Fdatasync(fd)
	page := os.Getpagesize()
	pages := int(size) / page
	order := make([]int, pages)
	x := uint64(1)
	for i := range order {
		order[i] = i
	}
	for i := len(order) - 1; i > 0; i-- { // a fixed shuffle
		x = x*6364136223846793005 + 1442695040888963407
		j := int(x>>33) % (i + 1)
		order[i], order[j] = order[j], order[i]
	}
	for start := time.Now(); time.Since(start) < d; {
		if err := unix.Fadvise(fd, 0, size, unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("fadvise %s: %w", path, err)
		}
		m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("mmap %s: %w", path, err)
		}
		_ = unix.Madvise(m, unix.MADV_RANDOM)
		var sum byte
		for i, p := range order {
			sum += m[p*page]
			if i%256 == 0 && time.Since(start) >= d {
				break
			}
		}
		sink += uint64(sum)
		if err := unix.Munmap(m); err != nil {
			return err
		}
	}
	return nil
}

// procs runs n copies of this program's spin workload as processes and waits for them.
func procs(n int, seconds float64) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var ps []*os.Process
	for i := 0; i < n; i++ {
		p, err := os.StartProcess(self, []string{self, "spin", "-seconds", strconv.FormatFloat(seconds, 'f', -1, 64)},
			&os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		st, err := p.Wait()
		if err != nil {
			return err
		}
		if !st.Success() {
			return fmt.Errorf("a spinning process: %s", st)
		}
	}
	return nil
}
