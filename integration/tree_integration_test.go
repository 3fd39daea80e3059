package integration

// The agent tree on the test cluster: 4 nodes, 2 collectors, a sync agent above them and a
// frontend, each in its own network namespace. The frontend balances the jobs it reads
// from Slurm and pushes routes; node daemons send their jobs' records to the routed
// collector; jobs split over both collectors are merged at the sync agent; at a
// multi-node job's end the batch host fetches the job-wide results from the job's
// aggregation point and its digest covers all nodes.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
)

// treeCluster is the tree's test cluster, with how its tests submit jobs and read their
// output.
type treeCluster struct {
	c    *cluster
	load string
}

// newTreeCluster starts it. l_max 2: a collector takes 2 nodes, so the 4-node jobs are
// split over both collectors and merged at the sync agent; the 2-node jobs are exact on
// one collector. The frontend charges every job the assumed maximum (PerSyst's
// balancing) until TestTreeAgents' last subtest restarts it on measured loads.
// loads is how the frontend charges a job: "max" (a node's share at most) or "measured".
func newTreeCluster(t *testing.T, loads string) *treeCluster {
	c := startCluster(t, 4, "PERSYST_COLLECTORS=2", "PERSYST_LMAX=2", "PERSYST_SYNCS=1", "PERSYST_LOADS="+loads)
	_, load := binaries(t)
	return &treeCluster{c: c, load: load}
}

func (tc *treeCluster) out(id uint32) string {
	b, _ := os.ReadFile(filepath.Join(tc.c.work, fmt.Sprintf("tree-%d.out", id)))
	return string(b)
}

func (tc *treeCluster) submit(t *testing.T) func(args ...string) uint32 {
	return func(args ...string) uint32 {
		return tc.c.sbatch(t, nil, append([]string{"-o", filepath.Join(tc.c.work, "tree-%j.out")}, args...)...)
	}
}

// imbalanced is a 4-node job whose node 4 idles while the others spin: only the job-wide
// view shows it. The four nodes share this machine's two cores, and Slurm gives each
// node's part core 0: the three spinners also wait for a CPU, a finding of their own,
// and which of the two leads is a matter of a few percent (22.05 and 24.11 ordered them
// differently).
func (tc *treeCluster) imbalanced() string {
	return "#!/bin/sh\nsrun -N4 -n4 sh -c 'if [ \"$SLURM_NODEID\" = 3 ]; then sleep 5; else " + tc.load + " spin -seconds 5; fi'\n"
}

// TestTree: what the tree's digests judge (the imbalance between a 4-node job's nodes,
// a site-wide I/O episode), and the pictures of the 4-node job. The tree's other tests,
// which judge no CPU time, are TestTreeAgents.
func TestTree(t *testing.T) {
	tc := newTreeCluster(t, "max")
	c, load, out, submit, imbalanced := tc.c, tc.load, tc.out, tc.submit(t), tc.imbalanced()

	var fourNode uint32
	t.Run("4-node job: digest covers all nodes, imbalance between nodes", func(t *testing.T) {
		id := submit("-N4", "--wrap", imbalanced)
		fourNode = id
		if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", id, st)
		}
		text := out(id)
		if !strings.Contains(text, "on 4 nodes") {
			t.Errorf("the digest does not cover the 4 nodes:\n%s", text)
		}
		// The ranking is the report's (the digest's text may hold fewer findings when
		// its notes, of the interference this machine's shared cores cause, are long).
		r := c.jobReport(t, id)
		if !imbalanceLeads(r) || !strings.Contains(text, "1. "+r.Findings[0].Name) {
			t.Errorf("no inter-node imbalance among the leading findings (%v):\n%s", findingKeys(r), text)
		}
		// The tree carries records, not phases: the batch host asked the nodes for
		// theirs, and names the one that slept while the others computed.
		if a := r.Alike; a == nil || len(a.Unlike) != 1 || a.Unlike[0].Node != c.nodes[3] ||
			!strings.Contains(strings.Join(strings.Fields(text), " "), c.nodes[3]+" behaved unlike the job's other nodes") {
			t.Errorf("job %d: alikeness %+v, want %s unlike the rest, and said:\n%s", id, a, c.nodes[3], text)
		}
		// The job was split over the collectors (no exact placement) and merged at the
		// sync agent, which kept the merged cycles and the job's report.
		front := c.readLog(t, "frontend")
		if !strings.Contains(front, `"jobs":1,"exact_share":0`) || !strings.Contains(front, fmt.Sprintf(`"job_%d":"%s"`, id, c.syncAddr(t, "sync1"))) {
			t.Errorf("the 4-node job was not split over the collectors and aggregated at sync1:\n%s", tail(front, 5))
		}
		o, _, err := c.run(t, nil, persystBin(), "report", "--db",
			filepath.Join(c.dir, "run", "sync1.db"), strconv.FormatUint(uint64(id), 10))
		if err != nil || !strings.Contains(o, "on 4 nodes") {
			t.Errorf("the sync agent's database has no 4-node report of job %d (%v):\n%s", id, err, o)
		}
		if n := c.dbCycles(t, "sync1", id); n < 2 {
			t.Errorf("the sync agent merged %d cycles of job %d, want its cycles", n, id)
		}
	})

	t.Run("4 jobs stalled on I/O at once: a site-wide episode", func(t *testing.T) {
		// Each node's job reads a file of its own page by page from storage, the page
		// cache dropped after each pass (major faults): the four share this machine's
		// disk, and stall on it together. It runs before the pictures, whose browser's
		// processes may still be exiting: after them, a CI run read 70 % of the four
		// jobs' time lost to other work on the CPUs, their I/O waits under io_wait's
		// threshold, and no episode.
		dir := filepath.Join(c.work, "episode")
		if err := os.MkdirAll(dir, 0o777); err != nil || os.Chmod(dir, 0o777) != nil {
			t.Fatal(err)
		}
		var ids []uint32
		for i, n := range c.nodes {
			f := filepath.Join(dir, fmt.Sprintf("m%d", i))
			ids = append(ids, submit("-w", n, "--wrap", load+" mapread -file "+f+" -mib 128 -seconds 15"))
		}
		told := 0
		for _, id := range ids {
			c.waitDone(t, id, 3*time.Minute)
			r := c.jobReport(t, id)
			for _, e := range r.Episodes {
				t.Logf("job %d: episode %s-%s, %d of %d jobs stalled", id, e.From.Format("15:04:05"), e.To.Format("15:04:05"), e.Stalled, e.Jobs)
			}
			if len(r.Episodes) > 0 && strings.Contains(strings.Join(strings.Fields(out(id)), " "), "stalled on I/O at once, this one among them") {
				told++
			}
		}
		st, err := store.Open(context.Background(), filepath.Join(c.dir, "run", "frontend.db"), store.Options{})
		if err != nil {
			t.Fatalf("frontend database: %v", err)
		}
		defer st.Close()
		kept, err := st.Episodes(context.Background(), time.Now().Add(-time.Hour), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(kept) == 0 || told < 3 {
			for _, id := range ids {
				t.Logf("job %d:\n%s", id, out(id))
			}
			t.Errorf("%d of the 4 jobs told of a site-wide episode, %d episodes kept (%+v): want 3 or more told, one kept", told, len(kept), kept)
		}
	})

	t.Run("pictures: the 4-node job's HTML report and the web view, in a browser", func(t *testing.T) {
		if fourNode == 0 {
			t.Skip("the 4-node job failed")
		}
		testPictures(t, c, fourNode)
	})

}

// TestTreeAgents: the tree's jobs follow the balancing, and a job's digest appears when
// its sync agent or collector dies mid-job (TestTreeLoads: measured loads, an intruder).
// Nothing here is judged by CPU time: it runs beside other tests.
func TestTreeAgents(t *testing.T) {
	defer sideBySide(t)()
	tc := newTreeCluster(t, "max")
	c, load, out, submit, imbalanced := tc.c, tc.load, tc.out, tc.submit(t), tc.imbalanced()

	t.Run("jobs of several sizes together follow the balancing", func(t *testing.T) {
		ids := []uint32{
			submit("-N4", "--wrap", "srun -N4 "+load+" spin -seconds 3"),
			submit("-N2", "--wrap", "srun -N2 "+load+" spin -seconds 3"),
			submit("-N2", "--wrap", "srun -N2 "+load+" spin -seconds 3"),
			submit("-N1", "--wrap", load+" spin -seconds 2"),
			submit("-N1", "--wrap", load+" spin -seconds 2"),
		}
		for _, id := range ids {
			if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
				t.Fatalf("job %d ended %s", id, st)
			}
		}
		front := c.readLog(t, "frontend")
		if !strings.Contains(front, `"routes pushed"`) || strings.Contains(front, "unreached_") {
			t.Errorf("the frontend did not push routes to every node:\n%s", tail(front, 5))
		}
		// The 2-node jobs were exact on one collector, whose database keeps their
		// job-wide report (`persyst report --db`).
		for _, id := range ids[1:3] {
			found := false
			for _, col := range []string{"col1", "col2"} {
				o, _, err := c.run(t, nil, persystBin(), "report", "--db",
					filepath.Join(c.dir, "run", col+".db"), strconv.FormatUint(uint64(id), 10))
				found = found || (err == nil && strings.Contains(o, "job "+strconv.FormatUint(uint64(id), 10)))
			}
			if !found {
				t.Errorf("no collector database has the job-wide report of job %d", id)
			}
		}
		// Multi-node jobs' digests cover their nodes; one-node jobs stay local.
		for i, id := range ids {
			want := []string{"on 4 nodes", "on 2 nodes", "on 2 nodes"}
			text := out(id)
			if i < 3 && !strings.Contains(text, want[i]) && !strings.Contains(text, "no issues found") {
				t.Errorf("job %d digest:\n%s", id, text)
			}
			if i < 3 {
				rep := c.jobReport(t, id)
				if len(rep.Nodes) != []int{4, 2, 2}[i] {
					t.Errorf("job %d report covers %v", id, rep.Nodes)
				}
			}
		}
	})

	t.Run("the sync agent dies mid-job: merged at the frontend, the digest still appears", func(t *testing.T) {
		id := submit("-N4", "--wrap", imbalanced)
		c.waitRunning(t, id)
		time.Sleep(2 * time.Second)
		c.harness(t, "sync-stop", "sync1")
		if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", id, st)
		}
		// It covers the 4 nodes; what it finds is TestTree's to judge (tests run beside
		// this one on the machine's two cores).
		text := out(id)
		if !strings.Contains(text, "on 4 nodes") {
			t.Errorf("after the sync agent died the digest does not cover the 4 nodes:\n%s", text)
		}
		front := c.readLog(t, "frontend")
		if !strings.Contains(front, `"sync":"sync1"`) || !strings.Contains(front, fmt.Sprintf(`"job_%d":"%s"`, id, c.frontAddr(t))) {
			t.Errorf("the frontend did not take over the job from the dead sync agent:\n%s", tail(front, 5))
		}
		if n := c.dbCycles(t, "frontend", id); n < 1 {
			t.Errorf("the frontend merged no cycle of job %d after the sync agent died", id)
		}
		c.harness(t, "sync-start", "sync1")
	})

	t.Run("a collector dies mid-job: the digest still appears", func(t *testing.T) {
		id := submit("-N4", "--wrap", imbalanced)
		// Wait until the job runs and the collectors have its cycles.
		c.waitRunning(t, id)
		time.Sleep(2 * time.Second)
		c.harness(t, "collector-stop", "col1")
		if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", id, st)
		}
		text := out(id)
		if !strings.Contains(text, "persyst: job "+strconv.FormatUint(uint64(id), 10)) {
			t.Fatalf("no digest after a collector died:\n%s", text)
		}
		if !strings.Contains(text, "on 4 nodes") {
			t.Errorf("after the reroute the digest does not cover the 4 nodes:\n%s", text)
		}
		front := c.readLog(t, "frontend")
		if !strings.Contains(front, `"collectors":["col2"]`) {
			t.Errorf("the frontend did not leave col1 out:\n%s", tail(front, 5))
		}
	})
}

// TestTreeLoads: the frontend balances on the loads the daemons measured, and an intruder
// on the tree's network is refused. Apart from TestTreeAgents (a cluster of its own) so
// that the two, each about 100 s under load, run side by side rather than one after the
// other; nothing here is judged by CPU time either.
func TestTreeLoads(t *testing.T) {
	defer sideBySide(t)()
	tc := newTreeCluster(t, "measured")
	c, load, out, submit := tc.c, tc.load, tc.out, tc.submit(t)

	t.Run("measured loads: the real daemons' record counts decide the placement", func(t *testing.T) {
		id := submit("-N4", "--wrap", "srun -N4 "+load+" spin -seconds 6")
		if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", id, st)
		}
		if text := out(id); !strings.Contains(text, "on 4 nodes") && !strings.Contains(text, "no issues found") {
			t.Errorf("job %d digest:\n%s", id, text)
		}
		cols := map[string]bool{c.agentAddr(t, "Collector", "col1"): true, c.agentAddr(t, "Collector", "col2"): true}
		measured, last := 0, ""
		for _, l := range strings.Split(c.readLog(t, "frontend"), "\n") {
			var ev map[string]any
			if json.Unmarshal([]byte(l), &ev) != nil || ev["message"] != "routes pushed" {
				continue
			}
			share, ok := ev[fmt.Sprintf("share_%d", id)].(float64)
			if !ok {
				continue
			}
			measured++
			agg, _ := ev[fmt.Sprintf("job_%d", id)].(string)
			if share <= 0 || share > 1 {
				t.Errorf("measured share %v of job %d is not in (0, 1]", share, id)
			}
			// l_max is 2 nodes' worth: the job fits one collector iff its 4 nodes' measured
			// share (in thousandths, rounded up) adds up to at most that.
			fits := 4*int(math.Ceil(share*1000)) <= 2*1000
			last = fmt.Sprintf("share %.3f per node, aggregated at %s (exact on a collector: %v)", share, agg, cols[agg])
			if fits != cols[agg] {
				t.Errorf("share %.3f × 4 nodes vs l_max 2: fits one collector = %v, but the job's aggregation point is %s", share, fits, agg)
			}
		}
		if measured == 0 {
			t.Errorf("the frontend never logged a measured load of job %d:\n%s", id, tail(c.readLog(t, "frontend"), 5))
		}
		t.Logf("job %d: %d cycles balanced on its measured load; last: %s", id, measured, last)
	})

	t.Run("an intruder on the network: refused, and no agent calls an address it names", func(t *testing.T) {
		testIntruder(t, c, submit, out)
	})
}

func (c *cluster) waitRunning(t *testing.T, id uint32) {
	t.Helper()
	if !poll(time.Now().Add(time.Minute), func() bool { return c.jobInfo(t, id)["JobState"] == "RUNNING" }) {
		t.Fatalf("job %d does not start", id)
	}
}

// syncAddr reads a sync agent's address from the cluster's tree description.
func (c *cluster) syncAddr(t *testing.T, name string) string {
	t.Helper()
	return c.agentAddr(t, "Sync", name)
}

// agentAddr reads an agent's address from the cluster's tree description (kind "Sync" or
// "Collector").
func (c *cluster) agentAddr(t *testing.T, kind, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "etc", "tree.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, kind+"="+name+" ") {
			if _, a, ok := strings.Cut(l, "Addr="); ok {
				return a
			}
		}
	}
	t.Fatalf("no address of %s in tree.conf:\n%s", name, b)
	return ""
}

// frontAddr is the frontend's aggregation address (its --listen).
func (c *cluster) frontAddr(t *testing.T) string {
	t.Helper()
	a := c.syncAddr(t, "sync1")
	host, _, _ := strings.Cut(a, ":")
	return host[:strings.LastIndexByte(host, '.')] + ".99:16832"
}

// dbCycles counts the cycles an agent's database holds of a job.
func (c *cluster) dbCycles(t *testing.T, agent string, id uint32) int {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(c.dir, "run", agent+".db"), store.Options{})
	if err != nil {
		t.Fatalf("%s database: %v", agent, err)
	}
	defer st.Close()
	cs, err := st.Cycles(context.Background(), id, "cpu_user_pct")
	if err != nil {
		t.Fatal(err)
	}
	return len(cs)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// jobReport asks the job's batch host for its whole report (for up to 5 s: the digest
// may still be in the making).
func (c *cluster) jobReport(t *testing.T, id uint32) *digest.Report {
	t.Helper()
	node := c.jobInfo(t, id)["BatchHost"]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	for range 50 {
		var r *digest.Report
		if r, err = daemon.JobReport(ctx, c.socket(node), id); err == nil {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("report of job %d from %s: %v", id, node, err)
	return nil
}

// imbalanceLeads says whether a digest's first or second finding is the load imbalance
// between nodes (the other: the spinners' wait for the shared core, see TestTree).
// imbalanceLeads says whether the imbalance between nodes is the report's first
// finding, or its second after the wait for the cores the nodes share here.
func imbalanceLeads(r *digest.Report) bool {
	f := r.Findings
	return len(f) > 0 && f[0].Key == "inter_node_imbalance" ||
		len(f) > 1 && f[1].Key == "inter_node_imbalance" && (f[0].Key == "cpu_pressure" || f[0].Key == "cpu_starved")
}

func findingKeys(r *digest.Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Key)
	}
	return out
}
