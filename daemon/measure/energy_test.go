package measure

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/daemon/measure/powercap/fakepowercap"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// energyNode is a fake node: Slurm's cgroup v2 scope of all jobs with two jobs and
// slurmstepd's own cgroup (system) in it, and
// a FAKE powercap tree (no machine here has RAPL) of one package and its DRAM, whose
// package counter wraps at 250 J.
type energyNode struct {
	root string
	tree *fakepowercap.Tree
	cpu  map[string]int // µs of CPU time by cgroup directory
	mem  map[string]int
}

const scope = "/sys/fs/cgroup/system.slice/slurmstepd.scope"

func newEnergyNode(t *testing.T) *energyNode {
	t.Helper()
	root := t.TempDir()
	tree, err := fakepowercap.New(filepath.Join(root, "sys/class/powercap"), 0,
		fakepowercap.Zone{Dir: "intel-rapl:0", Name: "package-0", MaxRange: 250_000_000},
		fakepowercap.Zone{Dir: "intel-rapl:0:0", Name: "dram", MaxRange: 65_712_999_613})
	if err != nil {
		t.Fatal(err)
	}
	n := &energyNode{root: root, tree: tree, cpu: map[string]int{}, mem: map[string]int{}}
	for _, d := range []string{scope, scope + "/job_1", scope + "/job_2", scope + "/system"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{scope + "/job_1", scope + "/job_2", scope + "/system"} {
		n.set(t, d, 0, 0)
	}
	return n
}

// env is the node's environment for meters of the energy source alone, its clock at
// *now, its counters opened.
func (n *energyNode) env(now *time.Time) *Env {
	host := hostfs.New(n.root)
	stats := cgstats.NewReader(host, cgstats.Options{})
	env := &Env{Host: host, Stats: stats, Log: zerolog.Nop(), Now: func() time.Time { return *now },
		Enable: map[string]bool{"perf": false, "procio": false, "schedstat": false, "outside": false, "suspend": false, "netdev": false, "infiniband": false, "gpu": false, "syscalls": false}}
	env.NodeEnergy = OpenNodeEnergy(host, "", stats, env.Now, zerolog.Nop())
	return env
}

// set writes a cgroup's CPU time (µs) and memory, and its scope's: the sum of the jobs'
// and slurmstepd's own (system).
func (n *energyNode) set(t *testing.T, dir string, cpuUs, mem int) {
	t.Helper()
	n.cpu[dir], n.mem[dir] = cpuUs, mem
	us, m := 0, 0
	for _, d := range []string{scope + "/job_1", scope + "/job_2", scope + "/system"} {
		us, m = us+n.cpu[d], m+n.mem[d]
	}
	for d, v := range map[string][2]int{dir: {cpuUs, mem}, scope: {us, m}} {
		for name, content := range map[string]string{
			"cpu.stat":       "usage_usec " + itoa(v[0]) + "\nuser_usec " + itoa(v[0]) + "\nsystem_usec 0\n",
			"memory.current": itoa(v[1]) + "\n",
		} {
			if err := os.WriteFile(filepath.Join(n.root, d, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEnergyShares: two jobs on a shared node get the package's energy by the CPU time
// each used and the DRAM's by the memory each holds, adding up to the node's; a job
// alone gets all; an interval with a counter reset is not measured, never negative; an
// interval in which no job used the CPUs is shared by the CPUs each holds.
func TestEnergyShares(t *testing.T) {
	n := newEnergyNode(t)
	now := time.Unix(1_800_000_000, 0)
	env := n.env(&now)
	if env.NodeEnergy.How != "RAPL (powercap)" {
		t.Fatalf("energy counters: %q (%s), want the fake powercap tree", env.NodeEnergy.How, env.NodeEnergy.Why)
	}
	alone := false
	open := func(job string, share float64) *Meter {
		m, err := Open(env, Spec{Name: job, CPUs: []int{0}, StatCgroups: map[string]string{"unified": scope + "/" + job},
			Exclusive: func() bool { return alone },
			CPUShare:  func() float64 { return share }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Read(sample.Start); err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := open("job_1", 0.75), open("job_2", 0.25)
	type interval struct {
		name         string
		pkg, dram    float64 // joules the node counted
		reset        bool    // the package counter reads 0 (a reset)
		cpuA, cpuB   int     // µs each job used
		memA, memB   int
		alone        bool // job_2 is not running: job_1 has the node
		wantA, wantB string
		wantDRAMA    string
	}
	var got, want []string
	cpuA, cpuB, stepd := 0, 0, 0
	for _, iv := range []interval{
		{name: "busy 3:1, memory 1:3", pkg: 100, dram: 20, cpuA: 750_000, cpuB: 250_000, memA: 100, memB: 300, wantA: "75.00", wantB: "25.00", wantDRAMA: "5.00"},
		{name: "busy 1:1", pkg: 100, dram: 20, cpuA: 500_000, cpuB: 500_000, memA: 100, memB: 100, wantA: "50.00", wantB: "50.00", wantDRAMA: "10.00"},
		{name: "the package counter wraps at 250 J", pkg: 100, dram: 20, cpuA: 500_000, cpuB: 500_000, memA: 100, memB: 100, wantA: "50.00", wantB: "50.00", wantDRAMA: "10.00"},
		{name: "no job used a CPU: by the CPUs held", pkg: 40, dram: 4, memA: 100, memB: 100, wantA: "30.00", wantB: "10.00", wantDRAMA: "2.00"},
		{name: "a reset", pkg: 10, dram: 4, reset: true, cpuA: 100, cpuB: 100, memA: 1, memB: 1, wantA: "-", wantB: "-", wantDRAMA: "2.00"},
		{name: "job_2 ended: its share by CPU time is all", pkg: 50, dram: 5, alone: true, cpuA: 500_000, memA: 1, wantA: "50.00", wantB: "-", wantDRAMA: "5.00"},
		{name: "alone from start to end of the interval, idle", pkg: 50, dram: 5, alone: true, memA: 1, wantA: "50.00", wantB: "-", wantDRAMA: "5.00"},
	} {
		now = now.Add(time.Second)
		if err := n.tree.Add("intel-rapl:0", iv.pkg); err != nil {
			t.Fatal(err)
		}
		if err := n.tree.Add("intel-rapl:0:0", iv.dram); err != nil {
			t.Fatal(err)
		}
		if iv.reset {
			if err := n.tree.Set("intel-rapl:0", 0); err != nil {
				t.Fatal(err)
			}
		}
		cpuA, cpuB = cpuA+iv.cpuA, cpuB+iv.cpuB
		stepd += 300_000 // slurmstepd's own: no job's
		n.set(t, scope+"/system", stepd, 50)
		n.set(t, scope+"/job_1", cpuA, iv.memA)
		n.set(t, scope+"/job_2", cpuB, iv.memB)
		alone = iv.alone
		sa, _ := a.Read(sample.Cycle)
		row := []string{iv.name, joules(sa, sample.EnergyPkgJoules), joules(sa, sample.EnergyRAMJoules)}
		want = append(want, strings.Join([]string{iv.name, iv.wantA, iv.wantDRAMA}, " "))
		if !iv.alone {
			sb, _ := b.Read(sample.Cycle)
			row = append(row, joules(sb, sample.EnergyPkgJoules))
			want[len(want)-1] += " " + iv.wantB
			if pa, ok := sa.Job[sample.EnergyPkgJoules]; ok {
				if sum := pa + sb.Job[sample.EnergyPkgJoules]; sum < iv.pkg*0.999 || sum > iv.pkg*1.001 {
					t.Errorf("%s: the jobs' shares add up to %.3f J, the node counted %.0f J", iv.name, sum, iv.pkg)
				}
			}
		}
		got = append(got, strings.Join(row, " "))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("energy per interval: name, job_1's package and DRAM joules, job_2's package joules (-want +got):\n%s", diff)
	}
	sum := a.Summary()
	if how := sum.Methods[sample.MethodEnergy]; !strings.Contains(how, "RAPL (powercap)") || !strings.Contains(how, "an estimate") || !strings.Contains(how, "alone") {
		t.Errorf("how job_1's energy was measured: %q, want RAPL (powercap), alone and shared (an estimate)", how)
	}
}

func joules(s sample.Sample, name string) string {
	v, ok := s.Job[name]
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// fakeMeter is a FAKE node power meter (no machine here has a BMC): joules the test
// adds, and an error while it is down.
type fakeMeter struct {
	joules float64
	down   error
}

func (f *fakeMeter) Read(time.Time) (float64, int, error) { return f.joules, 0, f.down }
func (f *fakeMeter) Name() string                         { return "the node's meter (FAKE)" }

// TestEnergyNodeMeter: the node's own meter is shared out by CPU time like the
// packages' RAPL counter; an interval it gave no reading in is counted as missed, and
// the job's energy is then said to be RAPL's alone.
func TestEnergyNodeMeter(t *testing.T) {
	n := newEnergyNode(t)
	now := time.Unix(1_800_000_000, 0)
	env := n.env(&now)
	meter := &fakeMeter{}
	env.NodeEnergy.Meter = meter
	open := func(job string) *Meter {
		m, err := Open(env, Spec{Name: job, CPUs: []int{0}, StatCgroups: map[string]string{"unified": scope + "/" + job},
			Exclusive: func() bool { return false }, CPUShare: func() float64 { return 0.5 }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Read(sample.Start); err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := open("job_1"), open("job_2")
	var got []string
	cpuA, cpuB := 0, 0
	for i, down := range []bool{false, false, true, false} {
		now = now.Add(time.Second)
		n.tree.Add("intel-rapl:0", 100)
		n.tree.Add("intel-rapl:0:0", 10)
		meter.joules += 300
		meter.down = nil
		if down {
			meter.down = errors.New("the node's power meter (BMC) has not answered since 10:00:01: timeout")
		}
		cpuA, cpuB = cpuA+750_000, cpuB+250_000
		n.set(t, scope+"/job_1", cpuA, 100)
		n.set(t, scope+"/job_2", cpuB, 300)
		sa, _ := a.Read(sample.Cycle)
		sb, _ := b.Read(sample.Cycle)
		got = append(got, fmt.Sprintf("%d: node %s %s, missed %s, package %s", i, joules(sa, sample.EnergyNodeJoules), joules(sb, sample.EnergyNodeJoules),
			joules(sa, sample.EnergyNodeMissedSeconds), joules(sa, sample.EnergyPkgJoules)))
	}
	want := []string{
		"0: node 225.00 75.00, missed -, package 75.00",
		// The meter down at the interval's end, and at the next one's start.
		"1: node 225.00 75.00, missed -, package 75.00",
		"2: node - -, missed 1.00, package 75.00",
		"3: node - -, missed 1.00, package 75.00",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("per interval: job_1's and job_2's shares of the node's meter, job_1's seconds missed and package (-want +got):\n%s", diff)
	}
	how := a.Summary().Methods[sample.MethodEnergy]
	if !strings.Contains(how, "gave no reading for 2 s") || !strings.Contains(how, "RAPL's alone") || !strings.Contains(how, "timeout") {
		t.Errorf("how job_1's energy was measured: %q, want the meter's gap said, and RAPL alone", how)
	}
}
