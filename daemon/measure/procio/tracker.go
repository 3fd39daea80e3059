package procio

import (
	"errors"

	"github.com/persyst/persyst/hostfs"
)

// Tracker follows a set of processes across reads and keeps their cumulative I/O,
// including what exited processes did (see the package documentation for the rules).
// It is not safe for concurrent use.
type Tracker struct {
	since uint64 // TrackerOptions.Since
	rd    pidReader
	procs map[int]*proc // tracked processes by pid
	total IO
	gen   uint64 // Update counter

	// Scratch space reused across Updates.
	extra   []int       // tracked pids not in the list passed to Update
	gone    []goneProc  // processes found gone in this Update
	goneIdx map[int]int // pid → index in gone
	errs    []error
}

// proc is a tracked process.
type proc struct {
	start uint64 // starttime: with the pid, the process's identity
	ppid  int    // parent as of the last read
	last  IO     // counters already counted (per-field high-water mark)
	delta IO     // raw difference found by the Update with gen == read
	sub   IO     // reaped descendants' counters to subtract (pending until a read)
	tried uint64 // gen of the last Update that tried to read it
	read  uint64 // gen of the last Update that read it
}

// goneProc is a process found gone, as last read.
type goneProc struct {
	pid, ppid int
	start     uint64
	last      IO // what its reaper absorbed and we counted already
}

// TrackerOptions say which processes count from their birth.
type TrackerOptions struct {
	// Since is when the measured work began, in clock ticks after boot (the unit of
	// /proc/PID/stat's starttime; see Ticks). A process born at or after it belongs to
	// the work wholly and counts everything it did, also before the Update that first
	// sees it. One born before it (already running when the work began: a process
	// restored after a daemon restart, one moved into the set from outside) counts what
	// it does after that first Update. 0: every process counts from its birth.
	Since uint64
}

// NewTracker returns a Tracker reading <root>/proc.
func NewTracker(h hostfs.FS, o TrackerOptions) *Tracker {
	return &Tracker{
		since:   o.Since,
		rd:      newPidReader(h.Root()),
		procs:   map[int]*proc{},
		goneIdx: map[int]int{},
	}
}

// Update reads /proc/PID/stat and /proc/PID/io of every pid in pids and of every process
// tracked before, and returns the cumulative I/O of the process set since tracking began
// (never decreasing) and the number of processes read. err joins the per-process failures
// other than exits (permission denied, malformed content, each naming its file); total
// still counts everything that could be read.
func (t *Tracker) Update(pids []int) (total IO, nprocs int, err error) {
	t.gen++
	t.errs = t.errs[:0]
	t.gone = t.gone[:0]
	clear(t.goneIdx)

	for _, pid := range pids {
		t.visit(pid)
	}
	t.extra = t.extra[:0]
	for pid, p := range t.procs {
		if p.tried != t.gen {
			t.extra = append(t.extra, pid)
		}
	}
	for _, pid := range t.extra {
		t.visit(pid)
	}

	for i := range t.gone {
		if a := t.absorber(&t.gone[i]); a != nil {
			a.sub = a.sub.Add(t.gone[i].last)
		}
	}
	for _, p := range t.procs {
		if p.read != t.gen {
			continue
		}
		nprocs++
		// Capped per field at the raw delta by the saturating Sub.
		t.total = t.total.Add(p.delta.Sub(p.sub))
		p.sub = IO{}
	}
	if len(t.errs) > 0 {
		err = errors.Join(t.errs...)
	}
	return t.total, nprocs, err
}

// OpenFiles returns how many descriptors the tracker keeps open (two per process, at most
// MaxKeptPIDs processes).
func (t *Tracker) OpenFiles() int { return 2 * len(t.rd.kept) }

// Close closes the files kept open; the tracker can still be updated (reading every
// process anew each time).
func (t *Tracker) Close() error {
	t.rd.close()
	return nil
}

// visit reads one pid and updates its entry.
func (t *Tracker) visit(pid int) {
	p := t.procs[pid]
	if p != nil && p.tried == t.gen {
		return // listed twice
	}
	st, cur, res, err := t.rd.read(pid)
	switch res {
	case readGone:
		t.rd.forget(pid)
		if p != nil {
			t.markGone(pid, p)
		}
		return
	case readFailed:
		t.errs = append(t.errs, err)
		if p != nil {
			p.tried = t.gen // stays tracked; counted when readable again
		}
		return
	}
	if p != nil && p.start != st.StartTime {
		t.markGone(pid, p) // pid reused: the process we knew is gone
		p = nil
	}
	if p == nil {
		p = &proc{start: st.StartTime, delta: cur, last: cur}
		if st.StartTime < t.since {
			p.delta = IO{} // older than the work: what it did before is not the work's
		}
		t.procs[pid] = p
	} else {
		p.delta = cur.Sub(p.last)
		p.last = p.last.max(cur)
	}
	p.ppid = st.PPID
	p.tried, p.read = t.gen, t.gen
}

func (t *Tracker) markGone(pid int, p *proc) {
	t.goneIdx[pid] = len(t.gone)
	// Its reaper absorbs all p ever had: the counters we counted (last) and those of
	// children p reaped since its last successful read (sub, still pending).
	t.gone = append(t.gone, goneProc{pid: pid, ppid: p.ppid, start: p.start, last: p.last.Add(p.sub)})
	delete(t.procs, pid)
}

// absorber returns the tracked process that reaped g (directly, or through ancestors that
// are gone too), or nil if there is none. A parent is never younger than its child, which
// tells a reused pid from the real parent.
func (t *Tracker) absorber(g *goneProc) *proc {
	c := g
	for range len(t.gone) + 1 {
		pp := c.ppid
		if pp <= 0 {
			return nil
		}
		if a := t.procs[pp]; a != nil && a.start <= c.start && a.tried == t.gen {
			return a
		}
		j, ok := t.goneIdx[pp]
		if !ok || t.gone[j].start > c.start {
			return nil
		}
		c = &t.gone[j]
	}
	return nil // a cycle: cannot happen with real parent links
}
