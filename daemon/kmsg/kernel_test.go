package kmsg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/persyst/persyst/internal/testenv"
)

// allocEnv makes the test binary touch that many bytes and exit (TestMain).
const allocEnv = "PERSYST_KMSG_ALLOC"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(allocEnv)); err == nil {
		b := make([]byte, n)
		for i := 0; i < n; i += 4096 {
			b[i] = 1
		}
		os.Exit(int(b[n/2]) - 1) // 0 if it lived
	}
	os.Exit(m.Run())
}

// TestRealOOMKill: a process over its memory cgroup's limit is killed by the kernel, and
// the log reports the kill with the process's cgroup (a child of the limited one, as
// Slurm's task cgroups are): CatchUp as soon as the process is gone (the kernel logs a
// kill before the process dies; a job's end must not depend on when Follow reads), and
// Follow as it is logged. Needs root and a cgroup v1 memory hierarchy (CI has both).
func TestRealOOMKill(t *testing.T) {
	mem := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(mem, "memory.limit_in_bytes")); err != nil || os.Geteuid() != 0 {
		testenv.Unavailable(t, fmt.Sprintf("needs root and a cgroup v1 memory hierarchy at %s: %v", mem, err))
	}
	name := "persyst-kmsg-test-" + strconv.Itoa(os.Getpid())
	job := filepath.Join(mem, name)
	task := filepath.Join(job, "task_0")
	if err := os.MkdirAll(task, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(task); os.Remove(job) })
	if err := os.WriteFile(filepath.Join(job, "memory.limit_in_bytes"), []byte("32M"), 0); err != nil {
		t.Fatal(err)
	}
	// A shell that joins the task cgroup, then this test binary touching 128 MiB.
	kill := func() {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", "echo $$ > "+filepath.Join(task, "cgroup.procs")+" && exec "+os.Args[0]+" -test.run=^$")
		cmd.Env = append(os.Environ(), allocEnv+"=134217728")
		if err := cmd.Run(); err == nil {
			t.Fatal("the allocating process was not killed")
		}
	}
	ours := func(k OOMKill) bool { return k.TaskCgroup == "/"+name+"/task_0" && k.OOMCgroup == "/"+name }
	var mu sync.Mutex
	var seen []OOMKill
	kills := make(chan OOMKill, 16)
	l, err := Open("/dev/kmsg", Handlers{OOM: func(k OOMKill) {
		mu.Lock()
		seen = append(seen, k)
		mu.Unlock()
		kills <- k
	}})
	if err != nil {
		t.Fatal(err)
	}

	kill()
	if err := l.CatchUp(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := 0
	for _, k := range seen {
		if ours(k) {
			n++
		}
	}
	mu.Unlock()
	if n != 1 {
		t.Fatalf("kills of %s reported by CatchUp once the process was gone: %d, want 1 (all: %+v)", name, n, seen)
	}
	for len(kills) > 0 {
		<-kills
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	following := make(chan error, 1)
	go func() { following <- l.Follow(ctx) }()
	kill()
	for {
		select {
		case k := <-kills:
			if ours(k) {
				cancel()
				if err := <-following; err != nil {
					t.Errorf("Follow after its context ended: %v", err)
				}
				return
			}
			t.Logf("another kill: %+v", k)
		case err := <-following:
			t.Fatalf("Follow stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("no OOM kill reported by Follow")
		}
	}
}
