package kmsg

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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

// TestWatchRealOOMKill: a process over its memory cgroup's limit is killed by the
// kernel, and Watch reports the kill with the process's cgroup (a child of the limited
// one, as Slurm's task cgroups are). Needs root and a cgroup v1 memory hierarchy (CI
// has both).
func TestWatchRealOOMKill(t *testing.T) {
	mem := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(mem, "memory.limit_in_bytes")); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("needs root and a cgroup v1 memory hierarchy at %s (CI has both): %v", mem, err)
		}
		t.Skip("needs root and a cgroup v1 memory hierarchy")
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kills := make(chan OOMKill, 4)
	watching := make(chan error, 1)
	go func() { watching <- Watch(ctx, "/dev/kmsg", func(k OOMKill) { kills <- k }) }()
	time.Sleep(200 * time.Millisecond) // Watch starts at the log's end
	// A shell that joins the task cgroup, then this test binary touching 128 MiB.
	cmd := exec.Command("/bin/sh", "-c", "echo $$ > "+filepath.Join(task, "cgroup.procs")+" && exec "+os.Args[0]+" -test.run=^$")
	cmd.Env = append(os.Environ(), allocEnv+"=134217728")
	if err := cmd.Run(); err == nil {
		t.Fatal("the allocating process was not killed")
	}
	for {
		select {
		case k := <-kills:
			if k.TaskCgroup == "/"+name+"/task_0" && k.OOMCgroup == "/"+name {
				return
			}
			t.Logf("another kill: %+v", k)
		case err := <-watching:
			t.Fatalf("Watch stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("no OOM kill reported")
		}
	}
}
