package integration

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/daemon/measure/powercap/fakepowercap"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/sample"
)

// The FAKE RAPL counters of TestEnergy (no machine here has RAPL): the package at
// pkgWatts wrapping every 10 s (a 1 kJ range), its DRAM at dramWatts.
const (
	pkgWatts, dramWatts = 100.0, 10.0
	pkgRange            = 1_000_000_000 // µJ
)

// raplAtPower advances a fake powercap tree at pkgWatts and dramWatts, every 10 ms, until
// the test ends.
func raplAtPower(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "powercap")
	tree, err := fakepowercap.New(dir, 0, fakepowercap.Zone{Dir: "intel-rapl:0", Name: "package-0", MaxRange: pkgRange},
		fakepowercap.Zone{Dir: "intel-rapl:0:0", Name: "dram", MaxRange: 65_712_999_613})
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(dir), 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- tree.Run(ctx, map[string]float64{"intel-rapl:0": pkgWatts, "intel-rapl:0:0": dramWatts}, 10*time.Millisecond)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the fake RAPL counters: %v", err)
		}
	})
	return dir
}

// TestEnergy: every job's energy from the node's RAPL counters (a FAKE powercap tree
// advancing at a set power and wrapping, on the test cluster's node): two jobs sharing
// the node get the package's energy in proportion to the CPU time each used, adding up
// to the node's within 2 %, and say it is an estimate; a job alone on it gets the node's;
// the digest and the JSON report give it in kWh, with the site's CO2 factor.
func TestEnergy(t *testing.T) {
	defer sideBySide(t)()
	c := startCluster(t, 2, "PERSYST_CONF_EXTRA=PowercapDir="+raplAtPower(t)+"\nEnergyCO2PerKWh=400")
	out := filepath.Join(c.work, "energy-%j.out")
	on1 := []string{"-w", c.nodes[0], "-c", "1", "--mem=100M", "-o", out}
	// One job spins a CPU, the other keeps one busy about a third of the time.
	busy := c.sbatch(t, nil, append(on1, "--wrap", "timeout 12 sh -c 'while :; do :; done'; true")...)
	third := c.sbatch(t, nil, append(on1, "--wrap",
		"end=$(($(date +%s)+12)); while [ $(date +%s) -lt $end ]; do timeout 0.1 sh -c 'while :; do :; done'; sleep 0.2; done")...)
	for _, id := range []uint32{busy, third} {
		if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d: %s", id, st)
		}
	}
	checkShared(t, c, busy, third)
	alone := c.sbatch(t, nil, append(on1, "--wrap", "timeout 6 sh -c 'while :; do :; done'; true")...)
	if st := c.waitDone(t, alone, 2*time.Minute); st != "COMPLETED" {
		t.Fatalf("job %d: %s", alone, st)
	}
	r := c.jobReport(t, alone)
	e := r.Energy
	if e == nil {
		c.debugJob(t, alone)
		t.Fatalf("job %d alone on the node: no energy in its report", alone)
	}
	if want := (pkgWatts + dramWatts) * r.Seconds; math.Abs(e.Joules-want) > 0.02*want || e.Estimate || !strings.Contains(e.How, "alone") {
		t.Errorf("job %d alone on the node for %.2f s: %.1f J (%s, estimate %v), want the node's %.1f J", alone, r.Seconds, e.Joules, e.How, e.Estimate, want)
	}
	text := digest.Text(*r, digest.TextOptions{})
	b, err := os.ReadFile(strings.ReplaceAll(out, "%j", fmt.Sprint(alone)))
	t.Logf("job %d alone: %.1f J over %.2f s; its output:\n%s", alone, e.Joules, r.Seconds, b)
	if err != nil || !strings.Contains(string(b), digest.KWh(e.KWh)) || !strings.Contains(text, "g CO2e") {
		t.Errorf("job %d: its digest gives no energy (%s) and CO2 (%v):\n%s", alone, digest.KWh(e.KWh), err, b)
	}
}

// checkShared checks the energies of two jobs that shared a node: over the intervals both
// were measured in, in proportion to the CPU time each used (within 5 %, below) and adding
// up to the node's (within 2 %); said to be estimates.
func checkShared(t *testing.T, c *cluster, a, b uint32) {
	t.Helper()
	node := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := daemon.JobSamples(ctx, c.socket(node), a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := daemon.JobSamples(ctx, c.socket(node), b)
	if err != nil {
		t.Fatal(err)
	}
	j := fakepowercap.Together(sa, sb, sample.EnergyPkgJoules)
	ea, eb, ca, cb, secs, intervals := j.A, j.B, j.CPUA, j.CPUB, j.Seconds, j.Intervals
	t.Logf("jobs %d and %d on %s: %d intervals together, %.2f s; package energy %.1f J and %.1f J (node %.1f J); CPU time %.2f s and %.2f s; worst interval %.2f %% off",
		a, b, node, intervals, secs, ea, eb, pkgWatts*secs, ca, cb, 100*j.Worst)
	if intervals < 5 || cb == 0 || eb == 0 {
		for _, id := range []uint32{a, b} {
			c.debugJob(t, id)
			t.Logf("job %d: not assessed %+v", id, c.jobReport(t, id).NotAssessed)
		}
		t.Fatalf("jobs %d and %d: %d intervals measured together, want 5 or more with energy and CPU time", a, b, intervals)
	}
	// The share is taken in Slurm's job cgroup, which counts slurmstepd's work for the
	// job as well; the samples' CPU time is the job's tasks' (persyst's own cgroup): the
	// two differ by up to 4 % here (one interval up to 7 %), most for the job that starts
	// a process three times a second.
	if got, want := ea/eb, ca/cb; math.Abs(got-want) > 0.05*want {
		t.Errorf("energy %.3f times the other's, CPU time %.3f times: want them within 5 %%", got, want)
	}
	if sum, node := ea+eb, pkgWatts*secs; math.Abs(sum-node) > 0.02*node {
		t.Errorf("the jobs' shares add up to %.1f J, the node counted %.1f J: want them within 2 %%", sum, node)
	}
	for _, id := range []uint32{a, b} {
		if e := c.jobReport(t, id).Energy; e == nil || !e.Estimate || !strings.Contains(e.How, "an estimate") {
			t.Errorf("job %d shared the node: its energy %+v, want one said to be an estimate", id, e)
		}
	}
}
