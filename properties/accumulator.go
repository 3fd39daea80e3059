package properties

// The accumulator: one job's intervals evaluated as they come, into property records.

import (
	"math"
	"strconv"
	"time"

	"github.com/expr-lang/expr"

	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/sample"
)

// JobInfo is what the engine knows of a job besides its samples.
type JobInfo struct {
	// Started is when the job's measurement began: samples that end within the
	// engine's start-up (Startup) are not judged. Zero: only samples read for the
	// start-up's end (sample.Startup) are.
	Started           time.Time
	NCPUs             int
	MemRequestedBytes float64 // 0: not requested explicitly
	Topology          []sample.CPUTopo
}

// acc accumulates one property's records.
type acc struct {
	reached         bool // the strategy evaluated the property
	values          []float64
	weight          float64 // Σ interval seconds of assessed records
	severeWeight    float64
	sevSum, sevMax  float64
	severeWall      float64 // wall-clock seconds of the intervals with severity > 0 somewhere
	severeSeq       int     // the last interval counted in severeWall
	records         int
	notAssessed     string // first reason
	notAssessedName string // the missing input
}

// Accumulator collects a job's property records, sample by sample (one per cycle).
type Accumulator struct {
	e       *Engine
	info    JobInfo
	accs    []acc // by propEval.i
	samples int
	seconds float64
	seq     int // intervals evaluated (samples and the job-level evaluation)
	// startup is the measured time of the job's start-up, not judged (Startup);
	// suspended the time Slurm held the job suspended, not judged either.
	startup, suspended float64
	// jobEnv are the job's totals and facts at Finish, by name (what job-domain
	// expressions see).
	jobEnv map[string]any
	// devSeconds is the job's device-time per domain (Σ interval × devices): the base of
	// time shares, so a refined property's share is of the whole job, not only of the
	// intervals its parent let it be evaluated in.
	devSeconds  map[Domain]float64
	maxRecords  int // of the last interval (MaxRecords)
	lastRecords int // records of the last interval
	// pool holds the device slots of the last interval, filled again for the next (they
	// live only while their interval is evaluated); devs are that interval's devices.
	// coreOf maps a CPU to its core (the topology does not change), labels names the
	// devices; coreAt and touched are scratch space of devices.
	pool    []*slots
	devs    devSet
	coreOf  map[int]sample.Core
	labels  map[sample.Core]string // CPU n is {-1, n}
	coreAt  map[sample.Core]int
	touched []int
}

// devSet is the devices of one interval by domain.
type devSet struct{ node, cpu, core []device }

func (d *devSet) of(dom Domain) []device {
	switch dom {
	case Node:
		return d.node
	case CPU:
		return d.cpu
	case Core:
		return d.core
	}
	return nil
}

// SetMemRequested sets the memory the job requested on this node, once known (the job
// map is asked at the job's end).
func (a *Accumulator) SetMemRequested(b float64) { a.info.MemRequestedBytes = b }

// NewAccumulator starts a job's records.
func (e *Engine) NewAccumulator(info JobInfo) *Accumulator {
	return &Accumulator{e: e, info: info, accs: make([]acc, len(e.evals))}
}

// device is one device of a sample, with its values.
type device struct {
	domain Domain
	cpu    int         // CPU domain
	core   sample.Core // core domain, and the core of a CPU
	label  string      // "node", "cpu3", "core0.2"
	s      *slots
}

// related says whether a child's device lies in (or contains) the parent's.
func related(parent, child device) bool {
	switch {
	case parent.domain == Node || child.domain == Node:
		return true
	case parent.domain == child.domain && parent.domain == CPU:
		return parent.cpu == child.cpu
	default: // a core and a CPU, or two cores
		return parent.core == child.core
	}
}

const idleBusy = 0.05 // a CPU busy less than this share of an interval counts as idle

// next returns the next device slots of the interval, cleared, with the interval's
// length and the calibration values.
func (a *Accumulator) next(used *int, seconds float64) *slots {
	var sl *slots
	if *used < len(a.pool) {
		sl = a.pool[*used]
		sl.reset()
	} else {
		n := newSlots(len(a.e.tab.list))
		sl = &n
		a.pool = append(a.pool, sl)
	}
	*used++
	f := &a.e.fixed
	sl.set(f.seconds, seconds)
	for _, c := range f.cal {
		sl.set(c.slot, c.v)
	}
	return sl
}

// label names a CPU's (core.Socket -1) or a core's device.
func (a *Accumulator) label(c sample.Core) string {
	if l, ok := a.labels[c]; ok {
		return l
	}
	var l string
	if c.Socket < 0 {
		l = "cpu" + strconv.Itoa(c.Core)
	} else {
		l = "core" + strconv.Itoa(c.Socket) + "." + strconv.Itoa(c.Core)
	}
	if len(a.labels) < 1<<16 {
		a.labels[c] = l
	}
	return l
}

// devices fills the slots of every device of a sample: the node, each CPU, each core.
func (a *Accumulator) devices(s sample.Sample) *devSet {
	if a.coreOf == nil {
		a.coreOf = map[int]sample.Core{}
		for _, t := range a.info.Topology {
			a.coreOf[t.CPU] = sample.Core{Socket: t.Socket, Core: t.Core}
		}
		a.labels = map[sample.Core]string{}
		a.coreAt = map[sample.Core]int{}
	}
	d := &a.devs
	d.node, d.cpu, d.core = d.node[:0], d.cpu[:0], d.core[:0]
	used := 0
	node := a.next(&used, s.Seconds)
	a.nodeValues(node, s)
	d.node = append(d.node, device{domain: Node, label: string(Node), s: node})
	a.cpuDevices(s, &used)
	return d
}

// nodeValues fills the node's slots: the job's values of the sample, and what the engine
// derives from them (flops, network totals, the job's CPUs, the memory it requested, its
// CPUs' busy shares, its file opens and I/O calls).
func (a *Accumulator) nodeValues(node *slots, s sample.Sample) {
	e, f := a.e, &a.e.fixed
	for k, v := range s.Job {
		node.set(e.rawSlot(k), v)
	}
	e.addFlops(node)
	for _, n := range f.net {
		x, okA := node.get(n[1])
		y, okB := node.get(n[2])
		if okA || okB {
			node.set(n[0], x+y)
		}
	}
	ncpus := len(s.CPU)
	if ncpus == 0 {
		ncpus = a.info.NCPUs
	}
	if ncpus > 0 {
		node.set(f.ncpus, float64(ncpus))
	}
	if a.info.MemRequestedBytes > 0 {
		node.set(f.memRequest, a.info.MemRequestedBytes)
	}
	busyShares(node, f, s)
	ioCalls(node, f, s)
}

// busyShares sets the node's busy shares of its CPUs, from each CPU's task-clock: the
// least, the greatest and the mean, the CPUs busy in all, and the idle ones (busy less
// than idleBusy). None unless every CPU counted its task-clock.
func busyShares(node *slots, f *fixedSlots, s sample.Sample) {
	if len(s.CPU) == 0 || s.Seconds <= 0 {
		return
	}
	minB, maxB, sum, idle, n := math.Inf(1), math.Inf(-1), 0.0, 0, 0
	for _, c := range s.CPU {
		tc, ok := c.Values["task-clock"]
		if !ok {
			return
		}
		b := tc / 1e9 / s.Seconds
		minB, maxB, sum = math.Min(minB, b), math.Max(maxB, b), sum+b
		if b < idleBusy {
			idle++
		}
		n++
	}
	node.set(f.busyMin, minB)
	node.set(f.busyMax, maxB)
	node.set(f.busyMean, sum/float64(n))
	node.set(f.idleCPUs, float64(idle))
	node.set(f.busyCPUs, sum)
}

// ioCalls sets the node's file opens, counted by any of the open system calls that are
// traced, and the I/O calls judged: those on files where they were counted apart
// (FileReadCalls and FileWriteCalls measured), else all of them.
func ioCalls(node *slots, f *fixedSlots, s sample.Sample) {
	opens, traced := 0.0, false
	for _, n := range perfevents.OpenTracepoints {
		if v, ok := s.Job[n]; ok {
			opens, traced = opens+v, true
		}
	}
	if traced {
		node.set(f.opens, opens)
	}
	files := false
	if _, ok := s.Job[sample.FileReadCalls]; ok {
		_, files = s.Job[sample.FileWriteCalls]
	}
	for i, x := range ioNames {
		src := x.all
		if files {
			src = x.file
		}
		if v, ok := s.Job[src]; ok {
			node.set(f.io[i], v)
		}
	}
}

// cpuDevices adds the sample's CPUs' devices, and a device per core they lie on: a
// core's values are its CPUs' added up (threads counts them), its flops derived from
// those.
func (a *Accumulator) cpuDevices(s sample.Sample, used *int) {
	e, f, d := a.e, &a.e.fixed, &a.devs
	clear(a.coreAt)
	for _, c := range s.CPU {
		env := a.next(used, s.Seconds)
		env.set(f.threads, 1)
		a.touched = a.touched[:0]
		for k, v := range c.Values {
			if i := e.rawSlot(k); i >= 0 {
				env.set(i, v)
				a.touched = append(a.touched, i)
			}
		}
		e.addFlops(env)
		core, ok := a.coreOf[c.CPU]
		if !ok {
			core = sample.Core{Core: c.CPU}
		}
		d.cpu = append(d.cpu, device{domain: CPU, cpu: c.CPU, core: core, label: a.label(sample.Core{Socket: -1, Core: c.CPU}), s: env})
		k, ok := a.coreAt[core]
		if !ok {
			k = len(d.core)
			a.coreAt[core] = k
			ce := a.next(used, s.Seconds)
			ce.set(f.threads, 0)
			d.core = append(d.core, device{domain: Core, core: core, label: a.label(core), s: ce})
		}
		ce := d.core[k].s
		if f.threads >= 0 {
			ce.v[f.threads]++
		}
		for _, i := range a.touched {
			prev, _ := ce.get(i)
			ce.set(i, prev+env.v[i])
		}
	}
	for _, c := range d.core {
		e.addFlops(c.s)
	}
}

// addFlops derives flop counts from the raw floating-point events of a device.
func (e *Engine) addFlops(sl *slots) {
	f := &e.fixed
	if v, ok := sl.get(f.fpOps); ok { // AMD: flops counted directly, no breakdown
		sl.set(f.flops, v)
		return
	}
	var total, vec, sp, dp float64
	for i, w := range flopWeights {
		v, ok := sl.get(f.fp[i])
		if !ok {
			return // an incomplete set would understate the rate
		}
		x := v * w.w
		total += x
		if w.vector {
			vec += x
		}
		if w.single {
			sp += x
		} else {
			dp += x
		}
	}
	sl.set(f.flops, total)
	sl.set(f.vectorFlops, vec)
	sl.set(f.spFlops, sp)
	sl.set(f.dpFlops, dp)
}

// Record is one property evaluated on one device in one interval: what a cycle yields
// for the collectors (the PerSyst thesis, §4: property records, not raw counters, travel).
type Record struct {
	Time     time.Time `json:"time"`
	Key      string    `json:"key"`
	Device   string    `json:"device"` // "node", "cpu3", "core0.2" (socket.core)
	Value    float64   `json:"value"`
	Severity float64   `json:"severity"`
}

// Add evaluates the strategy on every device of one sample and returns the property
// records of that interval. The baseline (a sample without an interval) is ignored.
func (a *Accumulator) Add(s sample.Sample) []Record {
	if s.Seconds <= 0 {
		return nil
	}
	if a.isStartup(s) {
		a.startup += s.Seconds
		return nil
	}
	if s.Suspended() {
		// Slurm held the job suspended: nothing the job did, and nothing to judge; the
		// time is not part of the job's judged time either.
		a.suspended += s.Seconds
		return nil
	}
	a.samples++
	a.seq++
	a.seconds += s.Seconds
	devs := a.devices(s)
	if a.devSeconds == nil {
		a.devSeconds = map[Domain]float64{}
	}
	for _, dom := range []Domain{Node, CPU, Core} {
		if n := len(devs.of(dom)); n > 0 {
			a.devSeconds[dom] += s.Seconds * float64(n)
		}
	}
	out := make([]Record, 0, a.lastRecords) // about as many as the last interval had
	a.maxRecords = 0
	for _, root := range a.e.roots {
		out = a.eval(root, devs.of(root.pe.p.Domain), devs, s, out)
		a.maxRecords += maxRecords(root, devs)
	}
	a.lastRecords = len(out)
	return out
}

// isStartup says whether s is a sample of the job's start-up, which is not judged.
func (a *Accumulator) isStartup(s sample.Sample) bool {
	if s.Reason == sample.Startup {
		return true
	}
	return !a.info.Started.IsZero() && s.Time.Sub(a.info.Started).Seconds() <= a.e.cfg.StartupSeconds
}

// Judges says whether the accumulator judges a sample's interval: not the baseline, not
// the job's start-up, not an interval Slurm held the job suspended.
func (a *Accumulator) Judges(s sample.Sample) bool {
	return s.Seconds > 0 && !a.isStartup(s) && !s.Suspended()
}

// Judged is the time of the job's samples that were judged (all but its start-up), and
// StartupSeconds the start-up's.
func (a *Accumulator) Judged() (judged, startup float64) { return a.seconds, a.startup }

// MaxRecords is how many records the last Add would have returned if every condition of
// the strategy had held on every device: the load the PerSyst thesis assumes (§5.3) a node sends for
// a job (every property, on all its devices), against which the records actually sent
// measure the job's load.
func (a *Accumulator) MaxRecords() int { return a.maxRecords }

func maxRecords(n *enode, devs *devSet) int {
	if n.pe.p.Domain == Job {
		return 0
	}
	k := len(devs.of(n.pe.p.Domain))
	for _, c := range n.children {
		k += maxRecords(c, devs)
	}
	return k
}

// eval evaluates node on the given devices and refines into its children on the devices
// where its condition held.
func (a *Accumulator) eval(n *enode, on []device, all *devSet, s sample.Sample, out []Record) []Record {
	pe := n.pe
	if pe.p.Domain == Job {
		return out // evaluated once, in Finish
	}
	var heldBuf [8]device
	held := heldBuf[:0]
	for _, d := range on {
		ok, v, sev, valid := a.record(pe, d.s, s.Seconds, s.Seconds)
		if valid {
			out = append(out, Record{Time: s.Time, Key: pe.key, Device: d.label, Value: v, Severity: sev})
		}
		if ok {
			held = append(held, d)
		}
	}
	if len(held) == 0 {
		return out
	}
	var targetBuf [8]device
	for _, c := range n.children {
		targets := targetBuf[:0]
		for _, d := range all.of(c.pe.p.Domain) {
			for _, h := range held {
				if related(h, d) {
					targets = append(targets, d)
					break
				}
			}
		}
		out = a.eval(c, targets, all, s, out)
	}
	return out
}

// record evaluates a property on one device's slots, records the result with weight w,
// and reports whether its condition holds there, the value and severity, and whether
// there was one.
func (a *Accumulator) record(pe *propEval, sl *slots, w, wall float64) (cond bool, v, sev float64, valid bool) {
	p, x := pe.p, &a.accs[pe.i]
	x.reached = true
	var zeroed []string // optional names not measured here (for expr's VM)
	for k, i := range pe.value {
		if !sl.has[i] {
			if pe.optional[k] {
				sl.v[i] = 0 // has stays false: other properties still see it missing
				zeroed = append(zeroed, a.e.tab.list[i])
				continue
			}
			if x.notAssessed == "" {
				x.notAssessed, x.notAssessedName = "not measured", a.e.tab.list[i]
			}
			return false, 0, 0, false
		}
	}
	thr := pe.thr
	if !pe.hasThr && (p.Severity != None || p.Condition == Above || p.Condition == Below) {
		if x.notAssessed == "" {
			x.notAssessed = pe.thrWhy
		}
		return false, 0, 0, false
	}
	if pe.fast != nil {
		v = pe.fast(sl.v)
	} else {
		env := sl.env(&a.e.tab)
		for _, n := range zeroed {
			env[n] = 0.0
		}
		out, err := expr.Run(p.value, env)
		if err != nil {
			return false, 0, 0, false
		}
		v = out.(float64)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false, 0, 0, false // nothing to measure in this interval (e.g. no writes: 0/0)
	}
	sev, err := p.Severity.Severity(v, thr, p.Exponent)
	if err != nil {
		return false, 0, 0, false
	}
	x.notAssessed, x.notAssessedName = "", ""
	x.values = append(x.values, v)
	x.records++
	x.weight += w
	x.sevSum += sev * w
	x.sevMax = math.Max(x.sevMax, sev)
	if sev > 0 {
		x.severeWeight += w
		if x.severeSeq != a.seq {
			x.severeSeq = a.seq
			x.severeWall += wall
		}
	}
	switch p.Condition {
	case Always:
		cond = true
	case Positive:
		cond = v > 0
	case Above:
		cond = v > thr
	case Below:
		cond = v <= thr
	default:
		cond = sev > 0
	}
	return cond, v, sev, true
}

// ioNames are the derived I/O values, each from its file-only metric where calls on
// files were counted apart, else from the process I/O of every call.
var ioNames = [4]struct{ name, file, all string }{
	{NameIOReadCalls, sample.FileReadCalls, sample.ReadSyscalls},
	{NameIOReadBytes, sample.FileReadBytes, sample.ReadChars},
	{NameIOWriteCalls, sample.FileWriteCalls, sample.WriteSyscalls},
	{NameIOWriteBytes, sample.FileWriteBytes, sample.WriteChars},
}
