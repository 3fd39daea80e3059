package cgstats

import (
	"errors"
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

// TestFilesAbsent: a file found absent in a cgroup directory that exists is not looked
// for again until Recheck; a directory that vanished is looked at afresh.
func TestFilesAbsent(t *testing.T) {
	root := copyTree(t, "v2")
	paths := map[string]string{"unified": v2Dir}
	peak := filepath.Join(root, v2Dir, "memory.peak")
	if err := os.Remove(peak); err != nil {
		t.Fatal(err)
	}
	f := NewReader(hostfs.New(root), Options{}).Files()
	defer f.Close()
	type result struct {
		Peak     bool
		Vanished bool
	}
	for _, step := range []struct {
		name string
		do   func(t *testing.T)
		want result
	}{
		{"memory.peak absent", nil, result{}},
		{"memory.peak appears: not looked for", func(t *testing.T) { testenv.Write(t, filepath.Join(root, v2Dir+"/memory.peak"), "73400320\n") }, result{}},
		{"after Recheck", func(*testing.T) { f.Recheck() }, result{Peak: true}},
		{"memory.peak removed: read by path, absent", func(t *testing.T) {
			if err := os.Remove(peak); err != nil {
				t.Fatal(err)
			}
		}, result{}},
		{"cgroup removed", func(t *testing.T) {
			if err := os.Rename(filepath.Join(root, v2Dir), filepath.Join(root, v2Dir+".away")); err != nil {
				t.Fatal(err)
			}
		}, result{Vanished: true}},
		{"cgroup back, with memory.peak: looked for afresh", func(t *testing.T) {
			if err := os.Rename(filepath.Join(root, v2Dir+".away"), filepath.Join(root, v2Dir)); err != nil {
				t.Fatal(err)
			}
			testenv.Write(t, filepath.Join(root, v2Dir+"/memory.peak"), "1\n")
		}, result{Peak: true}},
	} {
		if step.do != nil {
			step.do(t)
		}
		s, err := f.Read(paths)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got := result{Peak: s.Has(MemPeak), Vanished: s.Vanished}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
		if f.OpenFiles() != 0 {
			t.Errorf("%s: %d files kept open on a file system that is not cgroupfs", step.name, f.OpenFiles())
		}
	}
}

// TestFilesKernel reads a real cgroup through kept-open files: a value read again through
// the same descriptors changes with the cgroup, a removed cgroup's files are closed, a
// cgroup made again at the same path is read from its new files, a directory no longer
// asked for is closed, and Close leaves no descriptor behind.
func TestFilesKernel(t *testing.T) {
	testenv.Root(t, "creates cgroups")
	mounts, err := jobcgroup.Mounts(hostfs.New("/"))
	if err != nil {
		t.Fatal(err)
	}
	var dir string
	for _, m := range mounts {
		if m.Key == "pids" {
			dir = filepath.Join(m.Path, "persyst-files-"+strconv.Itoa(os.Getpid()))
		}
	}
	if dir == "" {
		testenv.Unavailable(t, "no cgroup v1 pids hierarchy mounted")
	}
	mk := func(t *testing.T) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rm := func(t *testing.T) {
		for range 50 {
			if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("cannot remove %s", dir)
	}
	mk(t)
	t.Cleanup(func() { _ = unix.Rmdir(dir) })
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	f := NewReader(hostfs.New("/"), Options{}).Files()
	// A sleeping child moves in and out (to the hierarchy's root).
	sleep := exec.Command("/bin/sleep", "1000")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
	})
	child := strconv.Itoa(sleep.Process.Pid)
	before := fds()
	parent := filepath.Dir(dir)
	move := func(to string) func(t *testing.T) {
		return func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(child), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	type result struct {
		Pids     uint64
		HasPids  bool
		Vanished bool
		Open     int
	}
	paths := map[string]string{"pids": dir}
	for _, step := range []struct {
		name  string
		do    func(t *testing.T)
		paths map[string]string
		want  func() result
	}{
		{"empty cgroup", nil, paths, func() result { return result{HasPids: true, Open: 1} }},
		{"process moved in", move(dir), paths, func() result { return result{Pids: 1, HasPids: true, Open: 1} }},
		{"process moved out", move(parent), paths, func() result { return result{HasPids: true, Open: 1} }},
		{"cgroup removed", rm, paths, func() result { return result{Vanished: true} }},
		{"cgroup made again", mk, paths, func() result { return result{HasPids: true, Open: 1} }},
		{"process in the new cgroup", move(dir), paths, func() result { return result{Pids: 1, HasPids: true, Open: 1} }},
		{"no longer asked for", move(parent), map[string]string{}, func() result { return result{} }},
		{"asked for again", nil, paths, func() result { return result{HasPids: true, Open: 1} }},
	} {
		if step.do != nil {
			step.do(t)
		}
		s, _ := f.Read(step.paths)
		got := result{Pids: s.Pids, HasPids: s.Has(PidsCurrent), Vanished: s.Vanished, Open: f.OpenFiles()}
		if diff := cmp.Diff(step.want(), got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.Read(paths); !s.Has(PidsCurrent) || f.OpenFiles() != 0 {
		t.Errorf("read after Close: measured %v, %d files open; want pids measured, none kept open", s.Measured, f.OpenFiles())
	}
	if after := fds(); after != before {
		t.Errorf("%d descriptors open after Close, %d before", after, before)
	}
	rm(t)
}
