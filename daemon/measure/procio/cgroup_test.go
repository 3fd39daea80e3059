package procio

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

func TestListProcsFake(t *testing.T) {
	root := t.TempDir()
	job := "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7"
	files := map[string]string{
		"cgroup.procs":                               "",
		"cgroup.controllers":                         "cpu memory\n",
		"step_0/cgroup.procs":                        "5\n3\n",
		"step_0/slurm/cgroup.procs":                  "2\n",
		"step_0/user/cgroup.procs":                   "",
		"step_0/user/task_0/cgroup.procs":            "7\n3\n", // v1 cgroup.procs may repeat
		"step_0/user/task_1/cgroup.procs":            "11\n",
		"step_batch/cgroup.procs":                    "9\n",
		"step_batch/slurm/cgroup.procs":              "",
		"step_batch/slurm/not-a-cgroup/.keep":        "", // no cgroup.procs: skipped like a vanished one
		"step_extern/cgroup.procs":                   "4\n",
		"step_extern/user/task_special/weird":        "x",
		"step_extern/user/task_special/cgroup.procs": "",
	}
	for name, content := range files {
		testenv.Write(t, filepath.Join(root, job, name), content)
	}
	got, err := ListProcs(hostfs.New(root), job)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{2, 3, 4, 5, 7, 9, 11}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	t.Run("malformed", func(t *testing.T) {
		testenv.Write(t, filepath.Join(root, job, "step_0/user/task_1/cgroup.procs"), "11\nx\n")
		got, err := ListProcs(hostfs.New(root), job)
		want := `procio: ` + job + `/step_0/user/task_1/cgroup.procs: line 2: want a pid, got "x"`
		if diff := cmp.Diff(want, errString(err)); diff != "" {
			t.Errorf("error (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int{2, 3, 4, 5, 7, 9, 11}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := ListProcs(hostfs.New(root), job+"/step_9")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("got %v, want an error wrapping fs.ErrNotExist", err)
		}
	})
	t.Run("not a cgroup", func(t *testing.T) {
		_, err := ListProcs(hostfs.New(root), "/sys")
		want := "procio: cgroup /sys: no cgroup.procs: not a cgroup directory"
		if diff := cmp.Diff(want, errString(err)); diff != "" {
			t.Errorf("error (-want +got):\n%s", diff)
		}
		if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v wraps fs.ErrNotExist: the caller would take it for a job that ended", err)
		}
	})
	t.Run("vanished descendant", func(t *testing.T) {
		w := walker{root: root}
		if err := w.walk(job+"/step_gone", false); err != nil || len(w.pids) != 0 || len(w.errs) != 0 {
			t.Errorf("walk of a vanished descendant: %v, %v, %v; want nothing", err, w.pids, w.errs)
		}
	})
}

// startSleepers starts n helper processes that wait for their stdin to close; Cleanup
// stops and reaps them.
func startSleepers(tb testing.TB, n int) []int {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	pids := make([]int, 0, n)
	for range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), helperEnv+"=sleep")
		in, err := cmd.StdinPipe()
		if err != nil {
			tb.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			in.Close()
			_ = cmd.Wait()
		})
		pids = append(pids, cmd.Process.Pid)
	}
	return pids
}

// TestListProcsRealCgroup moves helper processes into a cgroup v2 directory and a child
// of it and lists them.
func TestListProcsRealCgroup(t *testing.T) {
	testenv.Root(t, "creates cgroups")
	mounts, err := jobcgroup.Mounts(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	var mount string
	for _, m := range mounts {
		if m.IsV2 {
			mount = m.Path
			break
		}
	}
	if mount == "" {
		testenv.Unavailable(t, "no cgroup2 mount")
	}
	dir := filepath.Join(mount, "persyst-procio-test-"+strconv.Itoa(os.Getpid()))
	sub := filepath.Join(dir, "step_0")
	for _, d := range []string{dir, sub} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Registered before the sleepers, so it runs after they are reaped.
	t.Cleanup(func() {
		for _, d := range []string{sub, dir} {
			var err error
			for range 50 { // a reaped task leaves its cgroup asynchronously
				if err = os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	pids := startSleepers(t, 2)
	for i, d := range []string{dir, sub} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pids[i])), 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ListProcs(hostfs.New("/"), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]int(nil), pids...)
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// The Tracker reads them (as root, any user's processes).
	if _, n, err := NewTracker(hostfs.New("/"), TrackerOptions{}).Update(got); err != nil || n != 2 {
		t.Errorf("Update: %d processes, %v; want 2, nil", n, err)
	}

	// A removed cgroup is fs.ErrNotExist.
	if _, err := ListProcs(hostfs.New("/"), dir+"/nonexistent"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want an error wrapping fs.ErrNotExist", err)
	}
}
