package jobcgroup

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
)

// MountTable is the cgroup hierarchies mounted in this mount namespace, read again when
// the kernel says the mount table changed (it keeps /proc/self/mountinfo open and polls
// it: proc(5), POLLPRI and POLLERR once the table changed since the last poll), when
// the last read is MaxAge old (the poll misses some changes on recent kernels), or after
// Invalidate. A node daemon looks at the table every cycle; reading and parsing it each
// time was most of an idle daemon's CPU at a 1 s cycle. A mountinfo that is not
// procfs's (a test's fixture) is read every time. It is safe for concurrent use.
type MountTable struct {
	h      hostfs.FS
	now    func() time.Time
	mu     sync.Mutex
	f      *os.File
	proc   bool // f is procfs's mountinfo, whose poll says when it changed
	read   time.Time
	mounts []Mount
}

// MaxAge is the longest a MountTable answers from its last read.
const MaxAge = time.Minute

// NewMountTable returns the mount table under h, timed by now (nil: time.Now); it reads
// it at the first Mounts.
func NewMountTable(h hostfs.FS, now func() time.Time) *MountTable {
	if now == nil {
		now = time.Now
	}
	return &MountTable{h: h, now: now}
}

// Invalidate makes the next Mounts read the table (a caller that did not find there
// what it looked for).
func (t *MountTable) Invalidate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.read = time.Time{}
}

// Mounts returns the cgroup hierarchies mounted now.
func (t *MountTable) Mounts() ([]Mount, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.f != nil && t.proc && !t.changed() && !t.read.IsZero() && now.Sub(t.read) < MaxAge {
		return slices.Clone(t.mounts), nil
	}
	p := t.h.Path("proc/self/mountinfo")
	if t.f == nil {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		var st unix.Statfs_t
		t.f, t.proc = f, unix.Fstatfs(int(f.Fd()), &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
		if t.proc {
			t.changed() // the poll says "changed" once after the open
		}
	} else if _, err := t.f.Seek(0, io.SeekStart); err != nil {
		t.close()
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	m, err := parseMountinfo(t.f)
	if err != nil {
		t.close()
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	t.mounts, t.read = m, now
	return slices.Clone(m), nil
}

// changed polls the open mountinfo without waiting.
func (t *MountTable) changed() bool {
	fds := []unix.PollFd{{Fd: int32(t.f.Fd()), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, 0)
	return err != nil || n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR|unix.POLLNVAL) != 0
}

func (t *MountTable) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}

// Close closes the mountinfo kept open.
func (t *MountTable) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.close()
	return nil
}
