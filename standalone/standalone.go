// Package standalone is `persyst run -- CMD`: it measures one command the way the daemon
// measures a Slurm job, without Slurm.
//
// As root it creates a transient cgroup per hierarchy (the cgroup v2 hierarchy when it is
// writable, and the v1 hierarchies of cpu, cpuacct, memory, blkio, pids and perf_event
// when mounted: on hybrid hosts like our CI machine memory and I/O live only in v1),
// starts CMD inside them, counts perf events in cgroup mode per CPU, reads the cgroup
// statistics and the process I/O at every cycle boundary and once more when CMD exits
// (while it is still a zombie, so its final /proc/PID/io is seen), then removes the
// cgroups.
//
// Without privileges it says what it cannot do and measures what it can: perf events of
// CMD's process tree in inherit mode (user space only), the I/O of CMD's processes from
// /proc, and CPU time, peak memory and page faults from wait4's rusage at the end.
//
// CMD is started through a re-executed copy of persyst (Child) that stops itself once
// its own start is done; persyst then moves it into the cgroups, opens the counters,
// reads the baseline and lets it go on to exec CMD: every instruction of CMD runs inside
// them, and none of the child's own work (its runtime reading /proc and cgroup files) is
// counted as CMD's. CMD gets persyst's stdin, stdout and stderr and its
// environment. SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded; SIGINT and SIGQUIT are
// ignored by persyst while CMD runs (as time(1) does): from a terminal CMD, in the same
// process group, receives them itself. persyst exits with CMD's status, or 128+N when a
// signal N killed it.
package standalone

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/measure/procio"
	"github.com/persyst/persyst/daemon/pipeline"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/nvml"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// ChildCommand is the hidden persyst subcommand that joins the cgroups and execs CMD.
const ChildCommand = "__run-child"

// ErrNoCommand is Run's error without a command.
var ErrNoCommand = errors.New("no command given: persyst run [--interval D] [--json] -- CMD ARGS...")

// Options configure Run.
type Options struct {
	Interval time.Duration // cycle; reads at multiples of it (default 60 s)
	JSON     bool          // print the result as JSON instead of text
	Root     string        // filesystem root ("/")
	Self     string        // the persyst executable to re-exec ("/proc/self/exe")
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer // CMD's stderr, and where the summary goes unless Result is set
	// Result, if set, gets the summary (the JSON or the text digest) instead of Stderr,
	// so that it never mixes with what CMD writes there.
	Result io.Writer
	Log    zerolog.Logger
	Now    func() time.Time
	// Unprivileged forces the non-root path (tests).
	Unprivileged bool
	// Engine evaluates the properties for the digest.
	Engine *properties.Engine
	// Node names this machine in the digest.
	Node string
	// Sources turn metric sources on or off by name (persyst.conf's MetricSource.<name>).
	Sources map[string]bool
	// SyscallBudget: persyst.conf's, as the daemon's (measure.EnvOptions).
	SyscallBudget float64
}

// Result is what `persyst run --json` prints.
type Result struct {
	Command    []string        `json:"command"`
	ExitStatus int             `json:"exit_status"`      // persyst's own exit code
	Signal     string          `json:"signal,omitempty"` // the signal that killed CMD
	Mode       string          `json:"mode"`             // "cgroup" or "unprivileged"
	Limits     []string        `json:"limits,omitempty"` // what could not be measured in this mode
	Cgroups    []string        `json:"cgroups,omitempty"`
	Summary    sample.Summary  `json:"summary"`
	Samples    []sample.Sample `json:"samples"`
	// Digest is the job digest (docs/digest.md).
	Digest *digest.Report `json:"digest,omitempty"`
}

// Run runs argv measured and returns the exit code persyst should exit with.
func Run(ctx context.Context, opts Options, argv []string) (int, error) {
	opts, path, code, err := prepare(opts, argv)
	if err != nil {
		return code, err
	}
	r := &runner{opts: opts, argv: argv, host: hostfs.New(opts.Root)}
	defer r.cleanup()
	// The signals to pass on to CMD are taken from now: one that comes while persyst sets
	// up (Slurm cancelling the job) reaches CMD once it runs, not nothing.
	fwd := make(chan os.Signal, 4)
	signal.Notify(fwd, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(fwd)
	cpus, err := r.cpus()
	if err != nil {
		return 1, err
	}
	env, spec := r.setup(cpus)
	defer env.Close()
	cmd, err := r.start(path)
	if err != nil {
		return 126, err
	}
	defer signal.Reset(syscall.SIGINT, syscall.SIGQUIT)
	if ctx.Err() != nil {
		// A signal stopped persyst before fwd was set (ctx: the command line's), or
		// while it set up: CMD stops as well.
		select {
		case fwd <- syscall.SIGTERM:
		default:
		}
	}
	job := r.measure(ctx, cmd, env, spec, fwd)
	res, err := r.result(cmd, job, len(cpus))
	if err != nil {
		return 1, err
	}
	return res.ExitStatus, r.print(res)
}

// prepare fills in opts' defaults and finds the command; code is the exit code of an
// error (as shells say it: 126 for a file that is there but cannot be run, 127 for none).
func prepare(opts Options, argv []string) (_ Options, path string, code int, err error) {
	if len(argv) == 0 {
		return opts, "", 2, ErrNoCommand
	}
	if opts.Engine == nil {
		return opts, "", 2, errors.New("persyst run: no property engine for the digest")
	}
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.Self == "" {
		opts.Self = "/proc/self/exe"
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	path, err = exec.LookPath(argv[0])
	if err != nil {
		code = 127
		if errors.Is(err, fs.ErrPermission) {
			code = 126
		}
		return opts, "", code, fmt.Errorf("%s: %w", argv[0], err)
	}
	return opts, path, 0, nil
}

// setup makes the command's cgroups where it may (privileged: cgroup mode) and returns
// the measuring environment and the spec of the command's meter on cpus.
func (r *runner) setup(cpus []int) (*measure.Env, measure.Spec) {
	spec := measure.Spec{Name: "command " + filepath.Base(r.argv[0]), CPUs: cpus, Topology: r.host.Topology(cpus)}
	envOpts := measure.EnvOptions{Host: r.host, Log: r.opts.Log, Now: r.opts.Now, Enable: r.opts.Sources, SyscallBudget: r.opts.SyscallBudget,
		GPU: &nvml.Options{}}
	spec.GPUs, spec.AllGPUs = visibleGPUs()
	r.privileged = !r.opts.Unprivileged && r.makeCgroups()
	if r.privileged {
		r.mode = "cgroup"
		spec.StatCgroups = r.stat
		spec.ProcCgroup = r.procDir
		if r.perfDir != "" {
			spec.PerfCgroup = r.host.Path(r.perfDir)
			if r.perfMount != "" {
				envOpts.SyscallMount = r.host.Path(r.perfMount)
			}
		} else {
			envOpts.PerfWhy = "no cgroup v2 or perf_event v1 hierarchy to count in"
		}
	} else {
		r.mode = "unprivileged"
		r.limits = append(r.limits,
			fmt.Sprintf("running as uid %d without the right to create cgroups (%s): cgroup statistics (throttling, OOM events, block I/O, pressure) are not measured", os.Getuid(), r.cgErr),
			"perf events count user space only, per CPU, for the command's processes (inherit mode); CPU time, peak memory and page faults come from wait4's rusage at the end")
	}
	// No probe: opening the events tells which exist (EnvOptions).
	return measure.NewEnv(envOpts), spec
}

// visibleGPUs are the GPUs the command may use: those CUDA_VISIBLE_DEVICES names (set
// and empty: none), else the AMD GPUs ROCR_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES name
// (indices among the AMD GPUs, "amd:N"; UUIDs as they are), else every GPU of the
// machine.
func visibleGPUs() (ids []string, all bool) {
	return visibleGPUsOf(os.LookupEnv)
}

func visibleGPUsOf(lookup func(string) (string, bool)) (ids []string, all bool) {
	for _, name := range []string{"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"} {
		v, set := lookup(name)
		if !set {
			continue
		}
		for _, id := range strings.Split(v, ",") {
			id = strings.TrimSpace(id)
			if _, err := strconv.Atoi(id); err == nil && name != "CUDA_VISIBLE_DEVICES" {
				id = "amd:" + id
			}
			if id != "" {
				ids = append(ids, id)
			}
		}
		return ids, false
	}
	return nil, true
}

// start starts the command through a re-executed persyst that stops itself once its own
// start is done (Child), and moves it into the command's cgroups. From then on persyst
// ignores SIGINT and SIGQUIT (the terminal sends them to CMD); the caller resets them.
func (r *runner) start(path string) (*exec.Cmd, error) {
	// Without privileges, /proc/PID/io of the exited child is root's (the kernel makes an
	// exited process's /proc files root-owned): its last writes are found instead in our
	// own counters, to which the kernel adds a reaped child's totals.
	r.selfBefore, r.selfErr = procio.ReadSelf(r.host)
	cmd := exec.Command(r.opts.Self, append([]string{ChildCommand, "--", path}, r.argv[1:]...)...)
	cmd.Args[0] = r.argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.opts.Stdin, r.opts.Stdout, r.opts.Stderr
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", r.argv[0], err)
	}
	// Only after the start, so that CMD does not inherit the ignored dispositions (caught
	// ones, as the forwarded, are reset by exec).
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	pid := cmd.Process.Pid
	r.child = pid
	// Wait until the child stopped itself (or died): its own start is then done, and
	// nothing of it is counted as CMD's. Move it into the cgroups from here.
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	for _, f := range r.procsFiles {
		if err := writeNoFollow(f, strconv.Itoa(pid)); err != nil {
			fmt.Fprintf(r.opts.Stderr, "persyst: could not move %s into %s: %v (measured without it)\n", r.argv[0], filepath.Dir(f), err)
		}
	}
	return cmd, nil
}

// measure opens the command's meter, lets it go on to exec CMD, and reads it at every
// cycle boundary until CMD exits (forwarding the signals fwd brings), then once more; nil
// when it could not be measured.
func (r *runner) measure(ctx context.Context, cmd *exec.Cmd, env *measure.Env, spec measure.Spec, fwd <-chan os.Signal) *pipeline.Job {
	pid := r.child
	if !r.privileged {
		spec.PerfPID = pid
	}
	spec.ExtraPIDs = func() []int { return r.extraPIDs(r.privileged) }
	// The stopped child, born before now, counts from the first read; what CMD starts
	// counts from its birth.
	spec.ProcsSince = r.opts.Now()
	job, err := pipeline.Start(env, spec, pipeline.Options{Engine: r.opts.Engine})
	// Let CMD go whether or not measuring could start.
	_ = unix.Kill(pid, unix.SIGCONT)
	if err != nil {
		fmt.Fprintf(r.opts.Stderr, "persyst: %s is not measured: %v\n", r.argv[0], err)
		job = nil
	}
	exited := make(chan unix.Siginfo, 1)
	go func() {
		var info unix.Siginfo
		for {
			// WNOWAIT: CMD stays a zombie, so the final read still sees its /proc/PID/io.
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err == unix.EINTR {
				continue
			}
			exited <- info
			return
		}
	}()
	// Reads go on until CMD exits, whatever happens to persyst's own context.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var wg sync.WaitGroup
	if job != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = pipeline.Loop(cctx, r.opts.Now, r.opts.Interval, pipeline.RealWait, func() {
				if _, err := job.Read(sample.Cycle); err != nil {
					r.opts.Log.Debug().Err(err).Msg("cycle read incomplete")
				}
			})
		}()
	}
wait:
	for {
		select {
		case s := <-fwd:
			_ = cmd.Process.Signal(s)
		case <-exited:
			break wait
		}
	}
	cancel()
	wg.Wait()
	if job != nil {
		if _, err := job.End(); err != nil {
			r.opts.Log.Debug().Err(err).Msg("final read incomplete")
		}
	}
	return job
}

// result reaps the command and makes the result: its exit status, what was measured of
// it (on ncpus CPUs), and its digest.
func (r *runner) result(cmd *exec.Cmd, job *pipeline.Job, ncpus int) (Result, error) {
	werr := cmd.Wait()
	res := Result{Command: r.argv, Mode: r.mode, Limits: r.limits, Cgroups: r.dirs}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.ExitStatus = 128 + int(ws.Signal())
		res.Signal = unix.SignalName(ws.Signal())
	case ws.Exited():
		res.ExitStatus = ws.ExitStatus()
	default:
		var ee *exec.ExitError
		if werr != nil && !errors.As(werr, &ee) {
			return res, fmt.Errorf("wait %s: %w", r.argv[0], werr)
		}
	}
	if job == nil {
		return res, nil
	}
	if !r.privileged {
		ru := rusage(cmd.ProcessState)
		var reaped procio.IO
		if after, err := procio.ReadSelf(r.host); err == nil && r.selfErr == nil {
			reaped = after.Sub(r.selfBefore)
		}
		job.Amend(func(s *sample.Summary) {
			addRusage(s, ru)
			addReaped(s, reaped)
		})
	}
	res.Summary = job.Summary()
	res.Samples = job.Meter().Samples()
	results := job.Results(0)
	ph, in := job.Phases(0)
	rep := digest.Assemble(digest.Input{Facts: digest.Facts{Command: strings.Join(trim(r.argv), " "), Nodes: []string{r.opts.Node}, CPUs: ncpus},
		Measured: res.Summary, Results: results, MinSeconds: r.opts.Engine.MinSeconds(), Ending: ending(res.Summary, ws),
		Phases: ph, Interference: in, PhasesNode: r.opts.Node})
	res.Digest = &rep
	return res, nil
}

// ending is how the command ended, where that leads its digest: an OOM kill leads it,
// as it leads a Slurm job's (nil: no kill; the exit status is the command's own).
func ending(s sample.Summary, ws syscall.WaitStatus) *digest.Ending {
	kills := int(s.Totals[sample.OOMKills])
	if kills <= 0 {
		return nil
	}
	status := int(ws)
	return &digest.Ending{Exit: &status, OOMKills: kills, MemPeak: s.Totals[sample.MemPeakBytes]}
}

// print writes the result: as JSON, or the text digest and what could not be measured.
func (r *runner) print(res Result) error {
	out := r.opts.Stderr
	if r.opts.Result != nil {
		out = r.opts.Result
	}
	if r.opts.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if res.Digest != nil {
		fmt.Fprint(out, digest.Text(*res.Digest, digest.TextOptions{}))
		for _, l := range r.limits {
			fmt.Fprintln(out, "persyst: note: "+l)
		}
	}
	return nil
}

// runner holds what Run created.
type runner struct {
	opts  Options
	argv  []string
	host  hostfs.FS
	mode  string
	child int
	// privileged: the command runs in cgroups of its own (cgroup mode).
	privileged bool
	// selfBefore is persyst's own I/O before the command started (selfErr: not read).
	selfBefore procio.IO
	selfErr    error

	stat       map[string]string // hierarchy key → cgroup dir
	dirs       []string          // created, as seen in the mount namespace
	mountOf    map[string]string // created dir → its mount point
	procsFiles []string          // cgroup.procs to join (full paths)
	perfDir    string
	perfMount  string // the cgroup v2 mount perfDir lies on ("": a v1 hierarchy)
	procDir    string
	cgErr      string
	limits     []string

	mu       sync.Mutex
	children map[int]bool
}

// v1 controllers worth a transient cgroup.
var v1Wanted = map[string]bool{"cpu": true, "cpuacct": true, "memory": true, "blkio": true, "pids": true, "perf_event": true}

// makeCgroups creates persyst_run/run-<pid> in each useful hierarchy. It reports false,
// with cgErr set, if none could be created (no privileges).
func (r *runner) makeCgroups() bool {
	mounts, err := jobcgroup.Mounts(r.host)
	if err != nil {
		r.cgErr = err.Error()
		return false
	}
	name := filepath.Join("persyst_run", "run-"+strconv.Itoa(os.Getpid()))
	r.stat = map[string]string{}
	r.mountOf = map[string]string{}
	for _, m := range mounts {
		want := m.IsV2
		for _, c := range m.Ctrls {
			want = want || v1Wanted[c]
		}
		if !want {
			continue
		}
		dir := filepath.Join(m.Path, name)
		if err := jobcgroup.Create(r.host, dir); err != nil {
			if r.cgErr == "" {
				r.cgErr = err.Error()
			}
			continue
		}
		r.dirs = append(r.dirs, dir)
		r.mountOf[dir] = m.Path
		r.stat[m.Key] = dir
		r.procsFiles = append(r.procsFiles, r.host.Path(dir, "cgroup.procs"))
	}
	if len(r.dirs) == 0 {
		if r.cgErr == "" {
			r.cgErr = "no cgroup hierarchy mounted"
		}
		return false
	}
	if m, ok := jobcgroup.PerfHierarchy(mounts); ok {
		if d, ok := r.stat[m.Key]; ok {
			r.perfDir = d
			if m.IsV2 {
				r.perfMount = m.Path
			}
		}
	}
	r.procDir = r.perfDir
	if r.procDir == "" {
		r.procDir = r.dirs[0]
	}
	return true
}

// extraPIDs returns CMD itself (it leaves the cgroups when it exits but stays readable as
// a zombie) and, without cgroups, its descendants found through /proc.
func (r *runner) extraPIDs(privileged bool) []int {
	if privileged {
		return []int{r.child}
	}
	return procio.Descendants(r.host, r.child)
}

// cleanup removes the transient cgroups.
func (r *runner) cleanup() {
	for i := len(r.dirs) - 1; i >= 0; i-- {
		d := r.dirs[i]
		if err := jobcgroup.Remove(r.host, r.mountOf[d], d, 2*time.Second); err != nil {
			r.opts.Log.Warn().Err(err).Msg("transient cgroup not removed")
		}
	}
}

// cpus returns the CPUs this process may run on.
func (r *runner) cpus() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		var out []int
		for c := 0; c < len(set)*64; c++ {
			if set.IsSet(c) {
				out = append(out, c)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return r.host.OnlineCPUs()
}

// Child is the hidden subcommand run in the re-executed persyst: stop itself, so that the
// parent moves it into the cgroups and opens the counters after the child's own start,
// then (on SIGCONT) exec CMD. It only returns on failure, with the exit code (127: not
// found, 126: cannot execute).
func Child(args []string) int {
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(os.Stderr, "persyst: "+ChildCommand+" is internal to persyst run")
		return 2
	}
	argv := args[1:]
	// SIGSTOP is delivered before kill(2) returns: the child goes on only when continued.
	_ = unix.Kill(unix.Getpid(), unix.SIGSTOP)
	err := unix.Exec(argv[0], append([]string{filepath.Base(argv[0])}, argv[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "persyst: exec %s: %v\n", argv[0], err)
	if errors.Is(err, unix.ENOENT) {
		return 127
	}
	return 126
}

func writeNoFollow(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return err
}

// addReaped raises the write totals to what the command's process tree wrote according
// to our own counters (the reaped child's totals). Read totals cannot be corrected that way (persyst itself reads /proc).
func addReaped(s *sample.Summary, d procio.IO) {
	if d.WChar > 0 && d.SyscW > 0 {
		w, n := float64(d.WChar), float64(d.SyscW)
		if w > s.Totals[sample.WriteChars] {
			s.Totals[sample.WriteChars], s.Totals[sample.WriteSyscalls] = w, n
		}
	}
}

// rusage returns wait4's resource usage of the command (nil if there is none).
func rusage(ps *os.ProcessState) *syscall.Rusage {
	ru, _ := ps.SysUsage().(*syscall.Rusage)
	return ru
}

// addRusage fills, from wait4's rusage, what the unprivileged mode cannot read from
// cgroups: CPU time, peak memory (of the largest process), page faults.
func addRusage(s *sample.Summary, ru *syscall.Rusage) {
	if ru == nil {
		return
	}
	if s.Totals == nil {
		s.Totals = map[string]float64{}
	}
	set := func(name string, v float64) {
		s.Totals[name] = v
		delete(s.NotMeasured, name)
	}
	set(sample.CPUUserSeconds, time.Duration(syscall.TimevalToNsec(ru.Utime)).Seconds())
	set(sample.CPUSystemSeconds, time.Duration(syscall.TimevalToNsec(ru.Stime)).Seconds())
	set(sample.MemPeakBytes, float64(ru.Maxrss)*1024)
	set(sample.MajorPageFaults, float64(ru.Majflt))
	set(sample.PageFaults, float64(ru.Majflt+ru.Minflt))
}

// trim shortens a command line for the digest's header.
func trim(argv []string) []string {
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if len(a) > 30 {
			a = a[:27] + "..."
		}
		out = append(out, a)
		if len(out) == 4 && len(argv) > 4 {
			out = append(out, "...")
			break
		}
	}
	return out
}
