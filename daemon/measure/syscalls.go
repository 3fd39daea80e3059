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
	Metrics: vocabulary(sample.FileReadCalls, sample.FileReadBytes, sample.FileWriteCalls, sample.FileWriteBytes)}

// fileMetrics are the file I/O counts by their place in syscount.Values.
var fileMetrics = []struct {
	name string
	slot int
}{
	{sample.FileReadCalls, syscount.FileReadCalls}, {sample.FileReadBytes, syscount.FileReadBytes},
	{sample.FileWriteCalls, syscount.FileWriteCalls}, {sample.FileWriteBytes, syscount.FileWriteBytes},
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

// filesWhy says why file I/O is not told apart from pipes' and sockets' where it is not.
const filesWhy = "calls on files are told apart from pipes, sockets and terminals only by eBPF programs"

type syscallsSource struct {
	c     *syscount.Counter
	id    uint64
	names []string
	cpus  []int
	prev  []syscount.Values
	cur   []syscount.Values
	have  bool
	// at and att are the time of the last read and the programs' attached time then;
	// wall and counted add up the job's time and the part of it that was counted.
	at            time.Time
	att           time.Duration
	wall, counted time.Duration
	// rates are the last sampled interval's counts per CPU-second of the job, in the
	// order of allNames (an interval without a sample is estimated from them).
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
	return s.c.Watch(s.id, level)
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
	cur, err := s.c.Read(s.id, s.cur)
	if err != nil {
		for _, n := range s.names {
			r.NotMeasured(n, "not measured: "+err.Error())
		}
		return fmt.Errorf("%s: %w", r.Spec.Name, err)
	}
	if !s.have {
		s.prev, s.cur, s.have, s.at, s.att = cur, make([]syscount.Values, len(cur)), true, now, att
		return nil
	}
	wall, counted := now.Sub(s.at), att-s.att
	s.at, s.att = now, att
	s.wall, s.counted = s.wall+wall, s.counted+counted
	if counted < minCounted && counted < wall*999/1000 {
		// Sampled, and not attached in this interval (one shorter than the sampler's
		// period, at the job's start or end), or for a sliver too short to scale from:
		// the rates per CPU-second of the last sampled interval, over this one's CPU time.
		s.extrapolate(r)
		s.prev, s.cur = cur, s.prev
		return nil
	}
	// Counted for part of the interval: scaled to all of it (1 when counted throughout).
	sampled := counted < wall*999/1000
	smp := r.Sample
	if smp.CPU == nil {
		smp.CPU = make([]sample.CPUValues, len(s.cpus))
		for i, cpu := range s.cpus {
			smp.CPU[i] = sample.CPUValues{CPU: cpu, Values: make(map[string]float64, len(s.names))}
		}
	}
	scale := 1.0
	if sampled {
		scale = s.scaleFor(smp, cur, wall, counted)
	}
	// Only the job's CPUs count, as for the perf events: its tasks run there once Slurm
	// has bound them; what slurmstepd's child did in the job's cgroup on other CPUs
	// before that is Slurm's set-up, not the job's.
	for k, name := range s.names {
		smp.Job[name] = s.onJobCPUs(smp, cur, k, scale, name)
		if sampled && float64(wall)/float64(counted) > 1/perfcg.DefaultLowCoverage {
			smp.LowCoverage = append(smp.LowCoverage, name+"@sampled")
		}
	}
	if s.filesWhy == "" {
		for _, m := range fileMetrics {
			smp.Job[m.name] = s.onJobCPUs(smp, cur, m.slot, scale, "")
		}
	}
	s.rates = s.rates[:0]
	if busy := smp.Job["task-clock"] / 1e9; sampled && busy > 0 {
		for _, name := range s.allNames() {
			s.rates = append(s.rates, smp.Job[name]/busy)
		}
	}
	s.prev, s.cur = cur, s.prev
	return nil
}

// minCounted is the least counted time of a sampled interval its counts are scaled from.
const minCounted = 5 * time.Millisecond

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

// extrapolate gives an interval without a sample the last sampled interval's rates per
// CPU-second of the job (its task-clock), or says why it has none.
func (s *syscallsSource) extrapolate(r *Read) {
	busy := r.Sample.Job["task-clock"] / 1e9
	names := s.allNames()
	if len(s.rates) != len(names) || busy <= 0 {
		for _, n := range names {
			r.NotMeasured(n, "not measured in this interval: system calls were counted in samples (SyscallBudget), none in it")
		}
		return
	}
	for i, n := range names {
		r.Sample.Job[n] = s.rates[i] * busy
	}
}

// scaleFor is what the calls counted in the interval are multiplied by: 1 when counted
// throughout, else the whole interval over the time counted, with the calls between the
// samples faster than those counted by their extra cost: where the job's threads ran
// busy seconds while counted (its task-clock over the interval, pro rata), calls costing
// cost more each (Counter.Cost) took calls × cost of them. The job's calls and time are
// taken together, not CPU by CPU: a thread moves between CPUs faster than the samples
// come.
func (s *syscallsSource) scaleFor(smp *sample.Sample, cur []syscount.Values, wall, counted time.Duration) float64 {
	att, rest := counted.Seconds(), (wall - counted).Seconds()
	var busy, calls float64
	for _, cv := range smp.CPU {
		if cv.CPU >= 0 && cv.CPU < len(cur) {
			busy += cv.Values["task-clock"] / 1e9 * att / wall.Seconds()
		}
	}
	for k := range s.names {
		calls += s.onJobCPUs(smp, cur, k, 1, "")
	}
	if s.filesWhy == "" {
		calls += s.onJobCPUs(smp, cur, syscount.FileReadCalls, 1, "") + s.onJobCPUs(smp, cur, syscount.FileWriteCalls, 1, "")
	}
	speedup := 1.0
	if busy > 0 {
		speedup = 1 / (1 - min(calls*s.c.Cost().Seconds()/busy, 0.5))
	}
	return (att + rest*speedup) / att
}

// Method says how the job's system calls were counted, for the summary.
func (s *syscallsSource) Method() (string, string) {
	switch {
	case s.c == nil:
		return "", ""
	case s.counted >= s.wall*999/1000:
		return SystemCalls, "eBPF (" + string(s.c.Mode()) + "), every call"
	}
	return SystemCalls, fmt.Sprintf("eBPF (%s), counted during %.0f %% of the time and scaled (counting every call would have slowed the job by more than %.2g %%)",
		s.c.Mode(), 100*s.counted.Seconds()/max(s.wall.Seconds(), 1e-9), 100*s.c.Budget())
}

func (s *syscallsSource) Close() error {
	if s.c == nil {
		return nil
	}
	c := s.c
	s.c = nil
	return c.Unwatch(s.id)
}

// onJobCPUs sums slot's increase since the last read over the job's CPUs, scaled; with
// a name, each CPU's value is kept in the sample too.
func (s *syscallsSource) onJobCPUs(smp *sample.Sample, cur []syscount.Values, slot int, scale float64, name string) float64 {
	var sum float64
	for i := range smp.CPU {
		if cpu := smp.CPU[i].CPU; cpu >= 0 && cpu < len(cur) {
			v := float64(sub(cur[cpu][slot], s.prev[cpu][slot])) * scale
			if name != "" {
				smp.CPU[i].Values[name] = v
			}
			sum += v
		}
	}
	return sum
}
