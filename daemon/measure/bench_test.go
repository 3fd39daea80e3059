package measure_test

// BenchmarkRead: the cost of one cycle read of one job (Meter.Read(sample.Cycle)) as the
// daemon does it, against the real kernel, as a function of the job's CPUs and of the perf
// events opened. Run it as root:
//
//	go test -run XXX -bench BenchmarkRead -benchtime 2000x ./daemon/measure/
//
// The job is a real cgroup2 directory <cgroup2>/persyst-bench-<pid> (perf events in
// cgroup mode, process list) plus, on hybrid hosts, directories of the same name in the
// v1 cpuacct, memory and pids hierarchies (cgroup statistics), with one sleeping process
// (/bin/sleep) in all of them. Everything is removed at cleanup. The Env and Spec are
// built the way daemon/measurer.go builds them on such a hybrid host (Slurm's job
// cgroups in v1, persyst's own job cgroup in v2): perf events in cgroup mode and the
// process list from the v2 directory, statistics from every hierarchy ("unified" too).
//
// The job is idle: its counters are inactive on every CPU, so a perf read(2) does not
// need an IPI to the CPU where the job runs. A busy job's reads cost somewhat more.
//
// The meter is reopened (timer stopped) every benchMeterReads reads, so that memory does
// not grow with b.N: the cost includes appending the sample to a job of up to that many
// samples. kept-B/sample is the heap a meter keeps per sample (Samples and their maps),
// measured untimed after the loop.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/measure"
	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/sample"
)

const (
	benchMeterReads  = 1000
	benchRetainReads = 200
)

// benchJob is the benchmark's job: its cgroups (hierarchy key → directory) and the node's
// probed perf events.
type benchJob struct {
	v2      string            // cgroup2 directory (perf events, processes)
	stat    map[string]string // hierarchy key → directory (cgstats)
	online  []int
	probed  perfcg.Probed
	tracing string // where the tracepoint ids came from
}

// benchSetup creates the job's cgroups with one sleeping process in them, and probes the
// perf events in cgroup mode. It skips (saying why) without root or cgroup2.
func benchSetup(b *testing.B) *benchJob {
	b.Helper()
	testenv.Root(b, "creates cgroups, moves a process into them and opens perf events in cgroup mode")
	mounts, err := jobcgroup.Mounts(hostfs.New("/"))
	if err != nil {
		testenv.Unavailable(b, fmt.Sprintf("cannot read the mount table: %v", err))
	}
	name := fmt.Sprintf("persyst-bench-%d", os.Getpid())
	j := &benchJob{stat: map[string]string{}}
	var dirs []string
	b.Cleanup(func() { benchRemove(b, dirs) })
	for _, m := range mounts {
		if !m.IsV2 {
			continue
		}
		j.v2 = filepath.Join(m.Path, name)
		if err := os.Mkdir(j.v2, 0o755); err != nil {
			b.Fatalf("create cgroup: %v", err)
		}
		dirs = append(dirs, j.v2)
		j.stat[m.Key] = j.v2
		break
	}
	if j.v2 == "" {
		testenv.Unavailable(b, "no cgroup2 hierarchy mounted (perf events in cgroup mode need one here)")
	}
	// Hybrid host: memory, pids and CPU time also (or only) in v1.
	for _, m := range mounts {
		if m.IsV2 {
			continue
		}
		want := false
		for _, c := range m.Ctrls {
			want = want || c == "cpuacct" || c == "memory" || c == "pids"
		}
		if !want {
			continue
		}
		d := filepath.Join(m.Path, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatalf("create cgroup: %v", err)
		}
		dirs = append(dirs, d)
		j.stat[m.Key] = d
	}

	sleep := exec.Command("/bin/sleep", "1000")
	if err := sleep.Start(); err != nil {
		b.Fatalf("start sleep: %v", err)
	}
	// Registered after benchRemove's cleanup, so it runs first (LIFO): the process is
	// gone before the cgroups are removed.
	b.Cleanup(func() {
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
	})
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
			b.Fatalf("move sleep into %s: %v", d, err)
		}
	}

	j.online, err = hostfs.New("/").OnlineCPUs()
	if err != nil {
		b.Fatal(err)
	}
	fs := benchTracing(b)
	j.tracing = fs.Path("sys/kernel/tracing")
	j.probed, err = perfcg.Probe(fs, j.v2, zerolog.Nop())
	if err != nil {
		testenv.Unavailable(b, fmt.Sprintf("perf events in cgroup mode: %v", err))
	}
	if st, _ := j.probed.Lookup("task-clock"); !st.Available {
		testenv.Unavailable(b, fmt.Sprintf("perf events in cgroup mode not available: %v", st.Err))
	}
	return j
}

// benchTracing returns an FS whose tracefs has the tracepoint ids. If none is mounted at
// the usual places, it mounts tracefs on a private directory (unmounted at cleanup)
// rather than on /sys/kernel/tracing, so that nothing else on the machine (concurrent
// tests that expect "tracefs not mounted") sees a change. The ids are the kernel's
// either way.
func benchTracing(b *testing.B) hostfs.FS {
	b.Helper()
	fs := hostfs.New("/")
	if _, err := perfcg.TracingDir(fs); err == nil {
		return fs
	}
	root := b.TempDir()
	mp := filepath.Join(root, "sys/kernel/tracing")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := unix.Mount("nodev", mp, "tracefs", 0, ""); err != nil {
		b.Logf("tracefs not mounted and cannot be mounted at %s (%v): tracepoint sub-benchmarks skip", mp, err)
		return fs
	}
	b.Logf("tracefs not mounted at /sys/kernel/tracing: mounted it at %s for the benchmark", mp)
	b.Cleanup(func() {
		if err := unix.Unmount(mp, 0); err != nil {
			b.Errorf("unmount %s: %v", mp, err)
		}
	})
	return hostfs.New(root)
}

// benchRemove removes the cgroups (processes must be gone), retrying while the kernel
// still holds a cgroup busy after its last task exited.
func benchRemove(b *testing.B, dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for k := 0; k < 100; k++ {
			if err = unix.Rmdir(dirs[i]); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			b.Errorf("cleanup: rmdir %s: %v", dirs[i], err)
		}
	}
}

// events returns the probed, available events of the given kinds, and the catalog
// events left out with why (Env.Unavailable), as the daemon does.
func (j *benchJob) events(kinds ...perfevents.Kind) (ev []perfevents.Event, unavailable map[string]string) {
	unavailable = map[string]string{}
	for _, st := range j.probed {
		in := false
		for _, k := range kinds {
			in = in || st.Event.Kind == k
		}
		switch {
		case !st.Available:
			unavailable[st.Event.Name] = "not available: " + perfcg.Reason(st.Event, st.Err)
		case !in:
			unavailable[st.Event.Name] = "not in this benchmark's event set"
		default:
			ev = append(ev, st.Event)
		}
	}
	return perfevents.WithIPC(ev), unavailable
}

// cpus returns n CPUs for the job. The machine may have fewer: the online CPUs are then
// repeated ([0,1,0,1,...]); perfcg.Open opens one fd per entry, so this simulates a job
// on n CPUs by reopening the same ones (same number of fds, read(2)s and values).
func (j *benchJob) cpus(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = j.online[i%len(j.online)]
	}
	return out
}

func BenchmarkRead(b *testing.B) {
	j := benchSetup(b)
	sw, swUnavail := j.events(perfevents.Software)
	swtp, swtpUnavail := j.events(perfevents.Software, perfevents.Tracepoint)
	var tps []string
	for _, e := range swtp {
		if e.Kind == perfevents.Tracepoint {
			tps = append(tps, e.Name)
		}
	}
	b.Logf("job cgroups %v; %d online CPUs; software events %d; tracepoints %v (ids from %s)",
		j.stat, len(j.online), len(sw), tps, j.tracing)

	type set struct {
		name   string
		events []perfevents.Event
		unav   map[string]string
	}
	sets := []set{{"sw", sw, swUnavail}}
	if len(tps) > 0 {
		sets = append(sets, set{"sw+tp", swtp, swtpUnavail})
	} else {
		b.Logf("no tracepoint available: sw+tp sub-benchmarks not run")
	}
	for _, n := range []int{1, 2, 8, 32} {
		for _, s := range sets {
			b.Run(fmt.Sprintf("cpus=%d/events=%s", n, s.name), func(b *testing.B) {
				env := j.env(s.events, s.unav)
				j.run(b, env, j.spec(n, true, false), len(s.events)*n)
			})
		}
	}
	// The job alone on the node: node network counters are read too.
	b.Run("cpus=2/events=sw/exclusive", func(b *testing.B) {
		j.run(b, j.env(sw, swUnavail), j.spec(2, true, true), len(sw)*2)
	})
	// Without perf: cgroup statistics and process I/O only.
	b.Run("cpus=2/no-perf", func(b *testing.B) {
		j.run(b, j.env(nil, nil), j.spec(2, false, false), 0)
	})
}

// env is what measurer.go's NewMeasurer builds, with the given events.
func (j *benchJob) env(events []perfevents.Event, unavailable map[string]string) *measure.Env {
	return &measure.Env{
		Events:      events,
		Unavailable: unavailable,
		Host:        hostfs.New("/"),
		Stats:       cgstats.NewReader(hostfs.New("/"), cgstats.Options{}),
		Log:         zerolog.Nop(),
		Now:         time.Now,
	}
}

// spec is what measurer.go's startLocked builds for a job with a v2 cgroup.
func (j *benchJob) spec(ncpu int, perf, exclusive bool) measure.Spec {
	s := measure.Spec{
		Name:        "job bench",
		CPUs:        j.cpus(ncpu),
		StatCgroups: j.stat,
		ProcCgroup:  j.v2,
		Exclusive:   func() bool { return exclusive },
	}
	if perf {
		s.PerfCgroup = j.v2
	} else {
		s.PerfWhy = "benchmark without perf events"
	}
	return s
}

func (j *benchJob) run(b *testing.B, env *measure.Env, spec measure.Spec, fds int) {
	open := func() *measure.Meter {
		m, err := measure.Open(env, spec)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	m := open()
	defer func() { _ = m.Close() }()
	// Everything asked for must be measured: no silent fallback to fewer fds.
	if sum := m.Summary(); fds > 0 {
		for _, e := range env.Events {
			if why, ok := sum.NotMeasured[e.Name]; ok {
				b.Fatalf("%s not measured: %s", e.Name, why)
			}
		}
	}
	if _, err := m.Read(sample.Cycle); err != nil {
		b.Fatalf("first read: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%benchMeterReads == 0 {
			b.StopTimer()
			_ = m.Close()
			m = open()
			b.StartTimer()
		}
		if _, err := m.Read(sample.Cycle); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(fds), "perf-fds")
	// What a job's meter keeps per sample (within Env.SampleBytes per job):
	// live heap after benchRetainReads reads of a fresh meter, over that many.
	_ = m.Close()
	m = open()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range benchRetainReads {
		if _, err := m.Read(sample.Cycle); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/benchRetainReads, "kept-B/sample")
}
