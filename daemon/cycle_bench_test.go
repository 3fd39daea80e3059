package daemon

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

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/properties/propertiestest"
)

// BenchmarkCycle32Jobs: one measurement cycle of the node daemon (Measurer.cycle) with 32
// idle jobs, over real cgroups, as bench/daemon_load.sh runs it but without the daemon's
// socket and timers. Run it as root:
//
//	go test -run XXX -bench BenchmarkCycle32Jobs -benchtime 200x ./daemon/
//
// Each job has the cgroups Slurm's cgroup/v1 plugin makes (slurm_<node>/uid_0/job_N/step_0
// in the cpuacct, memory, pids and cpuset hierarchies) with one sleeping process in its
// step, which is then moved into the perf cgroup persyst makes for the job (as the plugin
// does). The daemon's properties engine evaluates every sample and samples are kept on
// disk, as in production; the jobs are past their start-up, so every sample is judged.
// ns/job (wall) and cpu-ns/job (user and system CPU of the process) are per job per
// cycle; B/op and allocs/op are per cycle of all jobs. Everything created is removed
// at cleanup.
//
// warm runs the cycles back to back. cold pauses 200 ms between them, as the daemon
// sleeps between its cycles: caches and branch predictors have gone cold by the next,
// which costs a cycle about twice the CPU of a warm one (the daemon's real cost is
// bench/daemon_load.sh's).
func BenchmarkCycle32Jobs(b *testing.B) {
	b.Run("warm", func(b *testing.B) { benchmarkCycle(b, 32, 0) })
	b.Run("cold", func(b *testing.B) { benchmarkCycle(b, 32, 200*time.Millisecond) })
}

// BenchmarkCycle8Jobs is BenchmarkCycle32Jobs with 8 jobs, where the part of a cycle that
// does not grow with the jobs weighs more (bench/peers.sh compares both).
func BenchmarkCycle8Jobs(b *testing.B) {
	b.Run("warm", func(b *testing.B) { benchmarkCycle(b, 8, 0) })
	b.Run("cold", func(b *testing.B) { benchmarkCycle(b, 8, 200*time.Millisecond) })
}

func benchmarkCycle(b *testing.B, jobs int, pause time.Duration) {
	testenv.Root(b, "creates cgroups and moves processes into them")
	const cg = "/sys/fs/cgroup"
	ctrls := []string{"cpuacct", "memory", "pids", "cpuset"}
	for _, c := range ctrls {
		if _, err := os.Stat(filepath.Join(cg, c)); err != nil {
			testenv.Unavailable(b, fmt.Sprintf("no cgroup v1 %s hierarchy (the benchmark fakes Slurm's cgroup/v1 layout): %v", c, err))
		}
	}
	node := fmt.Sprintf("cyclebench%d", os.Getpid())
	var dirs []string // created, parents first
	var sleeps []*exec.Cmd
	b.Cleanup(func() {
		for _, s := range sleeps {
			_ = s.Process.Kill()
			_ = s.Wait()
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for range 100 {
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
	})
	mkdir := func(ctrl string, parts ...string) string {
		d := filepath.Join(cg, ctrl)
		for _, p := range parts {
			d = filepath.Join(d, p)
			if _, err := os.Stat(d); err == nil {
				continue
			}
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
			dirs = append(dirs, d)
			if ctrl == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
					if err == nil {
						err = os.WriteFile(filepath.Join(d, f), v, 0)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		return d
	}
	engine := propertiestest.Engine(b)
	reg := newReg(b, RegistryConfig{Node: node})
	// A clock that advances one cycle per cycle run: the jobs get past their start-up
	// (which is not judged) and every later sample is evaluated, as in a long job.
	now := time.Now()
	clock := func() time.Time { return now }
	m, err := NewMeasurer(MeasureConfig{Root: "/", Cycle: time.Second, StateDir: b.TempDir(), Digest: DigestConfig{Engine: engine}},
		reg, node, zerolog.Nop(), clock)
	if err != nil {
		b.Fatal(err)
	}
	if m.owned.parent != "" {
		dirs = append([]string{m.host.Path(m.owned.parent)}, dirs...) // removed last
	}
	// Each job holds every CPU (its cpuset's, copied from the root): the daemon waits
	// for a cpuset to match the cores Slurm gave the job.
	cores := "0-" + strconv.Itoa(runtime.NumCPU()-1)
	for i := range jobs {
		id := uint32(950001 + i)
		sleep := exec.Command("/bin/sleep", "1000")
		if err := sleep.Start(); err != nil {
			b.Fatal(err)
		}
		sleeps = append(sleeps, sleep)
		pid := []byte(strconv.Itoa(sleep.Process.Pid))
		for _, c := range ctrls {
			step := mkdir(c, "slurm_"+node, "uid_0", "job_"+strconv.Itoa(int(id)), "step_0")
			if err := os.WriteFile(filepath.Join(step, "cgroup.procs"), pid, 0); err != nil {
				b.Fatal(err)
			}
		}
		j, err := reg.Apply(wire.JobStart, &wire.Event{JobID: id, UID: 0, Persyst: wire.On, Time: now, JobCores: cores}, now)
		if err != nil {
			b.Fatal(err)
		}
		if join := prepareNow(m, j); join != "" {
			dirs = append(dirs, m.host.Path(join))
			if err := os.WriteFile(filepath.Join(m.host.Path(join), "cgroup.procs"), pid, 0); err != nil {
				b.Fatal(err)
			}
		}
		b.Cleanup(func() { m.end(id) }) // before the sleeps are killed and the cgroups removed
	}
	m.cycle() // every job measured: its meter is open and has its baseline
	for i := range jobs {
		if m.Summary(uint32(950001+i)) == nil {
			b.Fatalf("job %d not measured", 950001+i)
		}
	}
	for range int(engine.Startup()/time.Second) + 2 {
		now = now.Add(time.Second)
		m.cycle()
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		now = now.Add(time.Second)
		m.cycle()
		if pause > 0 {
			b.StopTimer()
			time.Sleep(pause)
			b.StartTimer()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(jobs), "ns/job")
	// CPU time (user + system, every thread) is what the daemon costs the node; wall time
	// also counts waiting for a CPU that other work holds.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/float64(jobs), "cpu-ns/job")
	b.ReportMetric(float64(b.N), "cycles") // per-op metrics below are per cycle of all jobs
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
