package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/daemon/wire"
)

// TestFoundation runs the lifecycle scenarios of the foundation issue, in order, on one
// real 2-node cluster, and ends by tearing the cluster down and checking nothing is left.
func TestFoundation(t *testing.T) {
	defer sideBySide(t)()
	c := startCluster(t, 2)
	ok := true
	step := func(name string, f func(t *testing.T)) {
		if !ok {
			t.Run(name, func(t *testing.T) { t.Skip("an earlier step failed; the cluster state is not trustworthy") })
			return
		}
		ok = t.Run(name, f)
	}
	var first uint32
	step("two-node job with srun steps is seen on both nodes", func(t *testing.T) { first = twoNodeJob(t, c) })
	step("opt out with --persyst=off, #SBATCH and PERSYST=off", func(t *testing.T) { optOut(t, c) })
	step("bad --persyst value is rejected", func(t *testing.T) { badValue(t, c) })
	step("plugstack.conf errors disable the plugin, jobs still run", func(t *testing.T) { badPlugstack(t, c) })
	step("non-root client is refused", func(t *testing.T) { nonRoot(t, c) })
	step("an ordinary user's connect flood: jobs and root's commands unaffected", func(t *testing.T) { connectFlood(t, c) })
	step("daemon down on one node: jobs complete, the other node records", func(t *testing.T) { daemonDown(t, c, first) })
	step("hung daemon delays a job by at most the timeout", func(t *testing.T) { daemonHung(t, c) })
	step("daemon restart mid-job keeps the job", func(t *testing.T) { daemonRestart(t, c) })
	step("cluster-down leaves nothing behind", func(t *testing.T) { clusterDown(t, c) })
}

func twoNodeJob(t *testing.T, c *cluster) uint32 {
	id := c.sbatch(t, nil, "-N2", "-o", "out-%j.txt", "--wrap", "srun -N2 -n2 true && srun -N1 -n1 true; exit 3")
	if st := c.waitDone(t, id, 2*time.Minute); st != "FAILED" { // exit 3 → FAILED
		t.Fatalf("job %d ended %s, want FAILED (exit 3)", id, st)
	}
	info := c.jobInfo(t, id)
	batchHost := info["BatchHost"]
	if !slices.Contains(c.nodes, batchHost) {
		t.Fatalf("BatchHost %q not one of %v", batchHost, c.nodes)
	}
	nodeIDs := map[uint32]string{}
	step1 := 0
	for _, node := range c.nodes {
		j := c.waitJob(t, node, id, "ended with job_end seen", func(j *daemon.Job) bool { return j.State == daemon.Ended && j.JobEndSeen })
		if j.UID != jobUser || j.GID != jobUser || j.User != "nobody" {
			t.Errorf("%s: uid/gid/user = %d/%d/%q, want %d/%d/nobody", node, j.UID, j.GID, j.User, jobUser, jobUser)
		}
		if j.Node != node || !j.JobStartSeen || j.Persyst != wire.On || j.NNodes != 2 {
			t.Errorf("%s: node=%q job_start_seen=%v persyst=%q nnodes=%d", node, j.Node, j.JobStartSeen, j.Persyst, j.NNodes)
		}
		if prev, dup := nodeIDs[j.NodeID]; dup {
			t.Errorf("%s and %s both report node_id %d", prev, node, j.NodeID)
		}
		nodeIDs[j.NodeID] = node
		want := []string{"extern", "0"}
		if node == batchHost {
			want = append(want, "batch")
		}
		got := stepIDs(j)
		if slices.Contains(got, "1") {
			step1++
			want = append(want, "1")
		}
		slices.Sort(want)
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: steps mismatch (-want +got):\n%s", node, diff)
		}
		for _, s := range j.Steps {
			if s.State != daemon.Ended || s.Ended == nil || s.Ended.Before(s.Started) {
				t.Errorf("%s: step %s not properly ended: %+v", node, s.ID, s)
			}
			if s.ID == "batch" && s.Exit != "3:0" {
				t.Errorf("%s: batch step exit %q, want 3:0", node, s.Exit)
			}
			if s.ID == "0" && (s.Exit != "0:0" || s.TotalTasks != 2 || s.LocalTasks != 1) {
				t.Errorf("%s: step 0 exit %q tasks %d/%d, want 0:0 and 1 of 2", node, s.Exit, s.LocalTasks, s.TotalTasks)
			}
		}
		wantCg := "slurm_" + node + "/uid_" + strconv.Itoa(jobUser) + "/job_" + strconv.FormatUint(uint64(id), 10)
		found := false
		for _, p := range j.Cgroups {
			found = found || strings.HasSuffix(p, wantCg)
		}
		if !found {
			t.Errorf("%s: no cgroup ending in %s among %v", node, wantCg, j.Cgroups)
		}
		if j.Cores == "" {
			t.Errorf("%s: allocated cores not recorded", node)
		}
	}
	if step1 != 1 {
		t.Errorf("step 1 (srun -N1) recorded on %d nodes, want exactly 1", step1)
	}
	if _, err := os.Stat(filepath.Join(c.work, "out-"+strconv.FormatUint(uint64(id), 10)+".txt")); err != nil {
		t.Errorf("job output file: %v", err)
	}
	return id
}

func optOut(t *testing.T, c *cluster) {
	script := filepath.Join(c.work, "optout.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n#SBATCH --persyst=off\n#SBATCH -N2\nsrun -N2 true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"-N2", "-o", "/dev/null", "--persyst=off", "--wrap", "srun -N2 true"}},
		{"#SBATCH", nil, []string{"-o", "/dev/null", script}},
		{"PERSYST=off", []string{"PERSYST=off"}, []string{"-N2", "-o", "/dev/null", "--wrap", "srun -N2 true"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := c.sbatch(t, tc.env, tc.args...)
			if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
				t.Fatalf("job %d ended %s", id, st)
			}
			for _, node := range c.nodes {
				j := c.waitJob(t, node, id, "opted out and ended", func(j *daemon.Job) bool { return j.JobEndSeen })
				if j.State != daemon.OptedOut || j.Persyst != wire.Off {
					t.Errorf("%s: job %d state %s persyst %s, want opted_out/off", node, id, j.State, j.Persyst)
				}
			}
		})
	}
	// The command line wins over the environment.
	id := c.sbatch(t, []string{"PERSYST=off"}, "-o", "/dev/null", "--persyst=on", "--wrap", "true")
	c.waitDone(t, id, 2*time.Minute)
	j := c.waitJob(t, c.jobInfo(t, id)["BatchHost"], id, "ended", func(j *daemon.Job) bool { return j.JobEndSeen })
	if j.State != daemon.Ended {
		t.Errorf("PERSYST=off with --persyst=on: state %s, want ended (measured)", j.State)
	}
}

func badValue(t *testing.T, c *cluster) {
	cases := []struct {
		name string
		env  []string
		cmd  []string
	}{
		{"sbatch flag", nil, []string{"sbatch", "--persyst=bogus", "--wrap", "true"}},
		{"sbatch env", []string{"PERSYST=maybe"}, []string{"sbatch", "--wrap", "true"}},
		{"srun flag", nil, []string{"srun", "--persyst=ON", "true"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := c.run(t, tc.env, tc.cmd[0], tc.cmd[1:]...)
			if err == nil {
				t.Fatalf("%v accepted: %s", tc.cmd, out)
			}
			if !strings.Contains(errOut, "persyst:") || !strings.Contains(errOut, "use on or off") {
				t.Errorf("message does not explain the error:\n%s", errOut)
			}
			if strings.Contains(out, "Submitted") {
				t.Errorf("a job was submitted: %s", out)
			}
		})
	}
}

func badPlugstack(t *testing.T, c *cluster) {
	p := filepath.Join(c.dir, "etc", "plugstack.conf")
	orig, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// plugstack.conf is re-read at every job launch: break it, run a job, restore it.
	bad := strings.TrimSpace(string(orig)) + " colour=blue timeout=soon\n"
	if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.WriteFile(p, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}()
	id := c.sbatch(t, nil, "-N2", "-o", "/dev/null", "--wrap", "srun -N2 true")
	if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
		t.Fatalf("job %d ended %s with a broken plugstack.conf; the plugin must not fail jobs", id, st)
	}
	for _, node := range c.nodes {
		if j := c.jobOn(t, node, id); j != nil {
			t.Errorf("%s: disabled plugin still sent events: %+v", node, j)
		}
		log := c.readLog(t, "slurmd-"+node)
		for _, want := range []string{`persyst: plugstack.conf: argument "colour=blue": unknown key "colour"`, `argument "timeout=soon"`, "persyst: plugin disabled"} {
			if !strings.Contains(log, want) {
				t.Errorf("%s: slurmd log lacks %q", node, want)
			}
		}
	}
}

func nonRoot(t *testing.T, c *cluster) {
	node := c.nodes[0]
	all := c.jobs(t, node)
	before := len(all)
	// The persyst CLI as an ordinary user: their own jobs only (every test job so far is
	// the job user's), another user sees none and may not read the job user's reports.
	persyst := func(cred *syscall.Credential, args ...string) (string, error) {
		cmd := exec.Command(persystBin(), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	owner, stranger := &syscall.Credential{Uid: jobUser, Gid: jobUser}, &syscall.Credential{Uid: 4321, Gid: 4321}
	out, err := persyst(owner, "jobs", "--json", "--socket", c.socket(node))
	var mine struct{ Jobs []daemon.JobStatus }
	if err != nil || json.Unmarshal([]byte(out), &mine) != nil || len(mine.Jobs) != before {
		t.Errorf("persyst jobs as the job user: err=%v, %d of %d jobs; out=%s", err, len(mine.Jobs), before, out)
	}
	out, err = persyst(stranger, "jobs", "--json", "--socket", c.socket(node))
	var theirs struct{ Jobs []daemon.JobStatus }
	if err != nil || json.Unmarshal([]byte(out), &theirs) != nil || len(theirs.Jobs) != 0 {
		t.Errorf("persyst jobs as uid 4321: err=%v, %d jobs, want none; out=%s", err, len(theirs.Jobs), out)
	}
	if len(all) > 0 {
		id := strconv.FormatUint(uint64(all[0].JobID), 10)
		if out, err := persyst(stranger, "report", "--socket", c.socket(node), id); err == nil || !strings.Contains(out, "permission denied") {
			t.Errorf("persyst report %s as uid 4321: err=%v out=%s; want permission denied", id, err, out)
		}
		if out, err := persyst(owner, "report", "--socket", c.socket(node), id); err != nil || !strings.Contains(out, "job "+id) {
			t.Errorf("persyst report %s as its owner: err=%v out=%s", id, err, out)
		}
	}
	// Nor by reading the daemon's files: every file of its state directory (job records,
	// stored reports) is out of reach of both users.
	files := 0
	filepath.WalkDir(filepath.Join(c.dir, "run", node), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		files++
		for _, cred := range []*syscall.Credential{owner, stranger} {
			cmd := exec.Command("cat", p)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			if err := cmd.Run(); err == nil {
				t.Errorf("uid %d reads %s", cred.Uid, p)
			}
		}
		return nil
	})
	if files == 0 {
		t.Errorf("no files in the daemon's state directory")
	}
	// A forged lifecycle event from an ordinary user (this test binary, re-executed).
	cmd := exec.Command(selfCopy(t))
	cmd.Env = append(os.Environ(), "PERSYST_IT_FORGE="+c.socket(node))
	cmd.SysProcAttr = asUser()
	b, err := cmd.CombinedOutput()
	out = string(b)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(string(out), "permission denied") {
		t.Errorf("forged event as uid %d: err=%v out=%s; want refused with permission denied", jobUser, err, out)
	}
	if j := c.jobOn(t, node, 999999); j != nil {
		t.Errorf("forged job recorded: %+v", j)
	}
	if after := len(c.jobs(t, node)); after != before {
		t.Errorf("registry changed from %d to %d jobs", before, after)
	}
	if log := c.readLog(t, "persyst-"+node); !strings.Contains(log, `"peer_uid":65534`) || !strings.Contains(log, "refused connection") {
		t.Errorf("daemon log does not record the refusal")
	}
}

// withoutStepRetries is a job's output without srun's lines about a step it had to retry.
func withoutStepRetries(out string) string {
	var keep []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, "srun: Job ") && strings.Contains(l, "step creation temporarily disabled, retrying") ||
			strings.HasPrefix(l, "srun: Step created for job ") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "")
}

func daemonDown(t *testing.T, c *cluster, earlier uint32) {
	// The batch host's daemon is down: the batch step's events fail there.
	down, up := c.nodes[0], c.nodes[1]
	c.harness(t, "daemon-stop", down)
	start := time.Now()
	out := filepath.Join(c.work, "down-%j.out")
	id := c.sbatch(t, nil, "-N2", "-w", strings.Join(c.nodes, ","), "-o", out, "--wrap", "srun -N2 true; srun -N2 true; echo done")
	if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
		t.Fatalf("job %d ended %s with %s's daemon down", id, st, down)
	}
	// persyst's own faults are for the logs: the job's output holds the job's own, and
	// Slurm's (srun retries a step whose nodes still finish the last one: "step creation
	// temporarily disabled", then "Step created"; a race of slurmctld's with or without
	// persyst).
	out = strings.ReplaceAll(out, "%j", strconv.FormatUint(uint64(id), 10))
	if b, err := os.ReadFile(out); err != nil || withoutStepRetries(string(b)) != "done\n" {
		t.Errorf("%s: the output of a job whose batch host's daemon was down: err=%v\n%s(want only the job's own \"done\")", out, err, b)
	}
	t.Logf("2-node job with one daemon down took %v from submission to end", time.Since(start).Round(time.Millisecond))
	j := c.waitJob(t, up, id, "ended", func(j *daemon.Job) bool { return j.JobEndSeen })
	if got := stepIDs(j); !slices.Contains(got, "0") || !slices.Contains(got, "1") {
		t.Errorf("%s: steps %v, want 0 and 1", up, got)
	}
	// The plugin logs the failure once per node, not once per event.
	// (slurmd's own log file only: its stderr capture repeats the prolog's messages.)
	b, _ := os.ReadFile(filepath.Join(c.dir, "log", "slurmd-"+down+".log"))
	if n := strings.Count(string(b), "event not recorded"); n != 1 {
		t.Errorf("%s: slurmd log has %d 'event not recorded' lines, want 1", down, n)
	}
	if _, err := os.Stat(c.socket(down) + ".unreachable"); err != nil {
		t.Errorf("no unreachable marker: %v", err)
	}
	// Restarted, the daemon still knows the jobs it recorded before, and events flow again.
	c.harness(t, "daemon-start", down)
	if j := c.jobOn(t, down, earlier); j == nil || j.State != daemon.Ended {
		t.Errorf("%s: job %d from before the restart: %+v", down, earlier, j)
	}
	id2 := c.sbatch(t, nil, "-N2", "-o", "/dev/null", "--wrap", "srun -N2 true")
	c.waitDone(t, id2, 2*time.Minute)
	c.waitJob(t, down, id2, "ended", func(j *daemon.Job) bool { return j.JobEndSeen })
	if _, err := os.Stat(c.socket(down) + ".unreachable"); err == nil {
		t.Errorf("unreachable marker still present after the daemon answered again")
	}
	if !strings.Contains(c.readLog(t, "slurmd-"+down), "answers again") {
		t.Errorf("%s: recovery not logged", down)
	}
}

func daemonHung(t *testing.T, c *cluster) {
	hung := c.nodes[1]
	pid := c.daemonPID(t, hung)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	var ids []uint32
	for i := 0; i < 2; i++ {
		start := time.Now()
		id := c.sbatch(t, nil, "-N2", "-o", "/dev/null", "--wrap", "srun -N2 true; srun -N2 true")
		st := c.waitDone(t, id, 2*time.Minute)
		took := time.Since(start)
		if st != "COMPLETED" {
			t.Fatalf("job %d ended %s with %s's daemon hung", id, st, hung)
		}
		// The first start event waits the plugstack timeout (5 s); after that every process
		// on the node sees the marker and waits at most 200 ms per start event. End events
		// never wait (a wait there made the next srun back off for a minute: 70 s jobs).
		// The plugin's own waits are judged, as its debug lines give them: the time from
		// submission to end is slurmctld's too, seconds more under a loaded machine.
		t.Logf("job %d (2 nodes, 2 steps) with a hung daemon: %v from submission to end", id, took.Round(time.Millisecond))
		waits := c.pluginWaits(t, hung, id)
		t.Logf("job %d: the plugin's waits on %s: %v", id, hung, waits)
		if len(waits) < 4 {
			t.Errorf("job %d: %d events logged on %s, want its job start and 3 step starts at least", id, len(waits), hung)
		}
		full := 0
		for _, w := range waits {
			switch {
			case w > 6*time.Second:
				t.Errorf("job %d: an event waited %v on %s, want at most the 5 s timeout", id, w, hung)
			case w > time.Second:
				full++
			}
		}
		want := 1 // the first event of the first job
		if i > 0 {
			want = 0
		}
		if full > want {
			t.Errorf("job %d: %d events waited more than 1 s on %s, want at most %d (then 200 ms each)", id, full, hung, want)
		}
		ids = append(ids, id)
	}
	// Resumed, the daemon reads the end events that waited in its socket: no job is lost.
	syscall.Kill(pid, syscall.SIGCONT)
	// (The queued events are handled concurrently, so wait for all of them.)
	for _, id := range ids {
		c.waitJob(t, hung, id, "ended with its steps 0 and 1 after the daemon resumed", func(j *daemon.Job) bool {
			steps := stepIDs(j)
			if !j.JobEndSeen || !slices.Contains(steps, "0") || !slices.Contains(steps, "1") {
				return false
			}
			for _, s := range j.Steps {
				if s.State != daemon.Ended || ((s.ID == "0" || s.ID == "1") && s.Exit != "0:0") {
					return false
				}
			}
			return true
		})
	}
}

// pluginWaits is how long each of a job's events waited for the daemon of node, from the
// plugin's debug lines in slurmd's log ("sent in 1.9ms", "not sent after 200.3ms").
func (c *cluster) pluginWaits(t *testing.T, node string, id uint32) []time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "log", "slurmd-"+node+".log"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`persyst: (?:job|step) ` + strconv.FormatUint(uint64(id), 10) + `(?:\.\S+)?: \w+ (?:sent in|not sent after) ([0-9.]+)ms`)
	var waits []time.Duration
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		ms, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", node, m[0], err)
		}
		waits = append(waits, time.Duration(ms*float64(time.Millisecond)).Round(time.Millisecond))
	}
	return waits
}

func daemonRestart(t *testing.T, c *cluster) {
	node := c.nodes[0]
	id := c.sbatch(t, nil, "-N1", "-w", node, "-o", "/dev/null", "--wrap", "srun sleep 8")
	c.waitJob(t, node, id, "running step 0", func(j *daemon.Job) bool { return slices.Contains(stepIDs(j), "0") })
	c.harness(t, "daemon-stop", node)
	c.harness(t, "daemon-start", node)
	back := time.Now() // the restarted daemon answers
	if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
		t.Fatalf("job %d ended %s", id, st)
	}
	// The end comes from the job_end event, or, where the epilog ran while the restarted
	// daemon was not yet taking events (the plugin never holds a job up for it), from
	// Slurm's word at the daemon's next look: either way the job is kept and ended, and
	// says how it learnt the end.
	j := c.waitJob(t, node, id, "ended", func(j *daemon.Job) bool { return j.JobEndSeen || (j.State == daemon.Ended && j.EndReason != "") })
	if !j.JobStartSeen || j.State != daemon.Ended {
		t.Errorf("after restart: job_start_seen=%v state=%s, want true/ended", j.JobStartSeen, j.State)
	}
	if !j.JobEndSeen {
		t.Logf("job %d's end learnt from Slurm: %s", id, j.EndReason)
		return
	}
	for _, s := range j.Steps {
		if s.ID != "0" {
			continue
		}
		// A restart slower than the step (a loaded machine: the daemon loads its eBPF
		// programs) misses the step's end: the step is ended with the job, its exit
		// status not known rather than made up.
		if s.State == daemon.Ended && s.Exit == "" && s.Ended != nil && s.Ended.Before(back) {
			t.Logf("step 0 ended %v before the restarted daemon answered: its exit status is not known", back.Sub(*s.Ended).Round(time.Millisecond))
			continue
		}
		if s.State != daemon.Ended || s.Exit != "0:0" {
			t.Errorf("step 0 started before the restart, ended after (the daemon answered again at %s): %+v", back.Format("15:04:05.000"), s)
		}
	}
}

func clusterDown(t *testing.T, c *cluster) {
	c.harness(t, "down")
	nothingLeft(t, c.instance)
}

// nothingLeft fails t if a process, namespace or the bridge of test cluster instance
// inst is left. The clusters of the tests beside it run on: a process is the instance's
// when the environment it was started with names the instance (cluster.sh's daemons and
// what they start inherit it from the test's cluster.sh).
func nothingLeft(t *testing.T, inst int) {
	t.Helper()
	mark := []byte("\x00PERSYST_CLUSTER_INSTANCE=" + strconv.Itoa(inst) + "\x00")
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		comm, err := os.ReadFile(p + "/comm")
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		// A zombie has exited; it only waits for PID 1 (not ours) to reap it.
		if stat, err := os.ReadFile(p + "/stat"); err == nil {
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				continue
			}
		}
		if env, err := os.ReadFile(p + "/environ"); err != nil || !bytes.Contains(append([]byte{0}, env...), mark) {
			continue
		}
		cmdline, _ := os.ReadFile(p + "/cmdline")
		cl := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if slices.Contains([]string{"slurmctld", "slurmd", "slurmstepd", "slurmrestd", "munged", "slurmdbd", "mariadbd"}, name) ||
			strings.Contains(cl, "persyst daemon") || strings.Contains(cl, instanceDir(inst)+"/") {
			left = append(left, filepath.Base(p)+" "+cl)
		}
	}
	if len(left) > 0 {
		t.Errorf("processes left after cluster-down:\n%s", strings.Join(left, "\n"))
	}
	prefix, bridge := "persyst"+instanceLetter(inst)+"-", "persystbr"+strconv.Itoa(inst)
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	if strings.Contains(string(out), prefix) {
		t.Errorf("namespaces left: %s", out)
	}
	if err := exec.Command("ip", "link", "show", bridge).Run(); err == nil {
		t.Errorf("bridge %s left", bridge)
	}
}

// floodResult is what a flooding client did.
type floodResult struct {
	Calls  int `json:"calls"`  // requests made
	Busy   int `json:"busy"`   // refused as too many
	Failed int `json:"failed"` // other failures (connect errors)
}

// floodSocket runs in the re-executed test binary, as an ordinary user: 16 connections
// at once send List requests to the daemon's socket for the given time.
func floodSocket(spec string) int {
	sock, d, _ := strings.Cut(spec, ",")
	dur, err := time.ParseDuration(d)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	var calls, busy, failed atomic.Int64
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := wire.Call(ctx, sock, &wire.Request{Kind: wire.List})
				cancel()
				calls.Add(1)
				switch {
				case err == nil:
				case strings.Contains(err.Error(), "busy") || strings.Contains(err.Error(), "too many"):
					busy.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(floodResult{Calls: int(calls.Load()), Busy: int(busy.Load()), Failed: int(failed.Load())})
	fmt.Println(string(b))
	return 0
}

// connectFlood: an ordinary user floods a node's socket for 10 s; meanwhile the plugin's
// events of jobs on that node and root's CLI calls all succeed, and the daemon's log
// says so in at most two lines (the first refusal of the user in a minute, a minute's
// summary).
func connectFlood(t *testing.T, c *cluster) {
	node := c.nodes[0]
	logBefore := len(c.readLog(t, "persyst-"+node))
	cmd := exec.Command(selfCopy(t))
	cmd.Env = append(os.Environ(), "PERSYST_IT_FLOOD="+c.socket(node)+",10s")
	cmd.SysProcAttr = asUser()
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ids []uint32
	rootCalls, rootFailed := 0, 0
	for time.Since(start) < 9*time.Second {
		if len(ids) < 4 {
			ids = append(ids, c.sbatch(t, nil, "-N1", "-w", node, "--wrap", "srun true; srun true"))
		}
		if _, stderr, err := c.run(t, nil, persystBin(), "jobs", "--socket", c.socket(node), "--timeout", "2s"); err != nil {
			rootFailed++
			t.Errorf("root's persyst jobs during the flood: %v: %s", err, stderr)
		}
		rootCalls++
		time.Sleep(200 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flood: %v", err)
	}
	var f floodResult
	if err := json.Unmarshal(out.Bytes(), &f); err != nil {
		t.Fatalf("flood output %q: %v", out.String(), err)
	}
	for _, id := range ids {
		if st := c.waitDone(t, id, time.Minute); st != "COMPLETED" {
			t.Errorf("job %d ended %s during the flood", id, st)
		}
		c.waitJob(t, node, id, "ended with its steps", func(j *daemon.Job) bool {
			return j.State == daemon.Ended && j.JobEndSeen && len(j.Steps) >= 2
		})
	}
	// The jobs' own lifecycle lines are the daemon's normal log; the flood's are those
	// about refusals.
	var refusals []string
	for _, l := range strings.Split(c.readLog(t, "persyst-"+node)[logBefore:], "\n") {
		if strings.Contains(l, "refused") {
			refusals = append(refusals, l)
		}
	}
	bytes := len(strings.Join(refusals, "\n"))
	t.Logf("flood of uid %d: %d requests in 10 s, %d refused as busy, %d failed; root: %d calls, %d failed; %d jobs recorded; %d log lines (%d bytes) about refusals",
		jobUser, f.Calls, f.Busy, f.Failed, rootCalls, rootFailed, len(ids), len(refusals), bytes)
	if f.Busy == 0 || f.Calls < 1000 {
		t.Errorf("not a flood, or not limited: %+v", f)
	}
	if len(refusals) > 2 || bytes > 1024 {
		t.Errorf("%d log lines about the flood's refusals, want at most 2 (the first refusal of the user, a minute's summary):\n%s",
			len(refusals), strings.Join(refusals, "\n"))
	}
}
