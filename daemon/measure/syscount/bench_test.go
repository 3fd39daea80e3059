package syscount

// BenchmarkOpenClose: what counting costs one openat+close pair of a thread pinned to
// CPU 0, in a cgroup below the one counted ("job"), or outside it ("bystander"), with
// the perf tracepoints persyst counted with before (in cgroup mode, on every CPU), the
// raw tracepoint program and the fentry programs (where the kernel allows them).
//
//	go test -run '^$' -bench OpenClose -benchtime 2000000x ./daemon/measure/syscount/

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/perfevents"
)

var benchEvents = []Event{
	{Name: "syscalls:sys_enter_openat", Syscall: "openat"},
	{Name: "syscalls:sys_enter_open", Syscall: "open"},
	{Name: "syscalls:sys_enter_openat2", Syscall: "openat2"},
	{Name: "syscalls:sys_enter_creat", Syscall: "creat"},
	{Name: "syscalls:sys_enter_close", Syscall: "close"},
	{Name: "syscalls:sys_enter_futex", Syscall: "futex"},
}

func BenchmarkOpenClose(b *testing.B) {
	mount, job, leaf := unifiedDir(b)
	other := filepath.Join(mount, "persyst-syscount-bystander-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(other, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.Remove(other) })
	orig := ownCgroup(b, mount)
	defer moveTo(b, orig)
	hows := []string{"none", "perf-tracepoints", "raw-tracepoint", "fentry"}
	if os.Getenv("PERSYST_BENCH_EMPTY") != "" {
		hows = append(hows, "empty-raw-tracepoint", "raw-tracepoint-without-files")
	}
	for _, how := range hows {
		for _, where := range []string{"job", "bystander"} {
			b.Run(how+"/"+where, func(b *testing.B) {
				stop := start(b, how, mount, job)
				defer stop()
				if where == "job" {
					moveTo(b, leaf)
				} else {
					moveTo(b, other)
				}
				defer moveTo(b, orig)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var set, was unix.CPUSet
				unix.SchedGetaffinity(0, &was)
				set.Set(0)
				unix.SchedSetaffinity(0, &set)
				defer unix.SchedSetaffinity(0, &was)
				b.ResetTimer()
				for range b.N {
					fd, err := unix.Openat(unix.AT_FDCWD, "/dev/null", unix.O_RDONLY, 0)
					if err != nil {
						b.Fatal(err)
					}
					unix.Close(fd)
				}
			})
		}
	}
}

// start begins counting the job's cgroup the way how says, and returns how to stop.
func start(b *testing.B, how, mount, job string) func() {
	switch how {
	case "none":
		return func() {}
	case "empty-raw-tracepoint":
		// What the slow system call path costs alone: a program that does nothing.
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp,
			AttachTo: "sys_enter", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}, License: "GPL"})
		if err != nil {
			b.Skip(err)
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			b.Skip(err)
		}
		return func() { l.Close(); prog.Close() }
	case "perf-tracepoints":
		events := tracepoints(b)
		var cpus []int
		for i := range runtime.NumCPU() {
			cpus = append(cpus, i)
		}
		g, err := perfcg.Open(job, cpus, events)
		if err != nil {
			b.Fatal(err)
		}
		return func() { g.Close() }
	}
	c, _, err := New(Options{Events: benchEvents, NoFentry: strings.HasPrefix(how, "raw-tracepoint"), noFiles: how == "raw-tracepoint-without-files"})
	if err != nil {
		b.Skip(err)
	}
	if how == "fentry" && c.Mode() != Fentry {
		c.Close()
		b.Skip("fentry programs not permitted here")
	}
	id, _ := CgroupID(job)
	level, _ := Level(mount, job)
	if err := c.Watch(id, level); err != nil {
		b.Fatal(err)
	}
	return func() { c.Close() }
}

// tracepoints resolves the syscall tracepoints on a private tracefs mount.
func tracepoints(b *testing.B) []perfevents.Event {
	dir := b.TempDir()
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		b.Skip("tracefs: ", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	var out []perfevents.Event
	for _, e := range benchEvents {
		_, name, _ := strings.Cut(e.Name, ":")
		raw, err := os.ReadFile(filepath.Join(dir, "events/syscalls", name, "id"))
		if err != nil {
			continue
		}
		id, _ := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
		out = append(out, perfevents.Event{Name: e.Name, Kind: perfevents.Tracepoint, Type: unix.PERF_TYPE_TRACEPOINT, Config: id})
	}
	return out
}

// ownCgroup is this process's cgroup directory on the v2 hierarchy at mount.
func ownCgroup(b *testing.B, mount string) string {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(mount, p)
		}
	}
	b.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return ""
}

func moveTo(b *testing.B, dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		b.Fatal(err)
	}
}
