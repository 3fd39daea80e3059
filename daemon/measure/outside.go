package measure

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// What happened on the node outside the job, for telling the job's own slowness from
// interference (digest: "was it my code or the system?"): the CPU time its CPUs spent on
// anything (the job's own subtracted, what is left is other work on them: other jobs,
// daemons, the hypervisor's steal), and the node's I/O and memory pressure stall
// (/proc/pressure, whoever caused it).
var outsideRegistration = Registration{Name: "outside", Default: true, New: newOutside,
	Metrics: vocabulary(sample.NodeCPUsBusySeconds, sample.NodeCPUsStealSeconds, sample.NodeIOPressureSeconds, sample.NodeMemPressureSeconds)}

// NodeView reads the node-wide files every job's outside source needs, once for all
// jobs read at about the same time (the cycle reads every job within milliseconds). It
// keeps them open (hostfs.Kept) until Close.
type NodeView struct {
	now func() time.Time

	mu    sync.Mutex
	files nodeFiles
	at    time.Time
	last  nodeNow
}

// nodeNow is one read of the node: busy and steal seconds per CPU (-1: offline), pressure
// stall totals in seconds, and why any could not be read.
type nodeNow struct {
	busy              []hostfs.CPUTimes
	busyErr           error
	ioStall, memStall float64
	ioErr, memErr     error
}

// nodeViewShare is how old a node read may be and still be handed to another job.
const nodeViewShare = 100 * time.Millisecond

// NewNodeView returns the node reader of a daemon or `persyst run`.
func NewNodeView(host hostfs.FS, now func() time.Time) *NodeView {
	if now == nil {
		now = time.Now
	}
	return &NodeView{now: now, files: newNodeFiles(host)}
}

func (v *NodeView) read() nodeNow {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := v.now()
	if !v.at.IsZero() && t.Sub(v.at) >= 0 && t.Sub(v.at) < nodeViewShare {
		return v.last
	}
	v.at, v.last = t, v.files.read()
	return v.last
}

// Close closes the node's files; a later read opens them again.
func (v *NodeView) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.files.close()
}

// nodeFiles are the node-wide files: /proc/stat and the node's I/O and memory pressure.
type nodeFiles struct{ stat, io, mem *hostfs.Kept }

func newNodeFiles(h hostfs.FS) nodeFiles {
	return nodeFiles{stat: hostfs.NewKept(h.Path("proc/stat")),
		io: hostfs.NewKept(h.Path("proc/pressure/io")), mem: hostfs.NewKept(h.Path("proc/pressure/memory"))}
}

func (f nodeFiles) read() nodeNow {
	var n nodeNow
	n.busy, n.busyErr = cpuBusy(f.stat)
	n.ioStall, n.ioErr = nodeStall(f.io)
	n.memStall, n.memErr = nodeStall(f.mem)
	return n
}

func (f nodeFiles) close() error {
	return errors.Join(f.stat.Close(), f.io.Close(), f.mem.Close())
}

// cpuBusy is the time each CPU has been busy since boot, and stolen (hostfs.ParseCPUTimes).
func cpuBusy(k *hostfs.Kept) ([]hostfs.CPUTimes, error) {
	b, err := k.Read()
	if err != nil {
		return nil, err
	}
	busy, err := hostfs.ParseCPUTimes(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", k.Path(), err)
	}
	return busy, nil
}

// nodeStall is the node's "some" stall time of a resource since boot, in seconds.
func nodeStall(k *hostfs.Kept) (float64, error) {
	b, err := k.Read()
	if err != nil {
		return 0, fmt.Errorf("no pressure stall information (kernel before 4.20, or booted with psi=0): %w", err)
	}
	some, _, _, err := cgstats.ParsePressure(b)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", k.Path(), err)
	}
	return float64(some.TotalUs) / 1e6, nil
}

type outsideSource struct {
	view *NodeView
	host hostfs.FS
	prev nodeNow
	cpus []int
	have bool
}

func newOutside(env *Env, spec *Spec) (Source, error) {
	return &outsideSource{view: env.Node, host: env.Host}, nil
}

func (o *outsideSource) Read(r *Read) error {
	var cur nodeNow
	if o.view != nil {
		cur = o.view.read()
	} else {
		f := newNodeFiles(o.host)
		cur = f.read()
		_ = f.close()
	}
	cpus := r.Spec.CPUs
	if o.have && r.Reason != sample.Start {
		o.counter(r, sample.NodeIOPressureSeconds, cur.ioStall, o.prev.ioStall, cur.ioErr, o.prev.ioErr)
		o.counter(r, sample.NodeMemPressureSeconds, cur.memStall, o.prev.memStall, cur.memErr, o.prev.memErr)
		why := ""
		switch {
		case cur.busyErr != nil:
			why = cur.busyErr.Error()
		case o.prev.busyErr != nil:
			why = o.prev.busyErr.Error()
		case len(cpus) == 0:
			why = "the job's CPUs are not known"
		case !slices.Equal(cpus, o.cpus):
			why = "the job's CPUs changed in the interval"
		}
		if why != "" {
			r.NotMeasured(sample.NodeCPUsBusySeconds, why)
			r.NotMeasured(sample.NodeCPUsStealSeconds, why)
		} else {
			busy, steal := 0.0, 0.0
			for _, c := range cpus {
				if c < len(cur.busy) && c < len(o.prev.busy) && cur.busy[c].Busy >= 0 && o.prev.busy[c].Busy >= 0 {
					busy += max(cur.busy[c].Busy-o.prev.busy[c].Busy, 0)
					steal += max(cur.busy[c].Steal-o.prev.busy[c].Steal, 0)
				}
			}
			r.Sample.Job[sample.NodeCPUsBusySeconds] = busy
			r.Sample.Job[sample.NodeCPUsStealSeconds] = steal
		}
	}
	o.prev, o.cpus, o.have = cur, append(o.cpus[:0], cpus...), true
	return nil
}

// counter adds a node counter's increase, or why there is none.
func (o *outsideSource) counter(r *Read, name string, cur, prev float64, curErr, prevErr error) {
	switch {
	case curErr != nil:
		r.NotMeasured(name, curErr.Error())
	case prevErr != nil:
		r.NotMeasured(name, prevErr.Error())
	default:
		r.Sample.Job[name] = max(cur-prev, 0)
	}
}

func (o *outsideSource) Close() error { return nil }
