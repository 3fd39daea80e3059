package perfcg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/persyst/persyst/perfevents"
	"golang.org/x/sys/unix"
)

// ErrNotAvailable marks an event that could not be opened; the error also wraps the
// errno (errors.Is(err, unix.ENOENT) for "no PMU").
var ErrNotAvailable = errors.New("not available")

// DefaultLowCoverage is the running/enabled ratio below which a scaled value is
// flagged (Count.LowCoverage).
const DefaultLowCoverage = 0.5

// Count is one event on one CPU.
type Count struct {
	// Available is false when the event could not be opened on this CPU; then Err says
	// why and the numbers are meaningless (never report them as 0).
	Available bool
	Err       error
	Raw       uint64 // value as counted
	Enabled   uint64 // ns the event was enabled (in cgroup mode: the cgroup ran on the CPU)
	Running   uint64 // ns the event was actually on the PMU
	Scaled    uint64 // Raw × Enabled/Running (Raw if Running == Enabled, 0 if Enabled == 0)
	// Coverage is Running/Enabled (1 if Enabled == 0: nothing to miss).
	Coverage float64
	// LowCoverage: Coverage below the Group's threshold; Scaled is an extrapolation
	// (and with Running == 0 but Enabled > 0 there is nothing to extrapolate from).
	LowCoverage bool
}

// Counts is one Read: PerCPU[i][j] is event Events[j] on CPU CPUs[i].
type Counts struct {
	CPUs   []int
	Events []perfevents.Event
	PerCPU [][]Count
}

// Sum adds event j over all CPUs. The sum is Available only if the event is available
// on every CPU; Coverage is total running / total enabled; LowCoverage if any CPU's is.
func (c Counts) Sum(j int) Count {
	s := Count{Available: true}
	for i := range c.PerCPU {
		x := c.PerCPU[i][j]
		if !x.Available {
			return Count{Err: x.Err}
		}
		s.Raw += x.Raw
		s.Enabled += x.Enabled
		s.Running += x.Running
		s.Scaled += x.Scaled
		s.LowCoverage = s.LowCoverage || x.LowCoverage
	}
	s.Coverage = coverage(s.Enabled, s.Running)
	return s
}

// Index returns the position of the first event called name, or -1.
func (c Counts) Index(name string) int {
	for j, e := range c.Events {
		if e.Name == name {
			return j
		}
	}
	return -1
}

// scale returns raw × enabled/running, saturating at MaxUint64. With running == 0 the
// value cannot be extrapolated and raw (0 in practice) is returned.
func scale(raw, enabled, running uint64) uint64 {
	if running == 0 || running >= enabled {
		return raw
	}
	hi, lo := bits.Mul64(raw, enabled)
	if hi >= running {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, running)
	return q
}

func coverage(enabled, running uint64) float64 {
	if enabled == 0 {
		return 1
	}
	if running >= enabled {
		return 1
	}
	return float64(running) / float64(enabled)
}

func makeCount(raw, enabled, running uint64, low float64) Count {
	c := Count{Available: true, Raw: raw, Enabled: enabled, Running: running}
	c.Scaled = scale(raw, enabled, running)
	c.Coverage = coverage(enabled, running)
	c.LowCoverage = c.Coverage < low
	return c
}

// Read formats (perf_event_open(2), "Reading results").
const (
	singleFormat = unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING
	groupFormat  = singleFormat | unix.PERF_FORMAT_GROUP | unix.PERF_FORMAT_ID
)

// decodeSingle decodes {value, time_enabled, time_running}.
func decodeSingle(b []byte) (value, enabled, running uint64, err error) {
	if len(b) != 24 {
		return 0, 0, 0, fmt.Errorf("perf read: got %d bytes, want 24", len(b))
	}
	ne := binary.NativeEndian
	return ne.Uint64(b), ne.Uint64(b[8:]), ne.Uint64(b[16:]), nil
}

type idValue struct{ ID, Value uint64 }

// decodeGroup decodes {nr, time_enabled, time_running, {value, id} × nr} into vals
// (reused), returning the times.
func decodeGroup(b []byte, vals []idValue) (enabled, running uint64, out []idValue, err error) {
	if len(b) < 24 {
		return 0, 0, vals[:0], fmt.Errorf("perf group read: got %d bytes, want at least 24", len(b))
	}
	ne := binary.NativeEndian
	nr := ne.Uint64(b)
	if nr > uint64(len(b)) || uint64(len(b)) != 24+16*nr {
		return 0, 0, vals[:0], fmt.Errorf("perf group read: got %d bytes for %d events, want %d", len(b), nr, 24+16*nr)
	}
	enabled, running = ne.Uint64(b[8:]), ne.Uint64(b[16:])
	out = vals[:0]
	for k := uint64(0); k < nr; k++ {
		o := 24 + 16*k
		out = append(out, idValue{Value: ne.Uint64(b[o:]), ID: ne.Uint64(b[o+8:])})
	}
	return enabled, running, out, nil
}

// member is one opened event within a unit.
type member struct {
	event int // index into Group.events
	id    uint64
}

// softwareGroup is the group, per CPU, of the software events and tracepoints that the
// catalog does not group, in cgroup mode: one read(2) per CPU instead of one per event and
// CPU (software events are never multiplexed, so grouping them changes no value). An
// event of it that cannot be opened is left out alone; the next one leads the group.
const softwareGroup = "\x00software"

// groupName names the group of unit u in errors.
func (g *Group) groupName(u unit) string {
	if n := g.events[u.members[0].event].Group; n != "" {
		return n
	}
	return "of software events"
}

// unit is what one read(2) returns: a single event, or a perf group via its leader.
type unit struct {
	fd      int
	cpu     int // index into Group.cpus
	grouped bool
	members []member
}

// Group is a set of perf counters for one cgroup on a set of CPUs.
type Group struct {
	cgroupDir string
	cpus      []int
	events    []perfevents.Event
	// LowCoverage is the running/enabled threshold for Count.LowCoverage.
	LowCoverage float64
	units       []unit
	fds         []int
	errs        [][]error // [cpu][event]; nil when open
	buf         []byte
	vals        []idValue
	closed      bool
}

// Open opens events for the cgroup directory cgroupDir (a cgroup v2 directory or a v1
// perf_event directory) on each of cpus. Tracepoint events must be resolved (FS.Resolve)
// first. Events that cannot be opened are not an error: their Counts are marked not
// Available with the reason (see Unavailable). Open fails only for bad arguments or an
// unopenable cgroup directory.
func Open(cgroupDir string, cpus []int, events []perfevents.Event) (*Group, error) {
	if len(cpus) == 0 {
		return nil, fmt.Errorf("perf open %s: no CPUs", cgroupDir)
	}
	for _, c := range cpus {
		if c < 0 {
			return nil, fmt.Errorf("perf open %s: CPU %d: cgroup mode needs a CPU >= 0", cgroupDir, c)
		}
	}
	cg, err := unix.Open(cgroupDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("perf open: cgroup %s: %w", cgroupDir, err)
	}
	// The kernel holds its own reference to the cgroup once the events are open.
	defer unix.Close(cg)
	return open(target{name: cgroupDir, pid: cg, flags: unix.PERF_FLAG_PID_CGROUP}, cpus, events)
}

// OpenProcess counts events for process pid and every process it starts afterwards
// (inherit), per CPU. This is what an unprivileged user can count (`persyst run` as
// non-root): children's counts are added to the returned values when they exit. Grouped
// events are opened singly: the kernel cannot read an inherited group as one.
func OpenProcess(pid int, cpus []int, events []perfevents.Event) (*Group, error) {
	if len(cpus) == 0 || pid <= 0 {
		return nil, fmt.Errorf("perf open pid %d: no CPUs or bad pid", pid)
	}
	single := make([]perfevents.Event, len(events))
	for i, e := range events {
		e.Group = ""
		single[i] = e
	}
	return open(target{name: fmt.Sprintf("pid %d", pid), pid: pid, inherit: true}, cpus, single)
}

// target is what events count: a cgroup (pid is the directory fd) or a process.
type target struct {
	name    string
	pid     int
	flags   int
	inherit bool
}

func open(t target, cpus []int, events []perfevents.Event) (*Group, error) {
	g := &Group{
		cgroupDir:   t.name,
		cpus:        append([]int(nil), cpus...),
		events:      append([]perfevents.Event(nil), events...),
		LowCoverage: DefaultLowCoverage,
		errs:        make([][]error, len(cpus)),
	}
	maxGroup := 1
	for i, cpu := range cpus {
		n, err := g.openCPU(t, i, cpu)
		if err != nil {
			g.Close()
			return nil, err
		}
		maxGroup = max(maxGroup, n)
	}
	// Drop placeholder units of failed leaders.
	kept := g.units[:0]
	for _, u := range g.units {
		if u.fd >= 0 {
			kept = append(kept, u)
		}
	}
	g.units = kept
	g.buf = make([]byte, 24+16*maxGroup)
	g.vals = make([]idValue, 0, maxGroup)
	return g, nil
}

// openCPU opens g's events on CPU cpu (the i-th of g.cpus), each alone or in its group,
// and starts the groups; it returns the size of the largest group. An event that cannot
// be opened is recorded in g.errs; the error is one that leaves g unusable.
func (g *Group) openCPU(t target, i, cpu int) (int, error) {
	maxGroup := 1
	g.errs[i] = make([]error, len(g.events))
	leaders := map[string]int{} // group name → index into g.units
	for j, e := range g.events {
		if e.Kind == perfevents.Tracepoint && e.Config == 0 {
			g.errs[i][j] = fmt.Errorf("%s: %w: tracepoint id not resolved", e.Name, ErrNotAvailable)
			continue
		}
		grp := e.Group
		implicit := grp == "" && !t.inherit && (e.Kind == perfevents.Software || e.Kind == perfevents.Tracepoint)
		if implicit {
			grp = softwareGroup
		}
		if grp == "" {
			fd, err := openEvent(e, t, cpu, -1, singleFormat, false)
			if err != nil {
				g.errs[i][j] = notAvailable(e, cpu, err)
				continue
			}
			g.fds = append(g.fds, fd)
			g.units = append(g.units, unit{fd: fd, cpu: i, members: []member{{event: j}}})
			continue
		}
		u, isMember := leaders[grp]
		if isMember && g.units[u].fd < 0 {
			// The leader failed: the whole group is unavailable for the same reason.
			g.errs[i][j] = g.errs[i][g.units[u].members[0].event]
			continue
		}
		leaderFD := -1
		if isMember {
			leaderFD = g.units[u].fd
		}
		fd, err := openEvent(e, t, cpu, leaderFD, groupFormat, !isMember)
		if err != nil {
			g.errs[i][j] = notAvailable(e, cpu, err)
			if !isMember && !implicit { // a failed event leads no implicit group: the next one does
				leaders[grp] = len(g.units)
				g.units = append(g.units, unit{fd: -1, cpu: i, grouped: true, members: []member{{event: j}}})
			}
			continue
		}
		g.fds = append(g.fds, fd)
		id, err := eventID(fd)
		if err != nil {
			return 0, fmt.Errorf("perf open %s: %s on CPU %d: PERF_EVENT_IOC_ID: %w", g.cgroupDir, e.Name, cpu, err)
		}
		if !isMember {
			leaders[grp] = len(g.units)
			g.units = append(g.units, unit{fd: fd, cpu: i, grouped: true, members: []member{{event: j, id: id}}})
		} else {
			g.units[u].members = append(g.units[u].members, member{event: j, id: id})
			maxGroup = max(maxGroup, len(g.units[u].members))
		}
	}
	// Start the groups now that all members are in.
	for _, u := range g.units {
		if u.grouped && u.cpu == i && u.fd >= 0 {
			if err := unix.IoctlSetInt(u.fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
				return 0, fmt.Errorf("perf open %s: enable group on CPU %d: %w", g.cgroupDir, cpu, err)
			}
		}
	}
	return maxGroup, nil
}

func openEvent(e perfevents.Event, t target, cpu, groupFD int, format uint64, disabled bool) (int, error) {
	attr := unix.PerfEventAttr{
		Type:        e.Type,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config:      e.Config,
		Read_format: format,
	}
	if disabled {
		attr.Bits |= unix.PerfBitDisabled
	}
	if t.inherit {
		// Unprivileged users may count only user space (kernel.perf_event_paranoid 2).
		attr.Bits |= unix.PerfBitInherit | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv
	}
	fd, err := unix.PerfEventOpen(&attr, t.pid, cpu, groupFD, t.flags|unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil || e.Filter == "" {
		return fd, err
	}
	// An event whose filter the kernel refuses would count more than its name says.
	if err := unix.IoctlSetString(fd, unix.PERF_EVENT_IOC_SET_FILTER, e.Filter); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("filter %q refused: %w", e.Filter, err)
	}
	return fd, nil
}

func eventID(fd int) (uint64, error) {
	var id uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.PERF_EVENT_IOC_ID), uintptr(unsafe.Pointer(&id)))
	if errno != 0 {
		return 0, errno
	}
	return id, nil
}

// notAvailable wraps an open error with ErrNotAvailable, the errno and a human reason.
func notAvailable(e perfevents.Event, cpu int, err error) error {
	return fmt.Errorf("%s (%s) on CPU %d: %w: %w (%s)", e.Name, e.Kind, cpu, ErrNotAvailable, err, reason(e, err))
}

// reason explains a perf_event_open errno.
func reason(e perfevents.Event, err error) string {
	switch {
	case errors.Is(err, unix.ENOENT):
		if e.Kind == perfevents.Hardware {
			return "no PMU for this event (typical in VMs)"
		}
		return "event not supported by this kernel"
	case errors.Is(err, unix.ENODEV):
		return "no such PMU / CPU"
	case errors.Is(err, unix.EOPNOTSUPP):
		return "not supported by the PMU or in cgroup mode"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return "permission denied: needs root or CAP_PERFMON, or a lower kernel.perf_event_paranoid"
	case errors.Is(err, unix.EBADF):
		return "cgroup directory is not on a perf_event capable hierarchy (cgroup v1 without perf_event?)"
	case errors.Is(err, unix.EINVAL):
		return "invalid event or attribute for this kernel"
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
		return "out of file descriptors"
	case errors.Is(err, unix.ENOSPC):
		return "no hardware counter / breakpoint slot left"
	}
	return "perf_event_open failed"
}

// Events returns the events the Group was opened with (Counts.Events order).
func (g *Group) Events() []perfevents.Event { return g.events }

// Counters returns how many perf counters the group holds open (0 once closed).
func (g *Group) Counters() int {
	if g.closed {
		return 0
	}
	return len(g.fds)
}

// CPUs returns the CPUs the Group counts on.
func (g *Group) CPUs() []int { return g.cpus }

// Unavailable maps the name of each event that could not be opened on at least one CPU
// to the first reason.
func (g *Group) Unavailable() map[string]error {
	out := map[string]error{}
	for i := range g.errs {
		for j, err := range g.errs[i] {
			if err != nil {
				if _, ok := out[g.events[j].Name]; !ok {
					out[g.events[j].Name] = err
				}
			}
		}
	}
	return out
}

// Read reads all counters (cumulative since Open).
func (g *Group) Read() (Counts, error) {
	var c Counts
	err := g.ReadInto(&c)
	return c, err
}

// ReadInto is Read into c, reusing its arrays when they have the group's shape (a caller
// that reads every cycle keeps two Counts and alternates). On error c holds nothing.
func (g *Group) ReadInto(c *Counts) error {
	if g.closed {
		*c = Counts{}
		return fmt.Errorf("perf read %s: group closed", g.cgroupDir)
	}
	if len(c.PerCPU) != len(g.cpus) || len(g.cpus) > 0 && len(c.PerCPU[0]) != len(g.events) {
		c.PerCPU = make([][]Count, len(g.cpus))
		flat := make([]Count, len(g.cpus)*len(g.events))
		for i := range g.cpus {
			c.PerCPU[i] = flat[i*len(g.events) : (i+1)*len(g.events) : (i+1)*len(g.events)]
		}
	}
	c.CPUs, c.Events = g.cpus, g.events
	for i := range g.cpus {
		for j := range g.events {
			c.PerCPU[i][j] = Count{Err: g.errs[i][j]}
		}
	}
	if err := g.read(c); err != nil {
		*c = Counts{}
		return err
	}
	return nil
}

func (g *Group) read(c *Counts) error {
	for _, u := range g.units {
		want := 24
		if u.grouped {
			want = 24 + 16*len(u.members)
		}
		n, err := unix.Read(u.fd, g.buf[:want])
		if err != nil {
			return fmt.Errorf("perf read %s: %s on CPU %d: %w", g.cgroupDir, g.events[u.members[0].event].Name, g.cpus[u.cpu], err)
		}
		row := c.PerCPU[u.cpu]
		if !u.grouped {
			v, en, run, err := decodeSingle(g.buf[:n])
			if err != nil {
				return fmt.Errorf("perf read %s: %s on CPU %d: %w", g.cgroupDir, g.events[u.members[0].event].Name, g.cpus[u.cpu], err)
			}
			row[u.members[0].event] = makeCount(v, en, run, g.LowCoverage)
			continue
		}
		en, run, vals, err := decodeGroup(g.buf[:n], g.vals)
		g.vals = vals
		if err != nil {
			return fmt.Errorf("perf read %s: group %s on CPU %d: %w", g.cgroupDir, g.groupName(u), g.cpus[u.cpu], err)
		}
		if err := fillGroup(row, u.members, en, run, vals, g.LowCoverage); err != nil {
			return fmt.Errorf("perf read %s: group %s on CPU %d: %w", g.cgroupDir, g.groupName(u), g.cpus[u.cpu], err)
		}
	}
	return nil
}

// fillGroup stores a decoded group read into row, matching values to members by id.
func fillGroup(row []Count, members []member, enabled, running uint64, vals []idValue, low float64) error {
	for _, m := range members {
		found := false
		for _, v := range vals {
			if v.ID == m.id {
				row[m.event] = makeCount(v.Value, enabled, running, low)
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("no value for event id %d", m.id)
		}
	}
	return nil
}

// Close closes all perf fds. It is safe to call more than once.
func (g *Group) Close() error {
	var errs []error
	for _, fd := range g.fds {
		if err := unix.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("perf close %s: fd %d: %w", g.cgroupDir, fd, err))
		}
	}
	g.fds, g.units, g.closed = nil, nil, true
	return errors.Join(errs...)
}
