package properties

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/expr-lang/expr"

	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/quantile"
	"github.com/persyst/persyst/sample"
)

// Config configures an Engine.
type Config struct {
	Catalog  *Catalog
	Strategy *Strategy
	// Thresholds overrides thresholds by property id (both replicas) or key
	// (persyst.conf Threshold.<id>=).
	Thresholds map[string]float64
	// Calibration holds this node type's calibration values (calibrationNames); a
	// threshold that needs a missing one is "not assessed".
	Calibration map[string]float64
	// MinSeconds: jobs shorter than this get only findings that are robust at that
	// length (properties with robust = long are left out, and the digest says so).
	MinSeconds float64
	// MinShare is the least share of the job a bottleneck must hold to be a finding
	// (default 0.2: a job's start and teardown intervals alone do not make one);
	// MinScore the least mean severity (default 0.05).
	MinShare, MinScore float64
	// StartupSeconds: the first seconds of a job's measurement are its start-up (loading
	// the program and its libraries, Slurm's and persyst's own set-up): never judged
	// (default 1; pipeline reads the job once when they are over). MinFindingSeconds is
	// the least wall-clock time a bottleneck must hold to be a finding (default 1):
	// sub-second effects never make one.
	StartupSeconds, MinFindingSeconds float64
}

// Engine evaluates a strategy. It is immutable and safe for concurrent use.
type Engine struct {
	cfg        Config
	thresholds map[*Property]float64
	thrWhy     map[*Property]string // why a threshold cannot be computed

	// How the strategy is evaluated (fast.go): the name table of the devices' slots, the
	// strategy's properties with their compiled values, its trees, the slot of every
	// metric name known (-1: no expression uses it) and of the derived values.
	tab   names
	evals map[*Property]*propEval
	roots []*enode
	raw   map[string]int
	fixed fixedSlots
}

// propEval is a strategy property as the engine evaluates it.
type propEval struct {
	p      *Property
	i      int    // in Accumulator.accs
	key    string // p.Key()
	fast   numFn  // nil: expr's VM runs p.value
	value  []int  // slots of the names the value uses
	thr    float64
	hasThr bool
	thrWhy string
}

// enode is a node of the strategy as the engine evaluates it.
type enode struct {
	pe       *propEval
	children []*enode
}

// fixedSlots are the slots of the values the engine derives (-1: not used).
type fixedSlots struct {
	seconds, threads, ncpus, memRequest                   int
	busyMin, busyMax, busyMean, idleCPUs, busyCPUs, opens int
	flops, vectorFlops, spFlops, dpFlops                  int
	fpOps                                                 int
	fp                                                    [len(flopWeights)]int
	net                                                   [len(netSums)][3]int // out, Ethernet, InfiniBand
	cal                                                   []calSlot
}

type calSlot struct {
	slot int
	v    float64
}

// flopWeights are the raw floating-point events a flop count is derived from, with the
// operations per event (fp_ops, on AMD, counts flops directly).
var flopWeights = [...]struct {
	name           string
	w              float64
	vector, single bool
}{
	{"fp_scalar_double", 1, false, false}, {"fp_scalar_single", 1, false, true},
	{"fp_128_double", 2, true, false}, {"fp_128_single", 4, true, true},
	{"fp_256_double", 4, true, false}, {"fp_256_single", 8, true, true},
	{"fp_512_double", 8, true, false}, {"fp_512_single", 16, true, true},
}

// netSums are the network totals: Ethernet (/proc/net/dev) and InfiniBand port counters
// added up, whichever were measured (native InfiniBand traffic, MPI over verbs, shows
// only in the port counters).
var netSums = [...]struct{ out, eth, ib string }{
	{NameTxBytes, "net_tx_bytes", "ib_xmit_bytes"}, {NameRxBytes, "net_rx_bytes", "ib_rcv_bytes"},
	{NameTxPackets, "net_tx_packets", "ib_xmit_packets"}, {NameRxPackets, "net_rx_packets", "ib_rcv_packets"},
}

// prepare compiles the strategy for evaluation (after the thresholds are known).
func (e *Engine) prepare() {
	e.tab = names{index: map[string]int{}}
	// The inputs of derived values have slots whether or not an expression names them.
	for _, w := range flopWeights {
		e.tab.add(w.name)
	}
	e.tab.add("fp_ops")
	for _, n := range netSums {
		e.tab.add(n.eth)
		e.tab.add(n.ib)
	}
	e.evals = map[*Property]*propEval{}
	var build func(ns []*StrategyNode) []*enode
	build = func(ns []*StrategyNode) []*enode {
		var out []*enode
		for _, n := range ns {
			pe := e.evals[n.Prop]
			if pe == nil {
				p := n.Prop
				pe = &propEval{p: p, i: len(e.evals), key: p.Key()}
				pe.thr, pe.hasThr = e.thresholds[p]
				pe.thrWhy = e.thrWhy[p]
				for _, name := range p.valueNames {
					pe.value = append(pe.value, e.tab.add(name))
				}
				if f, ok := compileFast(p.value.Node(), &e.tab); ok {
					pe.fast = f
				}
				e.evals[p] = pe
			}
			out = append(out, &enode{pe: pe, children: build(n.Children)})
		}
		return out
	}
	e.roots = build(e.cfg.Strategy.Roots)
	f := &e.fixed
	for _, x := range []struct {
		dst  *int
		name string
	}{
		{&f.seconds, NameSeconds}, {&f.threads, NameThreads}, {&f.ncpus, NameNCPUs}, {&f.memRequest, NameMemRequest},
		{&f.busyMin, NameBusyMin}, {&f.busyMax, NameBusyMax}, {&f.busyMean, NameBusyMean}, {&f.idleCPUs, NameIdleCPUs},
		{&f.busyCPUs, NameBusyCPUs}, {&f.opens, NameFileOpens},
		{&f.flops, NameFlops}, {&f.vectorFlops, NameVectorFlops}, {&f.spFlops, NameSPFlops}, {&f.dpFlops, NameDPFlops},
		{&f.fpOps, "fp_ops"},
	} {
		*x.dst = e.tab.slot(x.name)
	}
	for i, w := range flopWeights {
		f.fp[i] = e.tab.slot(w.name)
	}
	for i, n := range netSums {
		f.net[i] = [3]int{e.tab.slot(n.out), e.tab.slot(n.eth), e.tab.slot(n.ib)}
	}
	for k, v := range e.cfg.Calibration {
		if i := e.tab.slot(k); i >= 0 {
			f.cal = append(f.cal, calSlot{i, v})
		}
	}
	e.raw = map[string]int{}
	for _, n := range append(sample.Names(), perfNames()...) {
		e.raw[n] = e.tab.slot(Sanitize(n))
	}
}

// rawSlot is the slot of a metric's name (-1: no expression uses it).
func (e *Engine) rawSlot(name string) int {
	if i, ok := e.raw[name]; ok {
		return i
	}
	return e.tab.slot(Sanitize(name))
}

// NewEngine checks the configuration: threshold overrides must name catalog properties.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Catalog == nil || cfg.Strategy == nil {
		return nil, fmt.Errorf("properties: engine needs a catalog and a strategy")
	}
	if cfg.MinShare <= 0 {
		cfg.MinShare = 0.2
	}
	if cfg.MinScore <= 0 {
		cfg.MinScore = 0.05
	}
	if cfg.StartupSeconds <= 0 {
		cfg.StartupSeconds = DefaultStartupSeconds
	}
	if cfg.MinFindingSeconds <= 0 {
		cfg.MinFindingSeconds = 1
	}
	e := &Engine{cfg: cfg, thresholds: map[*Property]float64{}, thrWhy: map[*Property]string{}}
	for k := range cfg.Thresholds {
		found := false
		for _, key := range cfg.Catalog.Keys() {
			p, _ := cfg.Catalog.Get(key)
			found = found || p.Key() == k || p.ID == k
		}
		if !found {
			return nil, fmt.Errorf("Threshold.%s: no such property", k)
		}
	}
	cal := calibrationTemplate()
	for k, v := range cfg.Calibration {
		cal[k] = v
	}
	for _, key := range cfg.Catalog.Keys() {
		p, _ := cfg.Catalog.Get(key)
		if v, ok := cfg.Thresholds[p.Key()]; ok {
			e.thresholds[p] = v
			continue
		}
		if v, ok := cfg.Thresholds[p.ID]; ok {
			e.thresholds[p] = v
			continue
		}
		if p.threshold == nil {
			continue
		}
		var missing []string
		for _, n := range identifiers(p.threshold) {
			if _, ok := cfg.Calibration[n]; !ok {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			e.thrWhy[p] = "no calibration of this node type (" + strings.Join(missing, ", ") + "; run persyst calibrate)"
			continue
		}
		out, err := expr.Run(p.threshold, cal)
		if err != nil {
			e.thrWhy[p] = "threshold: " + err.Error()
			continue
		}
		e.thresholds[p] = out.(float64)
	}
	e.prepare()
	return e, nil
}

// MinSeconds is the job length below which only robust findings are reported.
func (e *Engine) MinSeconds() float64 { return e.cfg.MinSeconds }

// DefaultStartupSeconds is the start-up a job's measurement leaves unjudged by default.
const DefaultStartupSeconds = 1

// Startup is how long a job's start-up lasts: its samples are not judged.
func (e *Engine) Startup() time.Duration {
	return time.Duration(e.cfg.StartupSeconds * float64(time.Second))
}

// Threshold returns the threshold the engine uses for the property with p's key (p may
// come from another catalog instance).
func (e *Engine) Threshold(p *Property) (float64, bool) {
	own, ok := e.cfg.Catalog.Get(p.Key())
	if !ok {
		return 0, false
	}
	v, ok := e.thresholds[own]
	return v, ok
}

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
	// startup is the measured time of the job's start-up, not judged (Startup).
	startup float64
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
	e, f := a.e, &a.e.fixed
	d := &a.devs
	d.node, d.cpu, d.core = d.node[:0], d.cpu[:0], d.core[:0]
	used := 0
	node := a.next(&used, s.Seconds)
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
	// Busy shares per CPU from task-clock.
	if len(s.CPU) > 0 && s.Seconds > 0 {
		minB, maxB, sum, idle, n := math.Inf(1), math.Inf(-1), 0.0, 0, 0
		for _, c := range s.CPU {
			tc, ok := c.Values["task-clock"]
			if !ok {
				n = -1
				break
			}
			b := tc / 1e9 / s.Seconds
			minB, maxB, sum = math.Min(minB, b), math.Max(maxB, b), sum+b
			if b < idleBusy {
				idle++
			}
			n++
		}
		if n > 0 {
			node.set(f.busyMin, minB)
			node.set(f.busyMax, maxB)
			node.set(f.busyMean, sum/float64(n))
			node.set(f.idleCPUs, float64(idle))
			node.set(f.busyCPUs, sum)
		}
	}
	// Files opened by any of the open system calls that are traced.
	opens, traced := 0.0, false
	for _, n := range perfevents.OpenTracepoints {
		if v, ok := s.Job[n]; ok {
			opens, traced = opens+v, true
		}
	}
	if traced {
		node.set(f.opens, opens)
	}
	d.node = append(d.node, device{domain: Node, label: string(Node), s: node})
	clear(a.coreAt)
	for _, c := range s.CPU {
		env := a.next(&used, s.Seconds)
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
			ce := a.next(&used, s.Seconds)
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
	return d
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
	for _, i := range pe.value {
		if !sl.has[i] {
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
		out, err := expr.Run(p.value, sl.env(&a.e.tab))
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

// StartupOnly: the job was measured only during its start-up, which is never judged.
const StartupOnly = "the job ended within its start-up, which is not judged"

// NothingToAssess: the property's inputs were measured but never gave a value (no writes,
// so no mean write size). Not a gap in the measurement.
const NothingToAssess = "nothing to assess: no value in any interval"

// derivedWhy says why a derived value can be missing.
var derivedWhy = map[string]string{
	NameLoadBalance: "needs the data of all the job's nodes (one-node job, or no collector tree yet)",
	NameMemRequest:  "the job requested no memory explicitly",
	NameMemGrowth:   "no memory series",
	NameBusyMin:     "no per-CPU task-clock",
	NameBusyMax:     "no per-CPU task-clock",
	NameIdleCPUs:    "no per-CPU task-clock",
	NameBusyCPUs:    "no per-CPU task-clock",
	NameFileOpens:   "no open system call is traced (tracefs)",
	NameFlops:       "no floating-point events for this processor",
	NameVectorFlops: "no vector floating-point breakdown for this processor",
	NameTxBytes:     "node counters are not attributed to this job",
	NameRxBytes:     "node counters are not attributed to this job",
	NameTxPackets:   "node counters are not attributed to this job",
	NameRxPackets:   "node counters are not attributed to this job",
}

// Result is one property's outcome for a job.
type Result struct {
	Key    string `json:"key"`
	ID     string `json:"id"`
	Name   string `json:"name"`
	Unit   string `json:"unit"`
	Domain Domain `json:"domain"`
	// Assessed is false when the property could not be evaluated; NotAssessed says why.
	Assessed    bool   `json:"assessed"`
	NotAssessed string `json:"not_assessed,omitempty"`
	// Values across devices and time: count, deciles (type 7; Deciles[5] is the median).
	Count     int64     `json:"count,omitempty"`
	Deciles   []float64 `json:"deciles,omitempty"`
	Threshold *float64  `json:"threshold,omitempty"`
	// Share of the job's device-time with severity > 0, severity averaged over the job's
	// device-time (0 where not evaluated), and the highest severity.
	TimeShare    float64 `json:"time_share"`
	MeanSeverity float64 `json:"mean_severity"`
	MaxSeverity  float64 `json:"max_severity"`
	// Score orders findings: mean severity × the property's rank.
	Score float64 `json:"score"`
	// Finding: reported in the digest. Suppressed says why a severe property is not.
	Finding        bool   `json:"finding"`
	Suppressed     string `json:"suppressed,omitempty"`
	Recommendation string `json:"recommendation,omitempty"`
	// Folds are the properties this one explains when it is a finding (Fold).
	Folds []string `json:"folds,omitempty"`
}

// Median returns the median value.
func (r Result) Median() float64 { return r.Deciles[5] }

// Finish evaluates the job-domain properties and summarizes every property. notMeasured
// gives the reasons of metrics that were not measured (sample.Summary.NotMeasured).
func (a *Accumulator) Finish(samples []sample.Sample, sum sample.Summary) []Result {
	a.finishJob(samples, sum)
	unsanitized := map[string]string{}
	for name := range sum.NotMeasured {
		unsanitized[Sanitize(name)] = name
	}
	short := a.e.cfg.MinSeconds > 0 && (sum.Seconds < a.e.cfg.MinSeconds || a.samples < 4)
	var out []Result
	seen := map[*Property]bool{}
	for _, p := range a.e.cfg.Strategy.Properties() {
		if seen[p] {
			continue
		}
		seen[p] = true
		var x *acc
		if pe := a.e.evals[p]; pe != nil && a.accs[pe.i].reached {
			x = &a.accs[pe.i]
		}
		r := Result{Key: p.Key(), ID: p.ID, Name: p.Name, Unit: p.Unit, Domain: p.Domain, Recommendation: p.Recommendation, Folds: p.Folds}
		if t, ok := a.e.thresholds[p]; ok {
			t := t
			r.Threshold = &t
		}
		switch {
		case p.Domain != Job && a.samples == 0 && a.startup > 0:
			r.NotAssessed = StartupOnly
		case x == nil:
			r.NotAssessed = "not evaluated: the strategy did not reach it (its parent's condition never held)"
		case x.records == 0 && x.notAssessed != "":
			r.NotAssessed = x.notAssessed
			if x.notAssessedName != "" {
				orig := unsanitized[x.notAssessedName]
				if orig == "" {
					orig = x.notAssessedName
				}
				why := sum.NotMeasured[orig]
				if why == "" {
					why = derivedWhy[orig]
				}
				if why == "" {
					why = "not provided"
				}
				r.NotAssessed = orig + ": " + why
			}
		case x.records == 0:
			r.NotAssessed = NothingToAssess
		default:
			base := x.weight
			if p.Domain != Job && a.devSeconds[p.Domain] > base {
				base = a.devSeconds[p.Domain]
			}
			a.e.assess(&r, p, Aggregate{Values: x.values, SevereSeconds: x.severeWeight, SeveritySeconds: x.sevSum,
				MaxSeverity: x.sevMax, BaseSeconds: base, SevereWallSeconds: x.severeWall}, short)
		}
		out = append(out, r)
	}
	return out
}

// Aggregate is a property's records of a job merged from wherever they were evaluated
// (one node's Accumulator, or a collector holding the job's nodes).
type Aggregate struct {
	Values []float64 // every record's value
	// Summary, when Values is empty, gives the value quantiles instead (merged sketches
	// of a job split over several collectors: estimates within the sketch's error).
	Summary         *quantile.Summary
	SevereSeconds   float64 // Σ interval of records with severity > 0
	SeveritySeconds float64 // Σ severity × interval
	MaxSeverity     float64
	// BaseSeconds is the job's device-time in the property's domain: the base of the
	// time share and the mean severity.
	BaseSeconds float64
	// SevereWallSeconds is the wall-clock time of the intervals with severity > 0 on
	// some device (for a job split over collectors: the longest part's, a lower bound).
	SevereWallSeconds float64
}

// assess fills an assessed Result from an aggregate and decides whether it is a finding.
func (e *Engine) assess(r *Result, p *Property, agg Aggregate, short bool) {
	r.Assessed = true
	if agg.Summary != nil && len(agg.Values) == 0 {
		r.Deciles, r.Count = agg.Summary.Quantiles, agg.Summary.Count
	} else if qs, err := quantile.Summarize(agg.Values, 10); err == nil {
		r.Deciles, r.Count = qs.Quantiles, qs.Count
	}
	if agg.BaseSeconds > 0 {
		r.TimeShare = agg.SevereSeconds / agg.BaseSeconds
		r.MeanSeverity = agg.SeveritySeconds / agg.BaseSeconds
	}
	r.MaxSeverity = agg.MaxSeverity
	r.Score = r.MeanSeverity * p.Rank
	if p.Finding && p.Severity != None && r.TimeShare >= e.cfg.MinShare && r.MeanSeverity >= e.cfg.MinScore {
		r.Finding = true
		if agg.SevereWallSeconds < e.cfg.MinFindingSeconds {
			r.Finding = false
			r.Suppressed = fmt.Sprintf("held for %.1f s only: an effect shorter than %s is not a finding",
				agg.SevereWallSeconds, fmtSeconds(e.cfg.MinFindingSeconds))
		}
		if r.Finding && p.LongOnly && short {
			r.Finding = false
			r.Suppressed = fmt.Sprintf("not robust for a job shorter than %s", fmtSeconds(e.cfg.MinSeconds))
		}
	}
}

// ResultOf makes the Result of the property with key from an aggregate of the job's
// records (a collector's view of a multi-node job). ok is false for an unknown key.
func (e *Engine) ResultOf(key string, agg Aggregate, short bool) (Result, bool) {
	p, ok := e.cfg.Catalog.Get(key)
	if !ok {
		return Result{}, false
	}
	r := Result{Key: p.Key(), ID: p.ID, Name: p.Name, Unit: p.Unit, Domain: p.Domain, Recommendation: p.Recommendation, Folds: p.Folds}
	if t, ok := e.thresholds[p]; ok {
		r.Threshold = &t
	}
	e.assess(&r, p, agg, short)
	return r, true
}

// SeverityOf computes the severity of a value of the property with key (for values
// computed across nodes, like the spread between them). ok is false without a threshold.
func (e *Engine) SeverityOf(key string, v float64) (float64, bool) {
	p, ok := e.cfg.Catalog.Get(key)
	if !ok {
		return 0, false
	}
	t, ok := e.thresholds[p]
	if !ok {
		return 0, false
	}
	s, err := p.Severity.Severity(v, t, p.Exponent)
	return s, err == nil
}

// finishJob evaluates the job-domain properties on the job's summary and samples.
func (a *Accumulator) finishJob(samples []sample.Sample, sum sample.Summary) {
	a.seq++
	env := map[string]any{NameSeconds: sum.Seconds, NameSamples: float64(a.samples)}
	for k, v := range a.e.cfg.Calibration {
		env[k] = v
	}
	for k, v := range sum.Totals {
		env[Sanitize(k)] = v
	}
	if a.info.NCPUs > 0 {
		env[NameNCPUs] = float64(a.info.NCPUs)
	}
	if a.info.MemRequestedBytes > 0 {
		env[NameMemRequest] = a.info.MemRequestedBytes
	}
	if g, ok := memGrowth(samples); ok {
		env[NameMemGrowth] = g
	}
	sl := newSlots(len(a.e.tab.list))
	for k, v := range env {
		sl.set(a.e.tab.slot(k), v.(float64))
	}
	for _, n := range a.e.roots {
		a.evalJob(n, &sl, sum.Seconds)
	}
}

func (a *Accumulator) evalJob(n *enode, sl *slots, w float64) {
	if n.pe.p.Domain != Job {
		return
	}
	if w <= 0 {
		w = 1
	}
	if ok, _, _, _ := a.record(n.pe, sl, w, w); ok {
		for _, c := range n.children {
			a.evalJob(c, sl, w)
		}
	}
}

// memGrowth fits a line to the job's memory (anonymous memory where measured, else
// memory in use) over the cycle samples, up to the last one
// still holding at least half the peak (the job's teardown frees everything), and
// returns the growth along the line as a share of the peak, when the line explains the
// series well (R² ≥ 0.8) and there are at least 4 points; else 0. ok is false when
// there is no memory series at all.
func memGrowth(samples []sample.Sample) (float64, bool) {
	// Anonymous memory when measured: memory in use also counts the page cache that
	// writing files fills, which grows steadily without any leak.
	metric := sample.MemBytes
	for _, s := range samples {
		if _, ok := s.Job[sample.MemAnonBytes]; ok {
			metric = sample.MemAnonBytes
			break
		}
	}
	var ts, ms []float64
	peak := 0.0
	var t0 time.Time
	for _, s := range samples {
		if v, ok := s.Job[metric]; ok && s.Reason == sample.Cycle {
			if t0.IsZero() {
				t0 = s.Time
			}
			// Seconds since the first point: Unix seconds squared would lose the
			// precision the fit needs.
			ts = append(ts, s.Time.Sub(t0).Seconds())
			ms = append(ms, v)
			peak = math.Max(peak, v)
		}
	}
	if len(ms) == 0 || peak <= 0 {
		return 0, false
	}
	last := len(ms) - 1
	for last >= 0 && ms[last] < peak/2 {
		last--
	}
	ts, ms = ts[:last+1], ms[:last+1]
	if len(ms) < 4 {
		return 0, true
	}
	n := float64(len(ms))
	var st, sm, stt, stm float64
	for i := range ms {
		st, sm, stt, stm = st+ts[i], sm+ms[i], stt+ts[i]*ts[i], stm+ts[i]*ms[i]
	}
	den := n*stt - st*st
	if den == 0 {
		return 0, true
	}
	slope := (n*stm - st*sm) / den
	icpt := (sm - slope*st) / n
	mean := sm / n
	var ssr, sst float64
	for i := range ms {
		f := icpt + slope*ts[i]
		ssr += (ms[i] - f) * (ms[i] - f)
		sst += (ms[i] - mean) * (ms[i] - mean)
	}
	if sst == 0 || 1-ssr/sst < 0.8 || slope <= 0 {
		return 0, true
	}
	return slope * (ts[len(ts)-1] - ts[0]) / peak, true
}

// Fold returns the results with the findings that another finding explains (its Folds:
// one cause, its symptoms) turned into non-findings that say which: a job starved of
// CPU is not also told that its CPUs were idle. Findings fold in the order of their
// scores, and a folded finding folds nothing itself, so two properties that name each
// other never hide each other both.
func Fold(rs []Result) []Result {
	out := append([]Result(nil), rs...)
	var order []int
	for i, r := range out {
		if r.Finding {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		ra, rb := out[order[a]], out[order[b]]
		if ra.Score != rb.Score {
			return ra.Score > rb.Score
		}
		return ra.Key < rb.Key
	})
	// A cause comes before its symptoms, whatever their scores: findings that no other
	// finding folds go first (a storm of program starts explains its small reads even
	// when those score higher).
	folded := map[string]bool{}
	for _, i := range order {
		for _, k := range out[i].Folds {
			if k != out[i].Key {
				folded[k] = true
			}
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return !folded[out[order[a]].Key] && folded[out[order[b]].Key]
	})
	by := map[string]string{} // folded key → the finding that explains it
	for _, i := range order {
		if _, folded := by[out[i].Key]; folded {
			continue
		}
		for _, k := range out[i].Folds {
			if _, done := by[k]; !done && k != out[i].Key {
				by[k] = out[i].Name
			}
		}
	}
	for i, r := range out {
		if name, ok := by[r.Key]; ok && r.Finding {
			out[i].Finding = false
			out[i].Suppressed = "explained by " + name
		}
	}
	return out
}

// Findings returns the findings, most important first: by score (mean severity, that is
// severity × share of the job, weighed by the property's rank), then by highest
// severity, then by key.
func Findings(rs []Result) []Result {
	var out []Result
	for _, r := range rs {
		if r.Finding {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		if out[i].MaxSeverity != out[j].MaxSeverity {
			return out[i].MaxSeverity > out[j].MaxSeverity
		}
		return out[i].Key < out[j].Key
	})
	return out
}

func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d >= time.Minute && d%time.Minute == 0 {
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return strconv.FormatFloat(s, 'f', -1, 64) + " s"
}

// MergeResults takes the job-wide results where the collector has them (all nodes'
// records) and this node's for the rest (properties the collector never received:
// job-domain ones computed here, and those not assessed with their reasons).
func MergeResults(local, wide []Result) []Result {
	byKey := map[string]Result{}
	for _, r := range wide {
		if r.Assessed {
			byKey[r.Key] = r
		}
	}
	out := make([]Result, 0, len(local)+1)
	seen := map[string]bool{}
	for _, r := range local {
		// Job-domain properties computed here (memory trends, the memory request) stay
		// local unless this node could not assess them (the imbalance between nodes).
		if w, ok := byKey[r.Key]; ok && (r.Domain != Job || !r.Assessed) {
			r = w
		}
		seen[r.Key] = true
		out = append(out, r)
	}
	for _, r := range wide {
		if !seen[r.Key] && r.Assessed {
			out = append(out, r) // inter_node_imbalance: only the collector can assess it
		}
	}
	return out
}

// maxRemoteText bounds a reason that comes from another agent of the tree.
const maxRemoteText = 200

// Adopt takes results made by another agent of the tree (a collector's job-wide report)
// into this engine's terms, trusting only their numbers: the name, unit, domain and
// recommendation of each come from this engine's catalog by key (a key it does not know
// is dropped), the numbers must be finite and in range (severities and shares in [0, 1],
// eleven deciles or none), and free text (why not assessed or suppressed) loses control
// characters and is cut to a bounded length.
func (e *Engine) Adopt(remote []Result) []Result {
	out := make([]Result, 0, len(remote))
	for _, r := range remote {
		p, ok := e.cfg.Catalog.Get(r.Key)
		if !ok {
			continue
		}
		r.ID, r.Name, r.Unit, r.Domain, r.Recommendation = p.ID, p.Name, p.Unit, p.Domain, p.Recommendation
		r.NotAssessed, r.Suppressed = CleanText(r.NotAssessed, maxRemoteText), CleanText(r.Suppressed, maxRemoteText)
		unit := func(x float64) float64 {
			if math.IsNaN(x) {
				return 0
			}
			return math.Min(math.Max(x, 0), 1)
		}
		r.TimeShare, r.MeanSeverity, r.MaxSeverity = unit(r.TimeShare), unit(r.MeanSeverity), unit(r.MaxSeverity)
		if math.IsNaN(r.Score) || math.IsInf(r.Score, 0) || r.Score < 0 {
			r.Score = 0
		}
		if r.Count < 0 {
			r.Count = 0
		}
		if r.Threshold != nil && (math.IsNaN(*r.Threshold) || math.IsInf(*r.Threshold, 0)) {
			r.Threshold = nil
		}
		if len(r.Deciles) != 11 || !allFinite(r.Deciles) {
			r.Deciles = nil
		}
		if r.Assessed && r.Deciles == nil {
			r.Assessed, r.Finding, r.NotAssessed = false, false, "the collector's values were malformed"
		}
		out = append(out, r)
	}
	return out
}

func allFinite(xs []float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// CleanText returns s without control and format characters (terminal escapes,
// bidirectional overrides) and invalid UTF-8, cut to at most max bytes: text from
// elsewhere, made fit to print.
func CleanText(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			r = ' '
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
