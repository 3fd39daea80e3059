package integration

// One cause per resource, on the real cluster: while two busy threads of another
// process compete for the machine's two CPUs, a job with work for both its CPUs is
// reported starved of CPU (its CPUs look half idle only because it waited for them),
// and a job with one thread on two CPUs is still told that a CPU was left idle.

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/phases"
)

func TestCauses(t *testing.T) {
	c := startCluster(t, 1)
	_, load := binaries(t)
	node := c.nodes[0]
	// The neighbour: two busy threads outside Slurm, for as long as the jobs run.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	neighbour := exec.CommandContext(ctx, load, "spin", "-threads", "2", "-seconds", "60")
	if err := neighbour.Start(); err != nil {
		t.Fatal(err)
	}
	defer neighbour.Wait()
	defer cancel()
	for _, tc := range []struct {
		name    string
		threads int
		first   string
		notIn   string
	}{
		{"work for both CPUs, starved", 2, "cpu_starved", "idle_cores"},
		{"one thread on two CPUs", 1, "idle_cores", "cpu_starved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := c.sbatch(t, nil, "-c", "2", "-o", filepath.Join(c.work, "cause-%j.out"), "--wrap",
				load+" spin -seconds 4 -threads "+strconv.Itoa(tc.threads))
			c.waitDone(t, id, 2*time.Minute)
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			r, err := daemon.JobReport(rctx, c.socket(node), id)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, f := range r.Findings {
				keys = append(keys, f.Key)
			}
			if len(keys) == 0 || keys[0] != tc.first {
				t.Errorf("job %d: findings %v, want %s first", id, keys, tc.first)
			}
			for _, k := range keys {
				if k == tc.notIn {
					t.Errorf("job %d: findings %v include %s", id, keys, tc.notIn)
				}
			}
			// The neighbour took the job's CPUs all along: a starved job is told the time it
			// lost to other work too, in one story with its starvation.
			if in := r.Interference; tc.first == "cpu_starved" && (in == nil || in.Share < digest.InterferenceShown || len(in.Causes) == 0 || in.Causes[0].Key != phases.CauseCPU) {
				t.Errorf("job %d: starved by a neighbour, interference %+v: want time lost to other work on its CPUs", id, in)
			}
			oneStory(t, r)
			for _, p := range r.Properties {
				if p.Key == "cpu_pressure" || p.Key == "idle_cores" || p.Key == "cpu_starved" {
					t.Logf("job %d: %s median %.2f, share %.2f, finding %v %s", id, p.Key, p.Median(), p.TimeShare, p.Finding, p.Suppressed)
				}
			}
		})
	}
}
