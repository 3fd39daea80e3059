package measure

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// The scheduler's view of the job's threads (/proc/PID/task/TID/schedstat): how long
// they waited on a run queue for a CPU, and how often they got one. Threads that wait
// while the job's CPUs sit idle are starved by other work or oversubscribed; time on a
// run queue is not idleness.
//
// A thread counts from the read that first sees it; what a thread did between the last
// read and its exit is not seen (its counters go with it).
var schedstatRegistration = Registration{Name: "schedstat", Default: true, New: newSchedstat,
	Metrics: vocabulary(SchedWaitSeconds, SchedTimeslices, SchedBusyThreadSeconds)}

// Metrics of the schedstat source (in the shared vocabulary: the properties use the
// run-queue wait to tell a starved job from one with idle CPUs).
const (
	SchedWaitSeconds       = sample.SchedWaitSeconds
	SchedTimeslices        = sample.SchedTimeslices
	SchedBusyThreadSeconds = sample.SchedBusyThreadSeconds
)

// busyShare is the share of an interval a thread must have run or waited to run to be a
// busy thread (SchedBusyThreadSeconds): a thread with work, not one that wakes briefly
// (a runtime's housekeeping, slurmstepd's own threads), whose short waits grow with the
// load on the node but say nothing about how much work the job had.
const busyShare = 0.5

type schedCount struct{ run, wait, slices uint64 }

// before says whether c counts less than p in any field: not the same thread's later
// counts (the tid was reused).
func (c schedCount) before(p schedCount) bool {
	return c.run < p.run || c.wait < p.wait || c.slices < p.slices
}

type schedstatSource struct {
	last map[int]schedCount // live threads as last read
	gone schedCount         // what threads no longer seen had counted
	prev schedCount         // the total at the previous read
	have bool
	at   time.Time // the previous read's time
	// Buffers reused across reads (raw reads: no poller registration per file).
	buf, dents []byte
	tids       []string
	// kept: processes whose task directory and threads' schedstat files stay open
	// between reads (at most maxSchedFiles descriptors); keep: /proc is the kernel's
	// (0: not known yet, 1: yes, 2: no).
	kept  map[int]*schedProc
	nkept int
	keep  int8
}

// schedProc is a process whose files the source keeps open. The set of its threads is
// unchanged while the link count of its task directory (2 plus its threads) is and every
// thread kept is still there: then a read is one fstat and one pread per thread.
type schedProc struct {
	task    int         // /proc/PID/task
	nlink   uint64      // its link count when listed
	threads map[int]int // tid → /proc/PID/task/TID/schedstat
}

// maxSchedFiles bounds the descriptors one job's schedstat source keeps open.
const maxSchedFiles = 256

func newSchedstat(*Env, *Spec) (Source, error) {
	return &schedstatSource{last: map[int]schedCount{}, kept: map[int]*schedProc{}}, nil
}

// readKept reads pid's threads through its kept files into seen; false when the process's
// threads changed (or it is gone): its files are closed, and it is read anew.
func (s *schedstatSource) readKept(pid int, seen map[int]schedCount) bool {
	p := s.kept[pid]
	if p == nil {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(p.task, &st) == nil && uint64(st.Nlink) == p.nlink {
		ok := true
		for tid, fd := range p.threads {
			c, err := s.preadSchedstat(fd)
			if err != nil {
				ok = false
				break
			}
			seen[tid] = c
		}
		if ok {
			return true
		}
	}
	s.forget(pid)
	return false
}

// preadSchedstat reads and parses a kept schedstat (one record, generated anew at offset 0).
func (s *schedstatSource) preadSchedstat(fd int) (schedCount, error) {
	if len(s.buf) < 256 {
		s.buf = make([]byte, 256)
	}
	s.buf = s.buf[:cap(s.buf)]
	n, err := unix.Pread(fd, s.buf, 0)
	if err != nil {
		return schedCount{}, err
	}
	if n == 0 || n == len(s.buf) {
		return schedCount{}, fmt.Errorf("schedstat of %d bytes", n)
	}
	return parseSchedstat(string(s.buf[:n]))
}

// forget closes pid's kept files.
func (s *schedstatSource) forget(pid int) {
	p := s.kept[pid]
	if p == nil {
		return
	}
	for _, fd := range p.threads {
		_ = unix.Close(fd)
	}
	_ = unix.Close(p.task)
	s.nkept -= 1 + len(p.threads)
	delete(s.kept, pid)
}

// keepProc keeps pid's task directory and its threads' schedstat files open, when /proc
// is the kernel's and the bound allows; the caller has just read them all.
func (s *schedstatSource) keepProc(dir string, pid int, tids []int) {
	if s.keep == 0 {
		s.keep = 2
		var sfs unix.Statfs_t
		if unix.Statfs(dir, &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC {
			s.keep = 1
		}
	}
	if s.keep != 1 || s.nkept+1+len(tids) > maxSchedFiles {
		return
	}
	task, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	p := &schedProc{task: task, threads: make(map[int]int, len(tids))}
	var st unix.Stat_t
	if unix.Fstat(task, &st) != nil || uint64(st.Nlink) != uint64(2+len(tids)) {
		_ = unix.Close(task) // threads came or went meanwhile: kept at a later read
		return
	}
	p.nlink = uint64(st.Nlink)
	for _, tid := range tids {
		fd, err := unix.Openat(task, strconv.Itoa(tid)+"/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, fd := range p.threads {
				_ = unix.Close(fd)
			}
			_ = unix.Close(task)
			return
		}
		p.threads[tid] = fd
	}
	s.kept[pid] = p
	s.nkept += 1 + len(tids)
}

func (s *schedstatSource) Read(r *Read) error {
	pids, err := r.PIDs()
	if errors.Is(err, errNoProcCgroup) {
		r.NotMeasured(SchedWaitSeconds, err.Error())
		r.NotMeasured(SchedTimeslices, err.Error())
		return nil
	}
	seen := make(map[int]schedCount, len(s.last))
	var errs []error
	files, missing := 0, 0
	live := make(map[int]bool, len(pids))
	for _, pid := range pids {
		live[pid] = true
		if s.readKept(pid, seen) {
			files += len(s.kept[pid].threads)
			continue
		}
		f, m, perrs := s.readProc(r.env.Host.Path("proc", strconv.Itoa(pid), "task"), pid, seen)
		files, missing, errs = files+f, missing+m, append(errs, perrs...)
	}
	for pid := range s.kept {
		if !live[pid] {
			s.forget(pid) // no longer the job's
		}
	}
	if files == 0 && missing > 0 {
		why := "not available: the kernel has no per-thread schedstat (CONFIG_SCHED_INFO)"
		r.NotMeasured(SchedWaitSeconds, why)
		r.NotMeasured(SchedTimeslices, why)
		return nil
	}
	s.add(r, seen)
	s.at = r.Sample.Time
	if len(errs) > 0 {
		return fmt.Errorf("%s: schedstat: %w", r.Spec.Name, errors.Join(errs...))
	}
	return nil
}

// readProc reads the schedstat of every thread of process pid (its task directory dir)
// into seen, and keeps the files open when all were read; it returns the files read,
// those missing (the thread is there, its schedstat is not) and what failed.
func (s *schedstatSource) readProc(dir string, pid int, seen map[int]schedCount) (files, missing int, errs []error) {
	s.tids = s.tids[:0]
	var terr error
	s.dents, terr = hostfs.Subdirs(dir, s.dents, func(name string) { s.tids = append(s.tids, name) })
	if terr != nil {
		return 0, 0, nil // the process exited
	}
	var read []int // threads read whole
	for _, name := range s.tids {
		tid, cerr := strconv.Atoi(name)
		if cerr != nil {
			continue
		}
		p := dir + "/" + name + "/schedstat"
		var rerr error
		s.buf, rerr = hostfs.ReadInto(p, s.buf)
		b := s.buf
		if errors.Is(rerr, fs.ErrNotExist) {
			if _, serr := os.Stat(dir + "/" + name); serr == nil {
				missing++ // the thread is there, its schedstat is not
			}
			continue
		}
		files++
		if rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		c, perr := parseSchedstat(string(b))
		if perr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, perr))
			continue
		}
		seen[tid] = c
		read = append(read, tid)
	}
	if len(read) == len(s.tids) && len(read) > 0 {
		s.keepProc(dir, pid, read)
	}
	return files, missing, errs
}

// add sets the interval's wait and timeslices from the threads seen at this read: their
// counts, with those of the threads that exited since (or whose tid was reused).
func (s *schedstatSource) add(r *Read, seen map[int]schedCount) {
	for tid, c := range s.last {
		n, ok := seen[tid]
		if !ok || n.before(c) { // exited (or the tid was reused)
			s.gone.wait += c.wait
			s.gone.slices += c.slices
		}
	}
	total := s.gone
	for _, c := range seen {
		total.wait += c.wait
		total.slices += c.slices
	}
	if s.have {
		r.Sample.Job[SchedWaitSeconds] = float64(total.wait-min(total.wait, s.prev.wait)) / 1e9
		r.Sample.Job[SchedTimeslices] = float64(total.slices - min(total.slices, s.prev.slices))
		r.Sample.Job[SchedBusyThreadSeconds] = s.busy(seen, r.Sample.Time.Sub(s.at).Seconds())
	}
	s.last, s.prev, s.have = seen, total, true
}

// busy sums the run and run-queue time, over an interval of the given seconds, of the
// threads that were runnable at least busyShare of it (a thread born in it: of its
// counts since its start, against the whole interval).
func (s *schedstatSource) busy(seen map[int]schedCount, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	var sum float64
	for tid, c := range seen {
		p, ok := s.last[tid]
		if !ok || c.before(p) {
			p = schedCount{} // new (or the tid was reused): counted from its start
		}
		if d := float64(c.run-p.run+c.wait-p.wait) / 1e9; d >= busyShare*seconds {
			sum += min(d, seconds)
		}
	}
	return sum
}

func (s *schedstatSource) Close() error {
	for pid := range s.kept {
		s.forget(pid)
	}
	s.keep = 2 // later reads keep nothing open
	return nil
}

// OpenFiles is how many files the source keeps open.
func (s *schedstatSource) OpenFiles() int { return s.nkept }

// parseSchedstat reads /proc/PID/task/TID/schedstat: nanoseconds on a CPU, nanoseconds
// waiting on a run queue, timeslices run.
func parseSchedstat(s string) (schedCount, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return schedCount{}, fmt.Errorf("want 3 fields, got %q", strings.TrimSpace(s))
	}
	run, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return schedCount{}, fmt.Errorf("time on a CPU %q: %w", f[0], err)
	}
	wait, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return schedCount{}, fmt.Errorf("run queue wait %q: %w", f[1], err)
	}
	slices, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return schedCount{}, fmt.Errorf("timeslices %q: %w", f[2], err)
	}
	return schedCount{run: run, wait: wait, slices: slices}, nil
}
