package integration

// How a job ended leads its digest, on the real cluster: a batch script that exits 42, a
// job cancelled with scancel, a job killed at its time limit, and one killed by the
// kernel for lack of memory (the cluster holds jobs to their --mem: cgroup.conf
// ConstrainRAMSpace=yes). Each digest names the end first, and the JSON report says the
// state Slurm gives the job.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
)

func TestEndStates(t *testing.T) {
	defer sideBySide(t)()
	c := startCluster(t, 2)
	_, load := binaries(t)
	out := func(id uint32) string {
		return filepath.Join(c.work, "end-"+strconv.FormatUint(uint64(id), 10)+".out")
	}
	cases := []struct {
		name  string
		args  []string
		after func(t *testing.T, id uint32) // what happens to the running job
		state string                        // Slurm's final state, and the digest's
		event string                        // the first event's key
		words string                        // in the digest's text
		note  string                        // the note's key (a job that ended well)
	}{
		{name: "time limit", args: []string{"-t", "1", "--wrap", "sleep 300"}, state: "TIMEOUT", event: "timeout",
			words: "reached its time limit (1m 00s)"},
		{name: "exit 42", args: []string{"--wrap", "echo working; sleep 3; exit 42"}, state: "FAILED", event: "failed",
			words: "ended with exit code 42"},
		{name: "cancelled", args: []string{"--wrap", "sleep 120"}, state: "CANCELLED", event: "cancelled", words: "was cancelled after",
			after: func(t *testing.T, id uint32) {
				waitSamples(t, c, id, 3)
				if o, e, err := c.run(t, nil, "scancel", strconv.FormatUint(uint64(id), 10)); err != nil {
					t.Fatalf("scancel: %v %s%s", err, o, e)
				}
			}},
		// Slurm holds the job to --mem (CR_Core_Memory, ConstrainRAMSpace): the kernel kills
		// for real, late (memory grows for seconds first) or as the program starts.
		{name: "out of memory", args: []string{"--mem=128M", "--wrap", "sleep 4; " + load + " alloc -mib 400 -steps 8 -step-seconds 0.5 -hold 2; echo after"},
			state: "OUT_OF_MEMORY", event: "oom_kill", words: "of the 128.0 MiB requested"},
		// The program runs out of memory as it starts, which must be named even within
		// the job's unjudged start-up.
		{name: "out of memory at start", args: []string{"--mem=128M", "--wrap", load + " alloc -mib 400 -steps 1 -hold 2; echo after"},
			state: "OUT_OF_MEMORY", event: "oom_kill", words: "killed for lack of memory"},
		// Close to the limit without a kill: a note after the findings, no event.
		{name: "memory near the limit", args: []string{"--mem=200M", "--wrap", load + " alloc -mib 185 -steps 2 -step-seconds 0.5 -hold 4"},
			state: "COMPLETED", note: "memory_near_limit", words: "Note: Memory came close to the limit: the job used"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := c.sbatch(t, nil, append([]string{"-o", filepath.Join(c.work, "end-%j.out")}, tc.args...)...)
			if tc.after != nil {
				tc.after(t, id)
			}
			if st := c.waitDone(t, id, 4*time.Minute); st != tc.state {
				t.Fatalf("job %d ended %s in Slurm, want %s", id, st, tc.state)
			}
			b, err := os.ReadFile(out(id))
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Join(strings.Fields(string(b)), " ")
			host := c.jobInfo(t, id)["BatchHost"]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := daemon.JobReport(ctx, c.socket(host), id)
			if err != nil {
				t.Fatal(err)
			}
			if tc.note != "" {
				if len(r.Events) != 0 || len(r.Notes) != 1 || r.Notes[0].Key != tc.note || !strings.Contains(text, tc.words) {
					t.Errorf("job %d: events %+v, notes %+v, want the note %s and no event; output:\n%s", id, r.Events, r.Notes, tc.note, b)
				}
				t.Logf("digest of job %d (%s):\n%s", id, tc.state, b)
				return
			}
			if !strings.Contains(text, "! ") || !strings.Contains(text, tc.words) {
				t.Errorf("digest of job %d does not say %q first:\n%s", id, tc.words, b)
			}
			if r.EndState == nil || r.EndState.State != tc.state || len(r.Events) == 0 || r.Events[0].Key != tc.event {
				t.Errorf("report of job %d: end %+v, events %+v; want %s first with %s", id, r.EndState, r.Events, tc.event, tc.state)
			}
			t.Logf("digest of job %d (%s):\n%s", id, tc.state, b)
		})
	}
}

// waitSamples waits until a job has k samples on some node.
func waitSamples(t *testing.T, c *cluster, id uint32, k int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			for _, st := range c.statuses(t, n) {
				if st.JobID == id && st.Measurement != nil && st.Measurement.Samples >= k {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("job %d never had %d samples", id, k)
}
