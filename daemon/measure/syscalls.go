package measure

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/daemon/measure/syscount"
	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/sample"
)

// System calls (file opens, closes, futex calls) counted per job with eBPF programs
// (syscount) instead of the perf syscall tracepoints, which slow every system call of
// the node. The counts keep the tracepoints' names. Where eBPF cannot count them the
// perf source counts the tracepoints, as before; turned off
// (MetricSource.syscalls=off), the tracepoints count.
// SystemCalls is what Summary.Methods calls the counts of system calls.
const SystemCalls = "system calls"

var syscallsRegistration = Registration{Name: "syscalls", Default: true, New: newSyscalls,
	Metrics: vocabulary(ioMetricNames()...)}

// ioMetric is a read or write count and its place in syscount.Values.
type ioMetric struct {
	name string
	slot int
}

// fileMetrics are the read and write counts by target (syscount.IOSlot).
var fileMetrics = func() []ioMetric {
	names := [syscount.NumTargets][4]string{
		syscount.RegularFile: {sample.FileReadCalls, sample.FileReadBytes, sample.FileWriteCalls, sample.FileWriteBytes},
		syscount.Pipe:        {sample.PipeReadCalls, sample.PipeReadBytes, sample.PipeWriteCalls, sample.PipeWriteBytes},
		syscount.Socket:      {sample.SocketReadCalls, sample.SocketReadBytes, sample.SocketWriteCalls, sample.SocketWriteBytes},
		syscount.CharDevice:  {sample.DeviceReadCalls, sample.DeviceReadBytes, sample.DeviceWriteCalls, sample.DeviceWriteBytes},
	}
	var out []ioMetric
	for t, ns := range names {
		for k, n := range ns {
			out = append(out, ioMetric{n, syscount.IOSlot(syscount.Target(t), k)})
		}
	}
	return out
}()

// ioMetricNames are fileMetrics' names.
func ioMetricNames() []string {
	var out []string
	for _, m := range fileMetrics {
		out = append(out, m.name)
	}
	return out
}

// startSyscalls loads, in the background, the eBPF programs that count the catalog's
// syscall tracepoints, for jobs whose perf cgroups lie on the cgroup v2 hierarchy mounted
// at mount (its path as the host's filesystem sees it): under software emulation that
// takes seconds, which the perf events' probe need not wait for. The function it returns
// waits for them and takes what they count out of the perf events.
func (env *Env) startSyscalls(mount string, o syscount.Options) (finish func()) {
	if !env.enabled(syscallsRegistration) {
		env.SyscallsWhy = "the syscalls source is turned off"
		return func() {}
	}
	for _, e := range perfevents.TracepointEvents() {
		if name, ok := strings.CutPrefix(e.Name, perfevents.SyscallPrefix); ok {
			o.Events = append(o.Events, syscount.Event{Name: e.Name, Syscall: name})
		}
	}
	// The sampler times calls counted as a job's: it needs to know where this process's
	// own calls are looked up.
	o.Mount = mount
	if self, err := jobcgroup.Own(env.Host); err != nil {
		env.Log.Debug().Err(err).Msg("own cgroup not known: the cost of counting a call is timed as if above the jobs'")
	} else {
		o.Self = self
	}
	type loaded struct {
		c       *syscount.Counter
		missing syscount.Missing
		err     error
		took    time.Duration
	}
	ch := make(chan loaded, 1)
	go func() {
		t0 := env.Now()
		c, missing, err := syscount.New(o)
		ch <- loaded{c, missing, err, env.Now().Sub(t0)}
	}()
	return func() {
		l := <-ch
		env.useSyscalls(mount, l.c, l.missing, l.err, l.took)
	}
}

// useSyscalls takes what c counts out of the perf events.
func (env *Env) useSyscalls(mount string, c *syscount.Counter, missing syscount.Missing, err error, took time.Duration) {
	if err != nil {
		env.SyscallsWhy = err.Error()
		env.Log.Info().Err(err).Dur("took", took).Msg("system calls counted with perf tracepoints: eBPF not available")
		return
	}
	env.Syscalls, env.SyscallsMount = c, mount
	counted := map[string]bool{}
	var names []string
	for _, e := range c.Events() {
		counted[e.Name] = true
		names = append(names, e.Syscall)
		delete(env.Unavailable, e.Name)
	}
	kept := env.Events[:0]
	for _, e := range env.Events {
		if !counted[e.Name] {
			kept = append(kept, e)
		}
	}
	env.Events = kept
	files, ferr := c.Files()
	steps := zerolog.Dict()
	for _, st := range c.Steps() {
		steps.Dur(st.Name, st.Took)
	}
	env.Log.Info().Str("mode", string(c.Mode())).Strs("calls", names).Interface("not_counted", missing).
		Bool("files_apart", files).AnErr("files_error", ferr).Dur("took", took).Dict("steps", steps).
		Msg("system calls counted with eBPF")
}

// filesWhy says why reads and writes are not told apart by target where they are not.
const filesWhy = "reads and writes are told apart by what they went to (files, pipes, sockets, terminals) only by eBPF programs"

type syscallsSource struct {
	c     *syscount.Counter
	id    uint64
	names []string
	cpus  []int
	prev  []syscount.Counts
	cur   []syscount.Counts
	have  bool
	// at and att are the time of the last read and the programs' attached time then;
	// wall and counted add up the job's time and the part of it that was counted.
	at            time.Time
	att           syscount.Attached
	wall, counted time.Duration
	// split is the job's CPU time by how its calls were counted, at the last read, where
	// the counter splits it (hasSplit): the calls not counted are then estimated by the
	// job's CPU time, not the wall clock's (syscount.CPUSplit).
	split    syscount.CPUSplit
	hasSplit bool
	// rates are the calls per CPU-second of the job, in the order of allNames, in the
	// last interval with sampled windows (the time between them estimated from them, as
	// is that of an interval without a window).
	rates []float64
	// why, when set, says why the job's calls are not counted; filesWhy why its calls
	// on files are not counted apart.
	why, filesWhy string
}

func newSyscalls(env *Env, spec *Spec) (Source, error) {
	if env.Syscalls == nil {
		// The perf tracepoints count, or nothing does.
		return &syscallsSource{filesWhy: "not measured: " + filesWhy + " (eBPF: " + env.SyscallsWhy + ")"}, nil
	}
	s := &syscallsSource{c: env.Syscalls, cpus: spec.CPUs}
	if ok, err := s.c.Files(); !ok {
		s.filesWhy = "not measured: " + filesWhy
		if err != nil {
			s.filesWhy = "not measured: " + filesWhy + ", and here: " + err.Error()
		}
	}
	for _, e := range env.Syscalls.Events() {
		s.names = append(s.names, e.Name)
	}
	if err := s.watch(env, spec); err != nil {
		s.why = "not measured: " + err.Error()
		s.filesWhy = s.why
		env.Log.Warn().Err(err).Str("job", spec.Name).Msg("system calls not counted")
		s.c = nil
	}
	return s, nil
}

func (s *syscallsSource) watch(env *Env, spec *Spec) error {
	if spec.PerfCgroup == "" {
		why := spec.PerfWhy
		if why == "" {
			why = "no cgroup to count system calls in"
		}
		return fmt.Errorf("%s", why)
	}
	level, err := syscount.Level(env.SyscallsMount, spec.PerfCgroup)
	if err != nil {
		return err
	}
	if s.id, err = syscount.CgroupID(spec.PerfCgroup); err != nil {
		return err
	}
	if err := s.c.Watch(s.id, level); err != nil {
		return err
	}
	if err := s.c.Usage(s.id, spec.PerfCgroup); err != nil {
		env.Log.Debug().Err(err).Str("job", spec.Name).Msg("calls not counted estimated by the wall clock")
	}
	return nil
}

func (s *syscallsSource) CPUMetrics() ([]string, bool) { return s.names, s.c != nil }

func (s *syscallsSource) Read(r *Read) error {
	if s.why != "" {
		for _, n := range s.names {
			r.NotMeasured(n, s.why)
		}
	}
	if s.filesWhy != "" {
		for _, m := range fileMetrics {
			r.NotMeasured(m.name, s.filesWhy)
		}
	}
	if s.c == nil {
		return nil
	}
	now, att := s.c.AttachedTime()
	split, hasSplit := s.c.CPUTime(s.id)
	cur, err := s.c.Read(s.id, s.cur)
	if err != nil {
		for _, n := range s.names {
			r.NotMeasured(n, "not measured: "+err.Error())
		}
		return fmt.Errorf("%s: %w", r.Spec.Name, err)
	}
	s.interval(r, reading{now: now, att: att, split: split, hasSplit: hasSplit, counts: cur}, s.c.Cost())
	return nil
}

// reading is what one read takes from the counter: at now, the time the programs had
// counted in all, the job's CPU time split by how its calls were counted (if hasSplit),
// and its counts.
type reading struct {
	now      time.Time
	att      syscount.Attached
	split    syscount.CPUSplit
	hasSplit bool
	counts   []syscount.Counts
}

// interval puts the job's calls since the last read into r's sample, from reading rd,
// where a call cost cost more counted.
func (s *syscallsSource) interval(r *Read, rd reading, cost time.Duration) {
	now, att, cur := rd.now, rd.att, rd.counts
	if !s.have {
		s.prev, s.cur, s.have, s.at, s.att = cur, make([]syscount.Counts, len(cur)), true, now, att
		s.split, s.hasSplit = rd.split, rd.hasSplit
		return
	}
	wall, d := now.Sub(s.at), att.Sub(s.att)
	s.at, s.att = now, att
	var split *syscount.CPUSplit
	if rd.hasSplit && s.hasSplit {
		dc := rd.split.Sub(s.split)
		split = &dc
	}
	s.split, s.hasSplit = rd.split, rd.hasSplit
	s.wall, s.counted = s.wall+wall, s.counted+min(d.Total(), wall)
	smp := r.Sample
	if smp.CPU == nil {
		smp.CPU = make([]sample.CPUValues, len(s.cpus))
		for i, cpu := range s.cpus {
			smp.CPU[i] = sample.CPUValues{CPU: cpu, Values: make(map[string]float64, len(s.names))}
		}
	}
	u, ok := s.unseen(smp, cur, wall, d, split, cost)
	if !ok {
		for _, n := range s.allNames() {
			r.NotMeasured(n, "not measured in this interval: system calls were counted in samples (SyscallBudget), none in it")
		}
		s.prev, s.cur = cur, s.prev
		return
	}
	// Only the job's CPUs count, as for the perf events: its tasks run there once Slurm
	// has bound them; what slurmstepd's child did in the job's cgroup on other CPUs
	// before that is Slurm's set-up, not the job's.
	for k, name := range s.names {
		smp.Job[name] = s.onJobCPUs(smp, cur, k, name, u)
		if u.share > 1-perfcg.DefaultLowCoverage {
			smp.LowCoverage = append(smp.LowCoverage, name+"@sampled")
		}
	}
	if s.filesWhy == "" {
		for j, m := range fileMetrics {
			smp.Job[m.name] = s.onJobCPUs(smp, cur, len(s.names)+j, "", u)
		}
	}
	s.prev, s.cur = cur, s.prev
}

// allNames are the metrics the source counts: the events', then the file I/O's.
func (s *syscallsSource) allNames() []string {
	names := slices.Clone(s.names)
	if s.filesWhy == "" {
		for _, m := range fileMetrics {
			names = append(names, m.name)
		}
	}
	return names
}

// unseenBy is how the calls of the part of an interval the programs were not attached
// for (share of it) are estimated: the calls counted in its sampled windows times
// perSampled (syscount.Unseen), else rates (calls per CPU-second of the job, by
// allNames) times the job's CPU time in that part (its task-clock, pro rata).
type unseenBy struct {
	share      float64
	perSampled float64
	rates      []float64
}

// unseen says how to estimate the calls the programs were not attached for in an
// interval of wall, which they counted d of; false when it cannot be (nothing counted in
// it, no rates from before). With sampled windows in the interval, the calls per
// CPU-second of the job they come to are kept for an interval without one (one shorter
// than the sampler's period, at the job's start or end). Calls counted whole (a burst at
// the job's start, before the sampler turned to windows) are never scaled: only the
// windows are a sample. Where the job's CPU time is split by how its calls were counted
// (split), the calls not counted are estimated by it (unseenByCPU).
func (s *syscallsSource) unseen(smp *sample.Sample, cur []syscount.Counts, wall time.Duration, d syscount.Attached, split *syscount.CPUSplit, cost time.Duration) (unseenBy, bool) {
	var busy float64 // the job's CPU seconds in the interval
	for _, cv := range smp.CPU {
		if cv.CPU >= 0 && cv.CPU < len(cur) {
			busy += cv.Values["task-clock"] / 1e9
		}
	}
	names := s.allNames()
	sampled := make([]float64, len(names))
	var calls float64 // in the windows, of every kind counted
	for k := range names {
		slot := s.slot(k)
		sampled[k] = s.sampledOnJobCPUs(smp, cur, slot)
		if !syscount.IsBytes(slot) {
			calls += sampled[k]
		}
	}
	busyIn := busy * d.Sampled.Seconds() / wall.Seconds()
	share, perSampled, ok := syscount.Unseen(wall, d, calls, busyIn, cost)
	u := unseenBy{share: share, perSampled: perSampled}
	switch {
	case share == 0:
		return u, true
	case split != nil:
		return s.unseenByCPU(sampled, calls, busy, d, *split, cost)
	case ok:
		s.rates = s.rates[:0]
		if busy > 0 {
			for k := range names {
				// The calls the windows' stand for, over the job's CPU time then.
				s.rates = append(s.rates, sampled[k]*perSampled/(busy*share))
			}
		}
		return u, true
	case len(s.rates) == len(names) && busy > 0:
		u.rates = s.rates
		return u, true
	}
	// No windows to estimate the rest from: the calls counted are what is known, a
	// lower bound, flagged as low coverage; with nothing counted, nothing is known.
	return u, d.Total() >= syscount.MinSampled
}

// unseenByCPU estimates the calls of the job's CPU time that was not counted (split.Off)
// from its windows' calls per CPU-second (syscount.UnseenCPU), else from the last
// windows' rate; where the job spent (almost) no CPU time uncounted there is nothing to
// estimate. sampled are the windows' counts by allNames, calls those of every kind, busy
// the job's CPU seconds; the share not counted is the CPU time's.
func (s *syscallsSource) unseenByCPU(sampled []float64, calls, busy float64, d syscount.Attached, split syscount.CPUSplit, cost time.Duration) (unseenBy, bool) {
	if split.Off <= syscount.NoneOff {
		return unseenBy{}, true
	}
	u := unseenBy{share: 1}
	if busy > 0 {
		u.share = min(split.Off.Seconds()/busy, 1)
	}
	if per, ok := syscount.UnseenCPU(split, calls, cost); ok {
		u.perSampled = per
		s.rates = s.rates[:0]
		for k := range sampled {
			s.rates = append(s.rates, sampled[k]*per/split.Off.Seconds())
		}
		return u, true
	}
	if len(s.rates) == len(sampled) && busy > 0 {
		u.rates = s.rates
		return u, true
	}
	return u, d.Total() >= syscount.MinSampled
}

// slot is the place in syscount.Values of allNames' k-th.
func (s *syscallsSource) slot(k int) int {
	if k < len(s.names) {
		return k
	}
	return fileMetrics[k-len(s.names)].slot
}

// sampledOnJobCPUs sums slot's increase in the sampled windows since the last read over
// the job's CPUs.
func (s *syscallsSource) sampledOnJobCPUs(smp *sample.Sample, cur []syscount.Counts, slot int) float64 {
	var sum float64
	for i := range smp.CPU {
		if cpu := smp.CPU[i].CPU; cpu >= 0 && cpu < len(cur) {
			sum += float64(sub(cur[cpu].Sampled[slot], s.prev[cpu].Sampled[slot]))
		}
	}
	return sum
}

// onJobCPUs sums allNames' k-th since the last read over the job's CPUs: the calls counted
// and those estimated for the time not counted (u); with a name, each CPU's value is kept
// in the sample too.
func (s *syscallsSource) onJobCPUs(smp *sample.Sample, cur []syscount.Counts, k int, name string, u unseenBy) float64 {
	slot := s.slot(k)
	var sum float64
	for i := range smp.CPU {
		cpu := smp.CPU[i].CPU
		if cpu < 0 || cpu >= len(cur) {
			continue
		}
		whole := float64(sub(cur[cpu].Whole[slot], s.prev[cpu].Whole[slot]))
		sampled := float64(sub(cur[cpu].Sampled[slot], s.prev[cpu].Sampled[slot]))
		v := whole + sampled*(1+u.perSampled)
		if u.rates != nil {
			v += u.rates[k] * smp.CPU[i].Values["task-clock"] / 1e9 * u.share
		}
		if name != "" {
			smp.CPU[i].Values[name] = v
		}
		sum += v
	}
	return sum
}

// Method says how the job's system calls were counted, for the summary.
func (s *syscallsSource) Method() (string, string) {
	switch {
	case s.c == nil:
		return "", ""
	case s.counted >= s.wall*999/1000:
		return SystemCalls, "eBPF (" + string(s.c.Mode()) + "), every call"
	}
	budget, outside := s.c.Bounds()
	return SystemCalls, fmt.Sprintf("eBPF (%s), counted during %.0f %% of the time and scaled (counting every call would have cost the node's programs more than %.2g %% of a CPU, or those outside the jobs more than %.2g %%)",
		s.c.Mode(), 100*s.counted.Seconds()/max(s.wall.Seconds(), 1e-9), 100*budget, 100*outside)
}

func (s *syscallsSource) Close() error {
	if s.c == nil {
		return nil
	}
	c := s.c
	s.c = nil
	return c.Unwatch(s.id)
}
