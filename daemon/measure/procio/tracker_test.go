package procio

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/hostfs"
	"golang.org/x/sys/unix"
)

// fakeProc is a fake /proc tree under a temporary root.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

func (f *fakeProc) write(pid int, name, content string) {
	f.t.Helper()
	dir := filepath.Join(f.root, "proc", strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func statLine(pid, ppid int, start uint64, state byte) string {
	return fmt.Sprintf("%d (fake %d) %c %d 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, pid, state, ppid, start)
}

func ioText(v IO) string {
	return fmt.Sprintf("rchar: %d\nwchar: %d\nsyscr: %d\nsyscw: %d\nread_bytes: %d\nwrite_bytes: %d\ncancelled_write_bytes: %d\n",
		v.RChar, v.WChar, v.SyscR, v.SyscW, v.ReadBytes, v.WriteBytes, v.CancelledWriteBytes)
}

// set makes pid a running process with parent ppid, starttime start and counters v.
func (f *fakeProc) set(pid, ppid int, start uint64, v IO) {
	f.t.Helper()
	f.write(pid, "stat", statLine(pid, ppid, start, 'S'))
	f.write(pid, "io", ioText(v))
}

// zombie makes pid a zombie with final counters v.
func (f *fakeProc) zombie(pid, ppid int, start uint64, v IO) {
	f.t.Helper()
	f.write(pid, "stat", statLine(pid, ppid, start, 'Z'))
	f.write(pid, "io", ioText(v))
}

// reap removes pid, as when it has been reaped.
func (f *fakeProc) reap(pid int) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, "proc", strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

func wc(n uint64) IO { return IO{WChar: n} }

type trackStep struct {
	name string
	do   func(f *fakeProc)
	pids []int
	want IO
	n    int
	err  string
}

func runTracker(t *testing.T, since uint64, steps []trackStep) {
	t.Helper()
	f := newFakeProc(t)
	tr := NewTracker(hostfs.New(f.root), TrackerOptions{Since: since})
	var prev IO
	for i, s := range steps {
		if s.do != nil {
			s.do(f)
		}
		got, n, err := tr.Update(s.pids)
		if diff := cmp.Diff(s.err, errString(err)); diff != "" {
			t.Errorf("step %d (%s): error (-want +got):\n%s", i, s.name, diff)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("step %d (%s): total (-want +got):\n%s", i, s.name, diff)
		}
		if n != s.n {
			t.Errorf("step %d (%s): read %d processes, want %d", i, s.name, n, s.n)
		}
		if got.max(prev) != got {
			t.Errorf("step %d (%s): total went down: %+v after %+v", i, s.name, got, prev)
		}
		prev = got
	}
}

const outside = 999 // a parent outside the tracked set

func TestTracker(t *testing.T) {
	tests := []struct {
		name  string
		since uint64 // TrackerOptions.Since
		steps []trackStep
	}{
		{"first seen counts whole", 0, []trackStep{
			{"new", func(f *fakeProc) { f.set(10, outside, 100, IO{1, 2, 3, 4, 5, 6, 7}) }, []int{10}, IO{1, 2, 3, 4, 5, 6, 7}, 1, ""},
		}},
		{"born at Since counts whole", 100, []trackStep{
			{"new", func(f *fakeProc) { f.set(10, outside, 100, IO{1, 2, 3, 4, 5, 6, 7}) }, []int{10}, IO{1, 2, 3, 4, 5, 6, 7}, 1, ""},
		}},
		{"born before Since counts from the first read", 100, []trackStep{
			{"new", func(f *fakeProc) { f.set(10, outside, 99, wc(100)) }, []int{10}, IO{}, 1, ""},
			{"more", func(f *fakeProc) { f.set(10, outside, 99, wc(150)) }, []int{10}, wc(50), 1, ""},
		}},
		{"born before Since and first seen later", 100, []trackStep{
			{"task", func(f *fakeProc) { f.set(10, outside, 120, wc(7)) }, []int{10}, wc(7), 1, ""},
			{"moved in", func(f *fakeProc) { f.set(11, outside, 50, wc(1000)) }, []int{10, 11}, wc(7), 2, ""},
			{"both write", func(f *fakeProc) {
				f.set(10, outside, 120, wc(8))
				f.set(11, outside, 50, wc(1010))
			}, []int{10, 11}, wc(18), 2, ""},
		}},
		{"pid reused by a process born after Since", 100, []trackStep{
			{"old", func(f *fakeProc) { f.set(10, outside, 40, wc(100)) }, []int{10}, IO{}, 1, ""},
			{"new", func(f *fakeProc) { f.set(10, outside, 140, wc(30)) }, []int{10}, wc(30), 1, ""},
		}},
		{"delta", 0, []trackStep{
			{"new", func(f *fakeProc) { f.set(10, outside, 100, wc(100)) }, []int{10}, wc(100), 1, ""},
			{"more", func(f *fakeProc) { f.set(10, outside, 100, wc(150)) }, []int{10}, wc(150), 1, ""},
			{"same", nil, []int{10}, wc(150), 1, ""},
		}},
		{"listed twice", 0, []trackStep{
			{"new", func(f *fakeProc) { f.set(10, outside, 100, wc(100)) }, []int{10, 10}, wc(100), 1, ""},
		}},
		{"unknown pid is nothing", 0, []trackStep{
			{"absent", nil, []int{10}, IO{}, 0, ""},
		}},
		{"pid reuse is a new process", 0, []trackStep{
			{"old", func(f *fakeProc) { f.set(10, outside, 5, wc(100)) }, []int{10}, wc(100), 1, ""},
			{"new", func(f *fakeProc) { f.set(10, outside, 9, wc(30)) }, []int{10}, wc(130), 1, ""},
		}},
		{"gone child absorbed by present parent", 0, []trackStep{
			{"both", func(f *fakeProc) {
				f.set(1, outside, 1, wc(10))
				f.set(2, 1, 2, wc(100))
			}, []int{1, 2}, wc(110), 2, ""},
			// Unseen: the child writes 20 more and exits, the parent writes 5 and reaps it.
			{"reaped", func(f *fakeProc) {
				f.set(1, outside, 1, wc(10+5+120))
				f.reap(2)
			}, []int{1, 2}, wc(135), 1, ""},
		}},
		{"gone child and gone parent absorbed by grandparent", 0, []trackStep{
			{"three", func(f *fakeProc) {
				f.set(1, outside, 1, wc(1))
				f.set(2, 1, 2, wc(10))
				f.set(3, 2, 3, wc(100))
			}, []int{1, 2, 3}, wc(111), 3, ""},
			// Unseen: 3 writes to 150 and exits; 2 writes to 30 (own), reaps 3, exits;
			// 1 writes to 3 (own) and reaps 2: 1 = 3 + 30 + 150.
			{"reaped", func(f *fakeProc) {
				f.set(1, outside, 1, wc(3+30+150))
				f.reap(2)
				f.reap(3)
			}, []int{1}, wc(183), 1, ""},
		}},
		{"parent that did not absorb: capped at its delta", 0, []trackStep{
			{"both", func(f *fakeProc) {
				f.set(1, outside, 1, IO{WChar: 10, SyscW: 1})
				f.set(2, 1, 2, IO{WChar: 100, SyscW: 1})
			}, []int{1, 2}, IO{WChar: 110, SyscW: 2}, 2, ""},
			// The parent ignores SIGCHLD: the child was autoreaped, nothing added. The
			// parent wrote 5 bytes in 5 calls; the cap keeps the total from going down
			// (and loses the parent's WChar, the price of not knowing).
			{"autoreaped", func(f *fakeProc) {
				f.set(1, outside, 1, IO{WChar: 15, SyscW: 6})
				f.reap(2)
			}, []int{1}, IO{WChar: 110, SyscW: 6}, 1, ""},
		}},
		{"zombie read after leaving the list", 0, []trackStep{
			{"both", func(f *fakeProc) {
				f.set(1, outside, 1, wc(0))
				f.set(2, 1, 2, wc(100))
			}, []int{1, 2}, wc(100), 2, ""},
			// The child wrote 30 more and exited; cgroup.procs no longer lists it.
			{"zombie", func(f *fakeProc) { f.zombie(2, 1, 2, wc(130)) }, []int{1}, wc(130), 2, ""},
			{"reaped", func(f *fakeProc) {
				f.set(1, outside, 1, wc(130))
				f.reap(2)
			}, []int{1}, wc(130), 1, ""},
			{"after", nil, []int{1}, wc(130), 1, ""},
		}},
		{"moved away but alive: still tracked", 0, []trackStep{
			{"in", func(f *fakeProc) { f.set(10, outside, 1, wc(5)) }, []int{10}, wc(5), 1, ""},
			{"out", func(f *fakeProc) { f.set(10, outside, 1, wc(50)) }, nil, wc(50), 1, ""},
			{"gone", func(f *fakeProc) { f.reap(10) }, nil, wc(50), 0, ""},
		}},
		{"counter going down keeps the high-water mark", 0, []trackStep{
			{"100", func(f *fakeProc) { f.set(10, outside, 1, wc(100)) }, []int{10}, wc(100), 1, ""},
			{"90", func(f *fakeProc) { f.set(10, outside, 1, wc(90)) }, []int{10}, wc(100), 1, ""},
			{"120", func(f *fakeProc) { f.set(10, outside, 1, wc(120)) }, []int{10}, wc(120), 1, ""},
		}},
		{"empty file means gone", 0, []trackStep{
			{"new", func(f *fakeProc) { f.set(10, outside, 1, wc(100)) }, []int{10}, wc(100), 1, ""},
			{"empty", func(f *fakeProc) { f.write(10, "io", "") }, []int{10}, wc(100), 0, ""},
		}},
		{"reused pid of a gone parent is not the reaper", 0, []trackStep{
			{"both", func(f *fakeProc) {
				f.set(2, outside, 40, wc(10))
				f.set(3, 2, 50, wc(100))
			}, []int{2, 3}, wc(110), 2, ""},
			// 2 exited (reaped outside), its child 3 too (reaped by init); pid 2 now
			// belongs to a younger process, which did not absorb 3.
			{"reused", func(f *fakeProc) {
				f.set(2, outside, 60, wc(500))
				f.reap(3)
			}, []int{2}, wc(610), 1, ""},
		}},
		{"malformed file is an error; the rest is counted", 0, []trackStep{
			{"bad", func(f *fakeProc) {
				f.set(10, outside, 1, wc(100))
				f.set(11, outside, 1, wc(7))
				f.write(11, "io", "garbage\n")
			}, []int{10, 11}, wc(100), 1, `procio: /proc/11/io: line 1: want "key: value", got "garbage"`},
			{"fixed", func(f *fakeProc) { f.set(11, outside, 1, wc(7)) }, []int{10, 11}, wc(107), 2, ""},
		}},
		{"unreadable file is an error; stays tracked", 0, []trackStep{
			{"ok", func(f *fakeProc) { f.set(12, outside, 1, wc(10)) }, []int{12}, wc(10), 1, ""},
			{"dir", func(f *fakeProc) {
				f.reap(12)
				f.write(12, "stat", statLine(12, outside, 1, 'S'))
				if err := os.Mkdir(filepath.Join(f.root, "proc/12/io"), 0o755); err != nil {
					f.t.Fatal(err)
				}
			}, []int{12}, wc(10), 0, "procio: /proc/12/io: is a directory"},
			{"back", func(f *fakeProc) {
				f.reap(12)
				f.set(12, outside, 1, wc(30))
			}, []int{12}, wc(30), 1, ""},
		}},
		{"subtraction waits for an unreadable parent", 0, []trackStep{
			{"both", func(f *fakeProc) {
				f.set(1, outside, 1, wc(10))
				f.set(2, 1, 2, wc(100))
			}, []int{1, 2}, wc(110), 2, ""},
			{"parent unreadable", func(f *fakeProc) {
				f.reap(2)
				f.write(1, "stat", "garbage")
			}, []int{1}, wc(110), 0, `procio: /proc/1/stat: line 1: want "pid (comm) state ...", got "garbage"`},
			{"parent back", func(f *fakeProc) { f.set(1, outside, 1, wc(10+5+120)) }, []int{1}, wc(135), 1, ""},
		}},
		{"gone parent carries its pending subtraction", 0, []trackStep{
			{"three", func(f *fakeProc) {
				f.set(1, outside, 1, wc(1))
				f.set(2, 1, 2, wc(10))
				f.set(3, 2, 3, wc(100))
			}, []int{1, 2, 3}, wc(111), 3, ""},
			{"2 unreadable, 3 gone", func(f *fakeProc) {
				f.reap(3)
				f.write(2, "io", "garbage")
			}, []int{1, 2}, wc(111), 1, `procio: /proc/2/io: line 1: want "key: value", got "garbage"`},
			{"2 reaped by 1", func(f *fakeProc) {
				f.set(1, outside, 1, wc(1+10+100))
				f.reap(2)
			}, []int{1}, wc(111), 1, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runTracker(t, tt.since, tt.steps) })
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		errno unix.Errno
		want  readResult
	}{
		{0, readGone}, {unix.ENOENT, readGone}, {unix.ESRCH, readGone}, {unix.EACCES, readFailed}, {unix.EPERM, readFailed},
	} {
		if got := classify(tc.errno); got != tc.want {
			t.Errorf("classify(%v) = %v, want %v", tc.errno, got, tc.want)
		}
	}
}
