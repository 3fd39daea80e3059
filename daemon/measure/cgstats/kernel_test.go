package cgstats

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

const helperEnv = "PERSYST_CGSTATS_HELPER"

// TestMain lets the test binary act as the workload child of TestRealKernel.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helper()
		return
	}
	os.Exit(m.Run())
}

const (
	helperMem  = 64 << 20
	helperSpin = 500 * time.Millisecond
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// helper waits for "go" on stdin (the parent has moved it into the cgroups by then),
// touches 64 MiB of anonymous memory, spins until it has used ~0.5 s CPU, prints the CPU
// time it used, and waits for stdin to close.
func helper() {
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(2)
	}
	start := cpuTime()
	mem, err := syscall.Mmap(-1, 0, helperMem, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		fmt.Println("mmap:", err)
		os.Exit(2)
	}
	for i := 0; i < len(mem); i += os.Getpagesize() {
		mem[i] = 1
	}
	x := 0
	for cpuTime()-start < helperSpin {
		for i := 0; i < 100000; i++ {
			x += i
		}
	}
	fmt.Println(int64(cpuTime()-start), x&1)
	_, _ = in.ReadString('\n')
	_ = syscall.Munmap(mem)
}

// TestRealKernel measures a real workload in real cgroups: v1 memory+cpuacct and a v2
// cgroup, whichever are mounted.
func TestRealKernel(t *testing.T) {
	testenv.Root(t, "creates cgroups to measure a workload in")
	fsys := hostfs.New("/")
	mounts, err := jobcgroup.Mounts(fsys)
	if err != nil {
		t.Fatal(err)
	}
	name := "persyst-test-" + strconv.Itoa(os.Getpid())
	paths := map[string]string{}
	for _, m := range mounts {
		switch m.Key {
		case "memory", "cpuacct", "cpu,cpuacct", "unified":
		default:
			continue
		}
		dir := filepath.Join(m.Path, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Logf("cannot create %s: %v (hierarchy %s not tested)", dir, err, m.Key)
			continue
		}
		t.Cleanup(func() {
			// rmdir can fail briefly while the killed child is being reaped.
			for i := 0; i < 50; i++ {
				if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("could not remove %s", dir)
		})
		paths[m.Key] = dir
	}
	if len(paths) == 0 {
		testenv.Unavailable(t, "no memory, cpuacct or cgroup2 hierarchy mounted")
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := strconv.Itoa(cmd.Process.Pid)
	for key, dir := range paths {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644); err != nil {
			t.Logf("cannot move child into %s: %v (hierarchy %s not tested)", dir, err, key)
			delete(paths, key)
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	ns, err := strconv.ParseInt(strings.Fields(line)[0], 10, 64)
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	childCPU := time.Duration(ns)
	t.Logf("helper used %v CPU (spin target %v) and touched %d MiB", childCPU, helperSpin, helperMem>>20)

	r := NewReader(fsys, Options{})
	check := func(label string, p map[string]string) {
		if len(p) == 0 {
			return
		}
		s, err := r.Read(p)
		if err != nil {
			t.Errorf("%s: %v", label, err)
		}
		t.Logf("%s: measured %v", label, s.Measured)
		for _, m := range s.Missing {
			t.Logf("%s: not measured: %v (%s: %s)", label, m.Fields, m.Path, m.Why)
		}
		if s.Has(CPUUser | CPUSystem) {
			cpu := time.Duration(s.CPUUserNs + s.CPUSystemNs)
			t.Logf("%s: cgroup CPU user %v system %v total %v", label, time.Duration(s.CPUUserNs), time.Duration(s.CPUSystemNs), cpu)
			if lo, hi := helperSpin*8/10, helperSpin*12/10; cpu < lo || cpu > hi {
				t.Errorf("%s: cgroup CPU %v not within 20%% of the %v spin", label, cpu, helperSpin)
			}
		} else {
			t.Logf("%s: CPU time not measured here", label)
		}
		if s.Has(MemPeak) {
			t.Logf("%s: memory current %.1f MiB peak %.1f MiB, pgfault %d", label,
				float64(s.MemCurrent)/(1<<20), float64(s.MemPeak)/(1<<20), s.PgFault)
			if lo, hi := uint64(helperMem), uint64(helperMem)*12/10; s.MemPeak < lo || s.MemPeak > hi {
				t.Errorf("%s: memory peak %d not within [64 MiB, +20%%]", label, s.MemPeak)
			}
			if s.Has(PgFault) && s.PgFault < helperMem/uint64(os.Getpagesize())/2 {
				// THP can fault 2 MiB at once, hence only a loose bound.
				t.Logf("%s: few page faults (%d): transparent huge pages?", label, s.PgFault)
			}
		} else {
			t.Logf("%s: memory peak not measured here", label)
		}
	}
	v1 := map[string]string{}
	for k, d := range paths {
		if k != "unified" {
			v1[k] = d
		}
	}
	check("v1", v1)
	if d, ok := paths["unified"]; ok {
		check("v2", map[string]string{"unified": d})
	}
	_ = stdin.Close()
}
