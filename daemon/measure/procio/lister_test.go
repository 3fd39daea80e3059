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
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

// openFDs counts the test process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestListerKernel lists a real cgroup2 tree through kept descriptors while it changes: a
// process moving in and into a child cgroup is listed, a removed child's descriptors are
// closed, a removed top is "gone", and Close leaves no descriptor behind.
func TestListerKernel(t *testing.T) {
	testenv.Root(t, "creates cgroups")
	h := hostfs.New("/")
	mounts, err := jobcgroup.Mounts(h)
	if err != nil {
		t.Fatal(err)
	}
	var mnt string
	for _, m := range mounts {
		if m.IsV2 {
			mnt = m.Path
		}
	}
	if mnt == "" {
		testenv.Unavailable(t, "no cgroup2 hierarchy mounted")
	}
	top := filepath.Join(mnt, "persyst-lister-"+strconv.Itoa(os.Getpid()))
	child := filepath.Join(top, "step_0")
	rmdir := func(t *testing.T, d string) {
		for range 100 {
			if err := unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("cannot remove %s", d)
	}
	if err := os.Mkdir(top, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rmdir(t, child); rmdir(t, top) })
	sleep := exec.Command("/bin/sleep", "1000")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
	})
	pid := sleep.Process.Pid
	move := func(to string) func(t *testing.T) {
		return func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := openFDs(t)
	l := NewLister(h)
	type result struct {
		PIDs []int
		Gone bool
		Open int
	}
	for _, step := range []struct {
		name string
		do   func(t *testing.T)
		want result
	}{
		{"empty", nil, result{Open: 2}},
		{"process moved in", move(top), result{PIDs: []int{pid}, Open: 2}},
		{"child cgroup made, process moved into it", func(t *testing.T) {
			if err := os.Mkdir(child, 0o755); err != nil {
				t.Fatal(err)
			}
			move(child)(t)
		}, result{PIDs: []int{pid}, Open: 4}},
		{"child cgroup removed", func(t *testing.T) { move(top)(t); rmdir(t, child) }, result{PIDs: []int{pid}, Open: 2}},
		{"top removed", func(t *testing.T) { move(mnt)(t); rmdir(t, top) }, result{Gone: true}},
		{"top made again", func(t *testing.T) {
			if err := os.Mkdir(top, 0o755); err != nil {
				t.Fatal(err)
			}
			move(top)(t)
		}, result{PIDs: []int{pid}, Open: 2}},
	} {
		if step.do != nil {
			step.do(t)
		}
		pids, err := l.List(top)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %v", step.name, err)
		}
		got := result{PIDs: pids, Gone: errors.Is(err, fs.ErrNotExist), Open: l.OpenFiles()}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
		// The same as ListProcs.
		if want, werr := ListProcs(h, top); !errors.Is(werr, fs.ErrNotExist) && !cmp.Equal(want, pids) {
			t.Errorf("%s: Lister %v, ListProcs %v", step.name, pids, want)
		}
	}
	move(mnt)(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after Close, %d before", after, before)
	}
}

// TestTrackerKeptKernel: the tracker keeps a live process's stat and io open, and closes
// them when it exits or at Close.
func TestTrackerKeptKernel(t *testing.T) {
	before := openFDs(t)
	tr := NewTracker(hostfs.New("/"), TrackerOptions{})
	var cmds []*exec.Cmd
	for range 2 {
		c := exec.Command("/bin/sleep", "1000")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	pids := []int{cmds[0].Process.Pid, cmds[1].Process.Pid}
	base := openFDs(t) - before // the children's pidfds
	type result struct{ Procs, Open int }
	for _, step := range []struct {
		name string
		do   func()
		want result
	}{
		{"two processes", nil, result{2, 4}},
		{"read again through the kept files", nil, result{2, 4}},
		{"one exited", func() { _ = cmds[0].Process.Kill(); _ = cmds[0].Wait() }, result{1, 2}},
	} {
		if step.do != nil {
			step.do()
		}
		_, n, err := tr.Update(pids)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, result{n, tr.OpenFiles()}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, n, _ := tr.Update(pids); n != 1 || tr.OpenFiles() != 0 {
		t.Errorf("after Close: %d processes read, %d files open; want 1, none kept", n, tr.OpenFiles())
	}
	if after := openFDs(t) - base; after > before {
		t.Errorf("%d descriptors open after Close, %d before", after, before)
	}
}
