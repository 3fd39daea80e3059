package integration

// Every job's digest covers the whole job or says what it misses, on the real cluster:
// a batch host's daemon killed in the middle of a job and started after it ended (no
// ghost job, persyst's cgroup removed, the digest written late and marked so), a daemon
// restarted in the middle of a job (the digest covers the job from its start and names
// the stretch no daemon measured), a daemon hung at a job's start (the digest names the
// stretch before measurement began), a 3-node job without a collector tree (the digest
// says it covers 1 of 3 nodes), array tasks named as Slurm names them, and an
// interactive job's report.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
)

func TestCoverage(t *testing.T) {
	defer sideBySide(t)()
	c := startCluster(t, 3)
	persyst, _ := binaries(t)
	out := func(name string, id uint32) string {
		return filepath.Join(c.work, strings.ReplaceAll(name, "%j", strconv.FormatUint(uint64(id), 10)))
	}
	read := func(t *testing.T, p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	report := func(t *testing.T, node string, id uint32) *digest.Report {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := daemon.JobReport(ctx, c.socket(node), id)
		if err != nil {
			t.Fatalf("report of job %d on %s: %v", id, node, err)
		}
		return r
	}
	// running waits until node's daemon has k samples of job id.
	running := func(t *testing.T, node string, id uint32, k int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			for _, st := range c.statuses(t, node) {
				if st.JobID == id && st.Measurement != nil && st.Measurement.Samples >= k {
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: job %d never had %d samples", node, id, k)
	}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	// waitReport waits for the report of a job without a batch script on its first node
	// (made as its steps and the job end, after Slurm may already say it completed).
	waitReport := func(t *testing.T, id uint32) {
		t.Helper()
		first := c.jobInfo(t, id)["NodeList"]
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := daemon.JobReport(ctx, c.socket(first), id)
			cancel()
			if err == nil {
				if r.Samples == 0 || r.JobID != id {
					t.Errorf("report of job %d on %s: %+v", id, first, r)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no report of job %d on %s: %v", id, first, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	t.Run("daemons stopped", func(t *testing.T) {
		t.Run("killed, started after the job ended", func(t *testing.T) {
			defer sideBySide(t)()
			node := c.nodes[0]
			id := c.sbatch(t, nil, "-w", node, "-o", filepath.Join(c.work, "killed-%j.out"), "--wrap", "sleep 12; echo done")
			running(t, node, id, 3)
			pid := c.daemonPID(t, node)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
				t.Fatalf("job %d ended %s", id, st)
			}
			c.harness(t, "daemon-start", node)
			// The restarted daemon checks the job with Slurm at once: ended, with why.
			j := c.waitJob(t, node, id, "ended", func(j *daemon.Job) bool { return j.Ended != nil })
			if !strings.Contains(j.EndReason, "COMPLETED") {
				t.Errorf("job %d ended for %q, want Slurm's COMPLETED", id, j.EndReason)
			}
			// Its cgroups go as it ends the job's measurement, just after it marked the
			// job ended (the state the test waited for): within seconds, not never.
			var left []string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				left, _ = filepath.Glob("/sys/fs/cgroup/*/persyst_" + node + "/job_" + strconv.FormatUint(uint64(id), 10))
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(left) > 0 {
				t.Errorf("persyst's cgroups of the ended job left 10 s after it was found ended: %v", left)
			}
			var text string
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) && !strings.Contains(text, "persyst: job") {
				text = read(t, out("killed-%j.out", id))
				time.Sleep(200 * time.Millisecond)
			}
			if !strings.HasPrefix(text, "done\n") || !strings.Contains(flat(text), "Made after the job ended") {
				t.Fatalf("output of the job whose batch host's daemon was killed:\n%s", text)
			}
			r := report(t, node, id)
			if r.Coverage == nil || !r.Coverage.Late || r.Samples < 3 {
				t.Errorf("late report: %d samples, coverage %+v", r.Samples, r.Coverage)
			}
			t.Logf("late digest:\n%s", text)
		})
		t.Run("restarted in the middle of a job", func(t *testing.T) {
			defer sideBySide(t)()
			node := c.nodes[1]
			id := c.sbatch(t, nil, "-w", node, "-o", filepath.Join(c.work, "restarted-%j.out"), "--wrap", "sleep 20")
			running(t, node, id, 4)
			// No daemon runs from the stop to the start, at least 4 s; the stretch named
			// ends when the restarted daemon measures the job again, so its length is
			// bounded by what this test saw (a loaded machine starts a daemon slowly).
			stopped := time.Now()
			c.harness(t, "daemon-stop", node)
			time.Sleep(4 * time.Second)
			c.harness(t, "daemon-start", node)
			running(t, node, id, 1)
			seen := time.Since(stopped).Seconds()
			if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
				t.Fatalf("job %d ended %s", id, st)
			}
			r := report(t, node, id)
			cv := r.Coverage
			if cv == nil || cv.Elapsed < 19 {
				t.Fatalf("coverage %+v, want the job's 20 s", cv)
			}
			// The digest spans the job from the first daemon's start to its end: what
			// the first daemon measured was kept. (Under load, a measurement may begin
			// or end late: those stretches are named, and outside the span.)
			var gap, outside float64
			for _, g := range cv.Gaps {
				switch g.Why {
				case "the persyst daemon was not running":
					gap += g.Seconds()
				case "before measurement began", "after the last read":
					outside += g.Seconds()
				}
			}
			if r.Seconds < 0.95*(cv.Elapsed-outside) {
				t.Errorf("digest covers %.1f s of the job's %.1f s (%.1f s named outside its measurement): %+v", r.Seconds, cv.Elapsed, outside, cv.Gaps)
			}
			if gap < 3.5 || gap > seen+3 {
				t.Errorf("gaps %+v: want 3.5-%.1f s with the daemon not running (stopped and measuring again %.1f s later)", cv.Gaps, seen+3, seen)
			}
			text := read(t, out("restarted-%j.out", id))
			if !strings.Contains(flat(text), "(the persyst daemon was not running)") {
				t.Errorf("digest does not name the restart:\n%s", text)
			}
			t.Logf("digest after a restart:\n%s", text)
		})
		t.Run("hung at the job's start", func(t *testing.T) {
			defer sideBySide(t)()
			node := c.nodes[2]
			pid := c.daemonPID(t, node)
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
			defer cont()
			id := c.sbatch(t, nil, "-w", node, "-o", filepath.Join(c.work, "hung-%j.out"), "--wrap", "sleep 25")
			time.Sleep(15 * time.Second)
			cont()
			if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
				t.Fatalf("job %d ended %s", id, st)
			}
			r := report(t, node, id)
			if r.Coverage == nil || len(r.Coverage.Gaps) == 0 || r.Coverage.Gaps[0].Why != "before measurement began" || r.Coverage.Gaps[0].Seconds() < 8 {
				t.Errorf("coverage %+v, want a gap of 8 s or more before measurement began", r.Coverage)
			}
			text := read(t, out("hung-%j.out", id))
			if !strings.Contains(flat(text), "(before measurement began)") {
				t.Errorf("digest does not name the stretch before measurement began:\n%s", text)
			}
		})
	})

	t.Run("3-node job without a collector tree", func(t *testing.T) {
		// Tiny writes on the third node only: its daemon's part reaches the batch host.
		dir := filepath.Join(c.work, "three")
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o777)
		_, load := binaries(t)
		script := "#!/bin/sh\nsrun -N3 sh -c 'if [ $SLURM_NODEID = 2 ]; then " + load + " write -file " + dir + "/out.dat -bytes 67108864 -size 64 -min-seconds 4; fi'\n"
		all := strings.Join(c.nodes, ",")
		id := c.sbatch(t, nil, "-N3", "-w", all, "-o", filepath.Join(c.work, "three-%j.out"), "--wrap", script)
		c.waitDone(t, id, 2*time.Minute)
		text := flat(read(t, out("three-%j.out", id)))
		if !strings.Contains(text, "3 CPUs") || !strings.Contains(text, "on 3 nodes") || !strings.Contains(text, "Small writes") || strings.Contains(text, "Covers") {
			t.Errorf("digest of a 3-node job with tiny writes on its third node:\n%s", text)
		}
		batch := c.jobInfo(t, id)["BatchHost"]
		r := report(t, batch, id)
		if len(r.Nodes) != 3 || (r.Coverage != nil && len(r.Coverage.Missing) > 0) {
			t.Errorf("report: nodes %v, coverage %+v; want all 3", r.Nodes, r.Coverage)
		}
		t.Logf("digest of a 3-node job:\n%s", read(t, out("three-%j.out", id)))

		// A part too short to judge (a one-second command on the second node) is no gap:
		// the node's daemon says its part ended within its start-up.
		id = c.sbatch(t, nil, "-N2", "-w", strings.Join(c.nodes[:2], ","), "-o", filepath.Join(c.work, "three-%j.out"), "--wrap", "srun -N2 sleep 0.5")
		c.waitDone(t, id, 2*time.Minute)
		text = flat(read(t, out("three-%j.out", id)))
		r = report(t, c.jobInfo(t, id)["BatchHost"], id)
		// Its part takes srun's start and end besides the half second: on a loaded
		// machine long enough to be measured, then covered like any other.
		if strings.Contains(text, "Covers") || r.Coverage == nil || len(r.Coverage.Missing) > 0 || len(r.Coverage.Short) > 1 ||
			len(r.Coverage.Short) == 0 && len(r.Nodes) != 2 {
			t.Errorf("a 2-node job whose second node's part was too short to judge: coverage %+v, nodes %v, digest:\n%s", r.Coverage, r.Nodes, text)
		}
		t.Logf("a 2-node job with a short part on its second node: nodes %v, short %v", r.Nodes, r.Coverage.Short)

		// One node's daemon down: the digest says what it covers.
		down := c.nodes[1]
		c.harness(t, "daemon-stop", down)
		defer c.harness(t, "daemon-start", down)
		id = c.sbatch(t, nil, "-N3", "-w", all, "-o", filepath.Join(c.work, "three-%j.out"), "--wrap", "srun -N3 sleep 3")
		c.waitDone(t, id, 2*time.Minute)
		text = flat(read(t, out("three-%j.out", id)))
		if !strings.Contains(text, "Covers 2 of 3 nodes") || !strings.Contains(text, down+" (its persyst daemon is not running)") {
			t.Errorf("digest of a 3-node job with %s's daemon down:\n%s", down, text)
		}
	})

	t.Run("the job's user reads its report from another machine", func(t *testing.T) {
		id := c.sbatch(t, nil, "-w", c.nodes[0], "-o", "/dev/null", "--wrap", "sleep 1")
		c.waitDone(t, id, time.Minute)
		// From the second node's network (a login node would do the same), with no
		// daemon socket at hand: the job map names the batch host, and its daemon checks
		// who asks with MUNGE.
		prefix := ""
		for _, kv := range c.env {
			if v, ok := strings.CutPrefix(kv, "PERSYST_NETNS_PREFIX="); ok {
				prefix = v
			}
		}
		ask := func(uid int) (string, error) {
			o, e, err := c.run(t, nil, "nsenter", "--net=/run/netns/"+prefix+c.nodes[1], "-S", strconv.Itoa(uid), "-G", strconv.Itoa(uid),
				persyst, "report", "--socket", "/nonexistent/%n.sock", "--config", filepath.Join(c.dir, "etc", "persyst.conf"),
				strconv.FormatUint(uint64(id), 10))
			return o + e, err
		}
		if o, err := ask(jobUser); err != nil || !strings.Contains(o, "persyst: job "+strconv.FormatUint(uint64(id), 10)) {
			t.Errorf("persyst report as the job's user from %s: %v\n%s", c.nodes[1], err, o)
		}
		if o, err := ask(4321); err == nil || !strings.Contains(o, "permission denied") {
			t.Errorf("persyst report as uid 4321 from %s: %v\n%s; want permission denied", c.nodes[1], err, o)
		}
	})

	t.Run("array tasks named as Slurm names them", func(t *testing.T) {
		node := c.nodes[0]
		arr := c.sbatch(t, nil, "-w", node, "--array=1-2", "-o", filepath.Join(c.work, "arr-%A_%a.out"), "--wrap", "sleep 1")
		name := strconv.FormatUint(uint64(arr), 10) + "_2"
		var st string
		if !poll(time.Now().Add(2*time.Minute), func() bool { st = c.jobInfoID(t, name)["JobState"]; return !active(st) }) {
			t.Fatalf("array task %s still %s", name, st)
		}
		text := read(t, filepath.Join(c.work, "arr-"+name+".out"))
		if !strings.Contains(text, "persyst: job "+name) {
			t.Errorf("digest of array task %s:\n%s", name, text)
		}
		cmd := execAsUser(persyst, "report", "--socket", c.socket(node), name)
		if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "job "+name) {
			t.Errorf("persyst report %s as the job's user: %v\n%s", name, err, b)
		}
	})

	t.Run("interactive job has a report", func(t *testing.T) {
		node := c.nodes[1]
		o, errOut, err := c.run(t, nil, "srun", "-w", node, "-N1", "sh", "-c", "echo $SLURM_JOB_ID; sleep 2")
		if err != nil {
			t.Fatalf("srun: %v\n%s%s", err, o, errOut)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(o), 10, 32)
		if err != nil {
			t.Fatalf("srun printed %q", o)
		}
		// srun started the job: at its end, srun prints the digest on the terminal.
		if !strings.Contains(errOut, "persyst: job "+strconv.FormatUint(id, 10)) {
			t.Errorf("srun's standard error has no digest of job %d:\n%s", id, errOut)
		}
		t.Logf("srun's terminal:\n%s", errOut)
		c.waitDone(t, uint32(id), time.Minute)
		waitReport(t, uint32(id))
	})

	t.Run("an salloc allocation's steps have a report", func(t *testing.T) {
		node := c.nodes[2]
		o, errOut, err := c.run(t, nil, "salloc", "-w", node, "-N1", "srun", "sh", "-c", "echo $SLURM_JOB_ID; sleep 2")
		if err != nil {
			t.Fatalf("salloc: %v\n%s%s", err, o, errOut)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(o), 10, 32)
		if err != nil {
			t.Fatalf("salloc printed %q", o)
		}
		if strings.Contains(errOut, "persyst: job") {
			t.Errorf("srun inside salloc printed a digest:\n%s", errOut)
		}
		c.waitDone(t, uint32(id), time.Minute)
		waitReport(t, uint32(id))
	})
}

// execAsUser returns a command that runs as the unprivileged job user.
func execAsUser(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = asUser()
	return cmd
}
