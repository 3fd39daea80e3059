package balance

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func smallSim() SimConfig {
	c := SuperMUC()
	c.Name = "small"
	c.Nodes, c.Collectors, c.Syncs = 600, 20, 4
	c.MinJobs, c.MaxJobs = 20, 40
	c.Mix = []SizeClass{{"one", 0.2, 1, 1}, {"medium", 0.7, 2, 30}, {"big", 0.1, 31, 120}}
	c.WarmupCycles, c.Cycles = 3, 4
	return c
}

func TestSimulateDeterministic(t *testing.T) {
	for _, p := range []Placement{PlaceTree, PlaceIsland} {
		for _, o := range []Overflow{OverflowAllow, OverflowSpill} {
			cfg := smallSim()
			cfg.Placement, cfg.Overflow = p, o
			a, err := Simulate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Simulate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(a.PerCycle, b.PerCycle); diff != "" {
				t.Errorf("%s/%s: runs differ (-first +second):\n%s", p, o, diff)
			}
			if len(a.PerCycle) != 4 || a.Mean.Jobs < 10 || a.Collectors != 20 {
				t.Errorf("%s/%s: %d cycles, %.1f jobs, %d collectors", p, o, len(a.PerCycle), a.Mean.Jobs, a.Collectors)
			}
			cfg.Seed++
			c, err := Simulate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cmp.Equal(a.PerCycle, c.PerCycle) {
				t.Errorf("%s/%s: another seed gives the same cycles", p, o)
			}
		}
	}
}

// TestSuperMUCPreset checks the preset against the thesis's shape: most jobs
// exact (Table 7.5: 91%), and far fewer tree nodes used than sending
// everything up the topology (Table 7.6: 217.59 vs 905.81).
func TestSuperMUCPreset(t *testing.T) {
	cfg := SuperMUC()
	if cfg.Nodes != 9216 || cfg.Collectors != 216 || cfg.Syncs != 12 {
		t.Fatalf("preset shape %d/%d/%d", cfg.Nodes, cfg.Collectors, cfg.Syncs)
	}
	r, err := Simulate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Mean
	if m.Jobs < 150 || m.Jobs > 190 {
		t.Errorf("%.1f jobs per cycle, want 150–190", m.Jobs)
	}
	if m.ExactShareJobs < 0.88 || m.ExactShareJobs > 0.96 {
		t.Errorf("exact share %.3f, want about 0.91", m.ExactShareJobs)
	}
	if m.TreeNodesTopology < 2*m.TreeNodesBalanced {
		t.Errorf("tree nodes: balanced %.1f, topology %.1f; want topology ≥ 2× balanced", m.TreeNodesBalanced, m.TreeNodesTopology)
	}
	if r.LMax != 43 || m.MaxCollectorLoad > 43 {
		t.Errorf("l_max %d, max collector load %.1f", r.LMax, m.MaxCollectorLoad)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"SuperMUC", "216 collectors", "12 sync agents", "9216 nodes",
		"exact share (jobs in one place)", "91.0%",
		"tree nodes used per cycle, balanced", "217.59",
		"tree nodes used per cycle, up the topology", "905.81",
		"collector load max / mean", "balancing time per cycle",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteText output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}

// TestMeasuredLoadsOnTheSuperMUCMix: charging jobs a measured share of the maximum
// (persyst's frontend once collectors report it) keeps the same jobs in the same places
// and can only make more of them fit one collector: every job charged no more than under
// the assumed maximum is placed by the same algorithm with l_max unchanged. With
// SuperMUC's measured 58.3% the 44–73-node jobs fit, so the exact share rises and
// fewer tree nodes are used.
func TestMeasuredLoadsOnTheSuperMUCMix(t *testing.T) {
	maxCfg := SuperMUC()
	byMax, err := Simulate(maxCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, shares := range [][2]float64{{ThesisLoadShare, ThesisLoadShare}, {2*ThesisLoadShare - 1, 1}} {
		cfg := SuperMUC()
		cfg.MinLoadShare, cfg.MaxLoadShare = shares[0], shares[1]
		got, err := Simulate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, b := byMax.Mean, got.Mean
		if a.Jobs != b.Jobs || a.BusyNodes != b.BusyNodes || a.LocalJobs != b.LocalJobs || a.TreeNodesTopology != b.TreeNodesTopology {
			t.Errorf("%v: the job mix changed: jobs %.1f→%.1f busy %.0f→%.0f", shares, a.Jobs, b.Jobs, a.BusyNodes, b.BusyNodes)
		}
		if got.LMax != 43 {
			t.Errorf("%v: l_max %d nodes' worth, want 43", shares, got.LMax)
		}
		if b.ExactShareJobs <= a.ExactShareJobs || b.TreeNodesBalanced >= a.TreeNodesBalanced {
			t.Errorf("%v: exact share %.3f→%.3f, tree nodes %.1f→%.1f; want more exact jobs and fewer tree nodes",
				shares, a.ExactShareJobs, b.ExactShareJobs, a.TreeNodesBalanced, b.TreeNodesBalanced)
		}
		var buf bytes.Buffer
		if err := got.WriteText(&buf); err != nil || !strings.Contains(buf.String(), "loads charged: measured") {
			t.Errorf("%v: WriteText does not say the loads are measured (%v):\n%s", shares, err, buf.String())
		}
		t.Logf("loads %v: exact share %.1f%% (assumed maximum %.1f%%), tree nodes %.1f (%.1f)",
			shares, 100*b.ExactShareJobs, 100*a.ExactShareJobs, b.TreeNodesBalanced, a.TreeNodesBalanced)
	}
}

func TestParseLoadShare(t *testing.T) {
	tests := []struct {
		in     string
		lo, hi float64
		bad    bool
	}{
		{"max", 0, 0, false}, {"", 0, 0, false}, {"thesis", ThesisLoadShare, ThesisLoadShare, false},
		{"0.6", 0.6, 0.6, false}, {"0.2-1", 0.2, 1, false},
		{"0", 0, 0, true}, {"1.5", 0, 0, true}, {"0.8-0.2", 0, 0, true}, {"a-b", 0, 0, true}, {"-0.2", 0, 0, true},
	}
	for _, tc := range tests {
		lo, hi, err := ParseLoadShare(tc.in)
		if (err != nil) != tc.bad || lo != tc.lo || hi != tc.hi {
			t.Errorf("ParseLoadShare(%q) = %v, %v, %v; want %v, %v, error %v", tc.in, lo, hi, err, tc.lo, tc.hi, tc.bad)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteTextError(t *testing.T) {
	r, err := Simulate(smallSim())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteText(failWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("WriteText to a failing writer: %v", err)
	}
}

func TestSimulateConfigErrors(t *testing.T) {
	mod := func(f func(*SimConfig)) SimConfig {
		c := smallSim()
		f(&c)
		return c
	}
	tests := map[string]SimConfig{
		"no nodes":        mod(func(c *SimConfig) { c.Nodes = 0 }),
		"collectors":      mod(func(c *SimConfig) { c.Collectors = 601 }),
		"syncs":           mod(func(c *SimConfig) { c.Syncs = -1 }),
		"jobs range":      mod(func(c *SimConfig) { c.MinJobs, c.MaxJobs = 5, 4 }),
		"turnover":        mod(func(c *SimConfig) { c.Turnover = 2 }),
		"empty mix":       mod(func(c *SimConfig) { c.Mix = nil }),
		"bad class":       mod(func(c *SimConfig) { c.Mix = []SizeClass{{"x", 1, 5, 4}} }),
		"zero weights":    mod(func(c *SimConfig) { c.Mix = []SizeClass{{"x", 0, 1, 4}} }),
		"negative cycles": mod(func(c *SimConfig) { c.Cycles = -1 }),
		"placement":       mod(func(c *SimConfig) { c.Placement = 9 }),
		"overflow":        mod(func(c *SimConfig) { c.Overflow = 9 }),
		"negative lmax":   mod(func(c *SimConfig) { c.LMaxNodes = -1 }),
		"load shares":     mod(func(c *SimConfig) { c.MinLoadShare, c.MaxLoadShare = 0.8, 0.4 }),
		"load share > 1":  mod(func(c *SimConfig) { c.MaxLoadShare = 1.2 }),
	}
	for name, cfg := range tests {
		if _, err := Simulate(cfg); !errors.Is(err, ErrSimConfig) {
			t.Errorf("%s: error %v, want ErrSimConfig", name, err)
		}
	}
}

func TestParsePlacement(t *testing.T) {
	for in, want := range map[string]Placement{"tree": PlaceTree, "island": PlaceIsland, "": PlaceTree} {
		got, err := ParsePlacement(in)
		if err != nil || got != want {
			t.Errorf("ParsePlacement(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParsePlacement("random"); err == nil {
		t.Error("ParsePlacement(random): no error")
	}
}

// TestMachinePlacement checks the simulated scheduler never hands out a busy
// node and keeps the free counts right.
func TestMachinePlacement(t *testing.T) {
	cfg := smallSim()
	for _, p := range []Placement{PlaceTree, PlaceIsland} {
		cfg.Placement = p
		_, err := generate(cfg, func(tr *Tree, cycle int, jobs []Job, busy int) error {
			seen := map[string]bool{}
			n := 0
			for _, j := range jobs {
				for _, node := range j.Nodes {
					if seen[node] {
						t.Fatalf("%s: cycle %d: node %s in two jobs", p, cycle, node)
					}
					seen[node] = true
					n++
				}
			}
			if n != busy {
				t.Fatalf("%s: busy %d, counted %d", p, busy, n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Tree placement puts a job that fits one collector on one collector.
	tr, err := FlatTree(hl(t, "n[1-12]"), 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := newMachine(tr, PlaceTree)
	a := m.allocate(3)
	b := m.allocate(2) // best fit: c1 has 1 free, c2 4: goes to c2
	c := m.allocate(1) // best fit: c1's last node
	names := func(ns []int32) []string {
		var out []string
		for _, n := range ns {
			out = append(out, tr.name[n])
		}
		return out
	}
	got := [][]string{names(a), names(b), names(c)}
	want := [][]string{{"n1", "n2", "n3"}, {"n5", "n6"}, {"n4"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placement (-want +got):\n%s", diff)
	}
	if m.allocate(7) != nil {
		t.Error("allocated 7 of 6 free nodes")
	}
}
