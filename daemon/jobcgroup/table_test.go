package jobcgroup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

const mountinfoV2 = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"

// TestMountTableFixture: a mountinfo that is not procfs's is read at every look.
func TestMountTableFixture(t *testing.T) {
	root := testenv.Files(t, map[string]string{"proc/self/mountinfo": mountinfoV2})
	mt := NewMountTable(hostfs.New(root), nil)
	defer mt.Close()
	for i, want := range []int{1, 2} {
		got, err := mt.Mounts()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("look %d: %d mounts %v, want %d", i, len(got), got, want)
		}
		testenv.Write(t, filepath.Join(root, "proc/self/mountinfo"), mountinfoV2+
			"31 1 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
	}
}

// TestMountTableFollowsTheKernel: with procfs's mountinfo the table is read again after
// the kernel said it changed, after MaxAge, or after Invalidate: a named cgroup v1
// hierarchy mounted and unmounted by the test is seen each time (the poll alone misses
// some changes on recent kernels).
func TestMountTableFollowsTheKernel(t *testing.T) {
	testenv.Root(t, "mounts a cgroup hierarchy")
	now := time.Now()
	mt := NewMountTable(hostfs.New("/"), func() time.Time { return now })
	defer mt.Close()
	before, err := mt.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b []Mount) bool {
		return slices.EqualFunc(a, b, func(a, b Mount) bool { return a.Key == b.Key && a.Path == b.Path })
	}
	if again, _ := mt.Mounts(); !same(again, before) {
		t.Fatalf("unchanged table read as %v, then %v", before, again)
	}
	dir := t.TempDir()
	has := func(ms []Mount) bool { return slices.ContainsFunc(ms, func(m Mount) bool { return m.Path == dir }) }
	if err := unix.Mount("none", dir, "cgroup", 0, "none,name=persyst_table_test"); err != nil {
		testenv.Unavailable(t, "cannot mount a named cgroup v1 hierarchy: "+err.Error())
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	now = now.Add(MaxAge)
	if mounted, err := mt.Mounts(); err != nil || !has(mounted) {
		t.Errorf("a minute after a hierarchy was mounted at %s: %v, %v", dir, mounted, err)
	}
	unix.Unmount(dir, unix.MNT_DETACH)
	mt.Invalidate()
	if after, err := mt.Mounts(); err != nil || has(after) {
		t.Errorf("after the hierarchy was unmounted from %s and Invalidate: %v, %v", dir, after, err)
	}
}

// TestSlurmMountsFollowsTheLayout: a named cgroup v1 hierarchy mounted by the test gets
// Slurm's layout (slurm_<node>); the hierarchies with it are looked for again after
// LayoutMaxAge or Invalidate, not at every call.
func TestSlurmMountsFollowsTheLayout(t *testing.T) {
	testenv.Root(t, "mounts a cgroup hierarchy")
	dir := t.TempDir()
	if err := unix.Mount("none", dir, "cgroup", 0, "none,name=persyst_layout_test"); err != nil {
		testenv.Unavailable(t, "cannot mount a named cgroup v1 hierarchy: "+err.Error())
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	now := time.Now()
	mt := NewMountTable(hostfs.New("/"), func() time.Time { return now })
	defer mt.Close()
	const node = "layoutnode"
	sm := NewSlurmMounts(mt, hostfs.New("/"), node)
	has := func() bool {
		t.Helper()
		ms, err := sm.Mounts()
		if err != nil || ms == nil {
			t.Fatalf("Mounts: %v, %v", ms, err)
		}
		return slices.ContainsFunc(ms, func(m Mount) bool { return m.Path == dir })
	}
	if has() {
		t.Fatal("a hierarchy without Slurm's layout counted")
	}
	ms, _ := sm.Mounts()
	none := len(ms) == 0 // no hierarchy of this machine has node's layout
	layout := filepath.Join(dir, "slurm_"+node)
	if err := os.Mkdir(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(layout)
	if has() {
		t.Error("the layout seen at once: looked for at every call")
	}
	if none {
		// Before the node's first layout it is looked for every LayoutNoneMaxAge.
		now = now.Add(LayoutNoneMaxAge)
		if !has() {
			t.Errorf("the first layout at %s not seen %v after it was made", layout, LayoutNoneMaxAge)
		}
		os.Remove(layout)
		now = now.Add(LayoutNoneMaxAge)
		if !has() {
			t.Error("the layout's removal seen after LayoutNoneMaxAge: looked for again while it had one")
		}
		if err := os.Mkdir(layout, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(LayoutMaxAge)
	if !has() {
		t.Errorf("the layout at %s not seen %v after it was made", layout, LayoutMaxAge)
	}
	os.Remove(layout)
	if !has() {
		t.Error("the layout's removal seen at once: looked for at every call")
	}
	sm.Invalidate()
	if has() {
		t.Errorf("the layout at %s still seen after it was removed and Invalidate", layout)
	}
}
