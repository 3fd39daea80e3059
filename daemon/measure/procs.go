package measure

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/measure/procio"
	"github.com/persyst/persyst/sample"
)

// The I/O of the job's processes from /proc/PID/io (procio), including what processes
// that exited did, and how many processes the job has.
var procRegistration = Registration{Name: "procio", Default: true, Metrics: vocabulary(procNames...), New: newProc}

var procNames = []string{sample.ReadChars, sample.WriteChars, sample.ReadSyscalls, sample.WriteSyscalls,
	sample.StorageReadBytes, sample.StorageWriteBytes, sample.CancelledWrites, sample.Processes}

type procSource struct {
	tracker *procio.Tracker
	prev    procio.IO
	have    bool
}

func newProc(env *Env, spec *Spec) (Source, error) {
	return &procSource{tracker: procio.NewTracker(env.Host, procio.TrackerOptions{Since: env.bootTicks(spec.ProcsSince)})}, nil
}

// bootTicks returns t as a process start time (procio.Ticks); 0 for the zero time, or if
// the boot clock cannot be read (then every process counts from its birth).
func (env *Env) bootTicks(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	up := env.Uptime
	if up == nil {
		up = kernelUptime
	}
	now := time.Now
	if env.Now != nil {
		now = env.Now
	}
	d, err := up()
	if err != nil {
		return 0
	}
	return procio.Ticks(d - now().Sub(t))
}

// kernelUptime reads CLOCK_BOOTTIME.
func kernelUptime() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("boot clock: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// listPIDs lists the job's processes (Read.PIDs).
func (r *Read) listPIDs() ([]int, error) {
	if r.Spec.ProcCgroup == "" && r.Spec.ExtraPIDs == nil {
		return nil, errNoProcCgroup
	}
	var pids []int
	var err error
	if r.Spec.ProcCgroup != "" {
		if r.lister != nil {
			pids, err = r.lister.List(r.Spec.ProcCgroup)
		} else {
			pids, err = procio.ListProcs(r.env.Host, r.Spec.ProcCgroup)
		}
		if err != nil && errors.Is(err, fs.ErrNotExist) {
			err = nil // the job's cgroup is gone: its processes are too
		}
	}
	if r.Spec.ExtraPIDs != nil {
		pids = append(pids, r.Spec.ExtraPIDs()...)
	}
	return pids, err
}

func (p *procSource) Read(r *Read) error {
	pids, listErr := r.PIDs()
	if errors.Is(listErr, errNoProcCgroup) {
		for _, n := range procNames {
			r.NotMeasured(n, listErr.Error())
		}
		return nil
	}
	total, n, err := p.tracker.Update(pids)
	err = errors.Join(listErr, err)
	s := r.Sample
	s.Job[sample.Processes] = float64(n)
	// The first read is the baseline of the job's sample, but the processes born since
	// the job began count from zero (prev starts at zero): what they did before this
	// read is in the next sample.
	if p.have {
		d := total.Sub(p.prev)
		s.Job[sample.ReadChars] = float64(d.RChar)
		s.Job[sample.WriteChars] = float64(d.WChar)
		s.Job[sample.ReadSyscalls] = float64(d.SyscR)
		s.Job[sample.WriteSyscalls] = float64(d.SyscW)
		s.Job[sample.StorageReadBytes] = float64(d.ReadBytes)
		s.Job[sample.StorageWriteBytes] = float64(d.WriteBytes)
		s.Job[sample.CancelledWrites] = float64(d.CancelledWriteBytes)
		p.prev = total
	}
	p.have = true
	if err != nil {
		return fmt.Errorf("%s: process I/O: %w", r.Spec.Name, err)
	}
	return nil
}

func (p *procSource) Close() error { return p.tracker.Close() }

// OpenFiles is how many files of the job's processes the source keeps open.
func (p *procSource) OpenFiles() int { return p.tracker.OpenFiles() }
