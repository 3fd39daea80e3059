package measure

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// Whether Slurm held the job suspended (scontrol suspend, gang scheduling, PreemptMode=
// SUSPEND): slurmstepd stops the tasks and freezes the step's cgroup (cgroup v1: the
// freezer controller's freezer.state, FROZEN; cgroup v2: cgroup.freeze in the step's
// user cgroup, whose cgroup.events says "frozen 1"). An interval is counted suspended
// when the job was frozen at its start: the node daemon reads the job again as soon as
// it sees it frozen or thawed (SuspendWatch), so that intervals begin and end with the
// suspension, to within that watch's period. Slurm stops the tasks with SIGTSTP
// suspendGrace before it freezes them (slurmstepd's suspend_grace_time): the interval
// that ends at a freeze counts suspendGrace as suspended, which may be longer than the
// interval (the stretch then begins before it; sample.AddSuspended).
var suspendRegistration = Registration{Name: "suspend", Default: true, New: newSuspend,
	Metrics: vocabulary(sample.SuspendedSeconds)}

// suspendGrace is the time between Slurm's SIGTSTP to a job's tasks and the freeze of
// their cgroups: slurmstepd's default suspend_grace_time (PreemptParameters=
// suspend_grace_time=N sets another; the stretch stated is then off by the difference).
const suspendGrace = 2 * time.Second

type suspendSource struct {
	frozen bool // at the previous read
}

func newSuspend(*Env, *Spec) (Source, error) { return &suspendSource{}, nil }

func (s *suspendSource) Read(r *Read) error {
	frozen, known := r.freezer.Frozen(r.Spec.StatCgroups, r.Spec.OwnCgroup)
	if r.Reason != sample.Start {
		switch {
		case s.frozen:
			r.Sample.Job[sample.SuspendedSeconds] = r.Sample.Seconds
		case known && frozen:
			// The suspension began suspendGrace ago, maybe before this interval did
			// (intervals already taken were counted running): as a counter, the
			// suspended time not yet counted.
			r.Sample.Job[sample.SuspendedSeconds] = suspendGrace.Seconds()
		case known:
			r.Sample.Job[sample.SuspendedSeconds] = 0
		default:
			r.NotMeasured(sample.SuspendedSeconds, "no freezer cgroup of the job (cgroup v1 without the freezer controller)")
		}
	}
	s.frozen = frozen
	return nil
}

func (s *suspendSource) Close() error { return nil }

// maxFreezerSteps bounds how many step cgroups of one job are looked at.
const maxFreezerSteps = 64

// Freezer says whether Slurm has frozen one of a job's steps, from the job's cgroup
// directories by hierarchy key (Spec.StatCgroups). It keeps the directories and their
// steps' state files open between looks (the suspend watch looks every second): a look
// is one fstat of each directory and one pread of each file; the steps are listed again
// only when a directory's count of subdirectories changed (cgroupfs counts them in its
// link count) or a step's file went. It is safe for concurrent use.
type Freezer struct {
	host hostfs.FS
	mu   sync.Mutex
	dirs []*freezeDir
	buf  []byte
}

// freezeDir is one cgroup directory of the job and the state files that say whether it
// or a step below it is frozen.
type freezeDir struct {
	key, dir string
	v2       bool
	fd       *os.File   // the directory
	nlink    uint64     // its link count when the steps were listed
	files    []*os.File // the steps' state files, then the directory's own
}

// NewFreezer returns a Freezer of the cgroups under host.
func NewFreezer(h hostfs.FS) *Freezer { return &Freezer{host: h, buf: make([]byte, 4096)} }

// Frozen says whether one of the job's steps is frozen, from its cgroups by hierarchy key,
// but for own (persyst's cgroup of the job, Spec.OwnCgroup: Slurm never freezes it);
// known is false when the job has no cgroup that could say (cgroup v1 without a freezer
// hierarchy).
func (f *Freezer) Frozen(cgroups map[string]string, own string) (frozen, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sync(cgroups, own)
	for _, d := range f.dirs {
		known = true
		if f.dirFrozen(d) {
			return true, true
		}
	}
	return false, known
}

// sync keeps a freezeDir for each cgroup directory that can say, and no other.
func (f *Freezer) sync(cgroups map[string]string, own string) {
	keep := f.dirs[:0]
	for _, d := range f.dirs {
		if cgroups[d.key] == d.dir && d.dir != own {
			keep = append(keep, d)
		} else {
			d.close()
		}
	}
	f.dirs = keep
	for key, dir := range cgroups {
		v2 := key == "unified"
		if !v2 && !strings.Contains(","+key+",", ",freezer,") || dir == own {
			continue
		}
		if !slices.ContainsFunc(f.dirs, func(d *freezeDir) bool { return d.key == key }) {
			f.dirs = append(f.dirs, &freezeDir{key: key, dir: dir, v2: v2})
		}
	}
}

// dirFrozen reads d's state files, listing its steps again first if they may have changed.
func (f *Freezer) dirFrozen(d *freezeDir) bool {
	if !d.current() {
		d.list(f.host)
	}
	for _, file := range d.files {
		n, err := file.ReadAt(f.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			d.nlink = 0 // the step went: list them again at the next look
			continue
		}
		if stateFrozen(d.v2, f.buf[:n]) {
			return true
		}
	}
	return false
}

// current says whether the steps listed are still those of the directory.
func (d *freezeDir) current() bool {
	if d.fd == nil || d.nlink == 0 {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.fd.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Nlink) == d.nlink
}

// list opens the directory and the state files of its steps (at most maxFreezerSteps)
// and its own.
func (d *freezeDir) list(h hostfs.FS) {
	d.close()
	fd, err := os.Open(h.Path(d.dir))
	if err != nil {
		return
	}
	d.fd = fd
	var st unix.Stat_t
	if err := unix.Fstat(int(fd.Fd()), &st); err == nil {
		d.nlink = uint64(st.Nlink)
	}
	ents, _ := fd.ReadDir(-1)
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "step_") {
			continue
		}
		if n++; n > maxFreezerSteps {
			break
		}
		step := filepath.Join(d.dir, e.Name())
		if d.v2 {
			d.open(h, filepath.Join(step, "user", "cgroup.events"))
			d.open(h, filepath.Join(step, "cgroup.events"))
		} else {
			d.open(h, filepath.Join(step, "freezer.state"))
		}
	}
	if d.v2 {
		d.open(h, filepath.Join(d.dir, "cgroup.events"))
	} else {
		d.open(h, filepath.Join(d.dir, "freezer.state"))
	}
}

func (d *freezeDir) open(h hostfs.FS, file string) {
	if f, err := os.Open(h.Path(file)); err == nil {
		d.files = append(d.files, f)
	}
}

func (d *freezeDir) close() {
	for _, f := range d.files {
		f.Close()
	}
	d.files = d.files[:0]
	if d.fd != nil {
		d.fd.Close()
		d.fd = nil
	}
	d.nlink = 0
}

// Close closes every file kept open.
func (f *Freezer) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.dirs {
		d.close()
	}
	f.dirs = nil
	return nil
}

// OpenFiles is how many files the Freezer keeps open.
func (f *Freezer) OpenFiles() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, d := range f.dirs {
		n += len(d.files)
		if d.fd != nil {
			n++
		}
	}
	return n
}

// stateFrozen reads a state file: cgroup v2's cgroup.events ("frozen 1"), v1's
// freezer.state (FROZEN, or FREEZING on the way). It allocates nothing: every measured
// job's files are read every second.
func stateFrozen(v2 bool, b []byte) bool {
	if !v2 {
		st := bytes.TrimSpace(b)
		return string(st) == "FROZEN" || string(st) == "FREEZING"
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if k, v, ok := bytes.Cut(line, []byte{' '}); ok && string(k) == "frozen" {
			return string(bytes.TrimSpace(v)) == "1"
		}
	}
	return false
}
