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
	m, _, err := t.mountsRead()
	return m, err
}

// mountsRead is Mounts and when the table was read.
func (t *MountTable) mountsRead() ([]Mount, time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.f != nil && t.proc && !t.changed() && !t.read.IsZero() && now.Sub(t.read) < MaxAge {
		return slices.Clone(t.mounts), t.read, nil
	}
	p := t.h.Path("proc/self/mountinfo")
	if t.f == nil {
		f, err := os.Open(p)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("read %s: %w", p, err)
		}
		var st unix.Statfs_t
		t.f, t.proc = f, unix.Fstatfs(int(f.Fd()), &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
		if t.proc {
			t.changed() // the poll says "changed" once after the open
		}
	} else if _, err := t.f.Seek(0, io.SeekStart); err != nil {
		t.close()
		return nil, time.Time{}, fmt.Errorf("read %s: %w", p, err)
	}
	m, err := parseMountinfo(t.f)
	if err != nil {
		t.close()
		return nil, time.Time{}, fmt.Errorf("read %s: %w", p, err)
	}
	t.mounts, t.read = m, now
	return slices.Clone(m), now, nil
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

// SlurmMounts are the hierarchies of a MountTable where Slurm's layout is on a node
// (WithSlurm), looked for again when the table was read again or LayoutMaxAge after the
// last look: a daemon at a 1 s cycle would otherwise stat every hierarchy's Slurm
// directories every second, most of an idle daemon's CPU. A job's own start does not
// wait for them (Find reads the mounts afresh). It is safe for concurrent use.
type SlurmMounts struct {
	table  *MountTable
	h      hostfs.FS
	node   string
	mu     sync.Mutex
	read   time.Time // the table's read the last look was made on
	looked time.Time
	mounts []Mount
}

// LayoutMaxAge is the longest SlurmMounts answers from its last look; LayoutNoneMaxAge
// where that look found Slurm's layout on no hierarchy (a node before its first job, on
// which slurmd makes it): a job on a node whose slurmd does not load the plugin is
// reported unannounced within a cycle and the grace time of its start, which a layout
// seen up to 10 s late would delay by as much.
const (
	LayoutMaxAge     = 10 * time.Second
	LayoutNoneMaxAge = time.Second
)

// NewSlurmMounts returns the hierarchies of table under h where node's Slurm layout is.
func NewSlurmMounts(table *MountTable, h hostfs.FS, node string) *SlurmMounts {
	return &SlurmMounts{table: table, h: h, node: node}
}

// Invalidate makes the next Mounts look again (a step started or ended: Slurm may have
// made its layout on another hierarchy for it).
func (s *SlurmMounts) Invalidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mounts = nil
}

// Mounts returns the hierarchies where Slurm's layout is (empty, not nil, where none).
func (s *SlurmMounts) Mounts() ([]Mount, error) {
	all, read, err := s.table.mountsRead()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.table.now()
	maxAge := LayoutMaxAge
	if len(s.mounts) == 0 {
		maxAge = LayoutNoneMaxAge
	}
	if s.mounts == nil || !read.Equal(s.read) || now.Sub(s.looked) >= maxAge || now.Before(s.looked) {
		s.mounts = WithSlurm(s.h, all, s.node)
		if s.mounts == nil {
			s.mounts = []Mount{}
		}
		s.read, s.looked = read, now
	}
	return slices.Clone(s.mounts), nil
}
