package properties

// The engine: the catalog compiled into slots and closures once, and its settings.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr"

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
	p     *Property
	i     int    // in Accumulator.accs
	key   string // p.Key()
	fast  numFn  // nil: expr's VM runs p.value
	value []int  // slots of the names the value uses
	// optional[k] says that value[k] counts as 0 where it was not measured.
	optional []bool
	thr      float64
	hasThr   bool
	thrWhy   string
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
	io                                                    [4]int // ioNames' slots
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
					pe.optional = append(pe.optional, slices.Contains(p.Optional, name))
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
		{&f.io[0], ioNames[0].name}, {&f.io[1], ioNames[1].name}, {&f.io[2], ioNames[2].name}, {&f.io[3], ioNames[3].name},
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
	if _, ok := cfg.Calibration[NameSyscallSeconds]; !ok {
		// Not measured here (an agent of the tree, a test): today's servers' value.
		c := maps.Clone(cfg.Calibration)
		if c == nil {
			c = map[string]float64{}
		}
		c[NameSyscallSeconds] = defaultSyscallSeconds
		cfg.Calibration = c
		e.cfg.Calibration = c
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
