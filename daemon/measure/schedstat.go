package measure

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

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
	Metrics: vocabulary(SchedWaitSeconds, SchedTimeslices)}

// Metrics of the schedstat source (in the shared vocabulary: the properties use the
// run-queue wait to tell a starved job from one with idle CPUs).
const (
	SchedWaitSeconds = sample.SchedWaitSeconds
	SchedTimeslices  = sample.SchedTimeslices
)

type schedCount struct{ wait, slices uint64 }

type schedstatSource struct {
	last map[int]schedCount // live threads as last read
	gone schedCount         // what threads no longer seen had counted
	prev schedCount         // the total at the previous read
	have bool
	// Buffers reused across reads (raw reads: no poller registration per file).
	buf, dents []byte
	tids       []string
}

func newSchedstat(*Env, *Spec) (Source, error) {
	return &schedstatSource{last: map[int]schedCount{}}, nil
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
	for _, pid := range pids {
		dir := r.env.Host.Path("proc", strconv.Itoa(pid), "task")
		s.tids = s.tids[:0]
		var terr error
		s.dents, terr = hostfs.Subdirs(dir, s.dents, func(name string) { s.tids = append(s.tids, name) })
		if terr != nil {
			continue // the process exited
		}
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
		}
	}
	if files == 0 && missing > 0 {
		why := "not available: the kernel has no per-thread schedstat (CONFIG_SCHED_INFO)"
		r.NotMeasured(SchedWaitSeconds, why)
		r.NotMeasured(SchedTimeslices, why)
		return nil
	}
	for tid, c := range s.last {
		n, ok := seen[tid]
		if !ok || n.wait < c.wait || n.slices < c.slices { // exited (or the tid was reused)
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
	}
	s.last, s.prev, s.have = seen, total, true
	if len(errs) > 0 {
		return fmt.Errorf("%s: schedstat: %w", r.Spec.Name, errors.Join(errs...))
	}
	return nil
}

func (s *schedstatSource) Close() error { return nil }

// parseSchedstat reads /proc/PID/task/TID/schedstat: nanoseconds on a CPU, nanoseconds
// waiting on a run queue, timeslices run.
func parseSchedstat(s string) (schedCount, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return schedCount{}, fmt.Errorf("want 3 fields, got %q", strings.TrimSpace(s))
	}
	wait, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return schedCount{}, fmt.Errorf("run queue wait %q: %w", f[1], err)
	}
	slices, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return schedCount{}, fmt.Errorf("timeslices %q: %w", f[2], err)
	}
	return schedCount{wait: wait, slices: slices}, nil
}
