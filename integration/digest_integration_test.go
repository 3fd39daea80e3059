package integration

// The digest in real jobs' output files: jobs built to show one bottleneck each get the
// matching finding and recommendation at the top of their digest, a balanced job gets
// "no issues found", the digest is written as the job's user (a user the harness
// created), before `sbatch --wait` returns, never through a symlink the job planted,
// and not at all for an opted-out job.

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/sample"
)

type bottleneck struct {
	name   string
	sbatch []string // extra sbatch options
	script string   // "@" is the workload binary, "%d" a scratch directory
	top    string   // key of the expected first finding ("" : no finding)
	advice string   // words of its recommendation in the output file
}

// besides are findings that may come before a case's top finding, which is then second:
// as true of the workload, of the same severity, the order then a matter of a few
// percent. The allocator sleeps between its steps: its one CPU idles too, medium as the
// growth (Slurm 24.11's root once ordered them so).
var besides = map[string]string{"steadily growing memory": "idle_cpu"}

// alone are the cases whose jobs run by themselves, one after another, after the others.
// The test nodes share this machine's two CPUs: a job judged by its CPU time must have
// them, as intervals others take are not judged for the CPU properties (the system-time
// job once lost 27 % of its time to the storms beside it, and its top finding with it),
// and jobs running beside the balanced one would unbalance its threads.
var alone = map[string]bool{"heavy system time": true, "balanced job": true}

func TestDigest(t *testing.T) {
	c := startCluster(t, 2)
	_, load := binaries(t)
	u, err := user.Lookup(os.Getenv("PERSYST_JOB_USER"))
	if err != nil {
		u, err = user.Lookup("persyst-job")
	}
	if err != nil {
		t.Fatalf("the harness's job user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	work := filepath.Join(c.work, "digest")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, uid, gid); err != nil {
		t.Fatal(err)
	}
	sbatch := func(t *testing.T, extra []string, script string) uint32 {
		t.Helper()
		args := append([]string{"--parsable", "--uid", u.Uid, "--gid", u.Gid, "-D", work, "-o", filepath.Join(work, "slurm-%j.out")}, extra...)
		out, errOut, err := c.run(t, nil, "sbatch", append(args, "--wrap", script)...)
		if err != nil {
			t.Fatalf("sbatch: %v\n%s%s", err, out, errOut)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(strings.Split(strings.TrimSpace(out), ";")[0]), 10, 32)
		if err != nil {
			t.Fatalf("sbatch: job id from %q", out)
		}
		return uint32(id)
	}
	cases := []bottleneck{
		{"allocated cores left idle", []string{"-c", "2"}, "@ spin -seconds 4", "idle_cores", "request fewer CPUs"},
		// The writes last several cycles: the I/O of a job's last process since the last
		// read before it exits is not seen (README, "Process I/O of exiting processes").
		{"many tiny writes", nil, "@ write -file %d/out.dat -bytes 67108864 -size 64 -min-seconds 4", "io_write_request_size", "write larger blocks"},
		{"steadily growing memory", nil, "@ alloc -mib 256 -steps 8 -step-seconds 0.7 -hold 1", "memory_growth", "free what you allocate"},
		{"a storm of file opens", nil, "@ openclose -file %d/f -n 100000 -min-seconds 4", "file_open_rate", "keep files open"},
		// Legacy open(2) opens files too (only openat(2) was counted).
		{"a storm of legacy open(2) calls", nil, "@ openclose -legacy -file %d/f -n 100000 -min-seconds 4", "file_open_rate", "keep files open"},
		{"memory request far above use", []string{"--mem=900"}, "@ spin -seconds 4", "memory_unused", "request less (--mem"},
		{"heavy system time", nil, "@ stat -seconds 4", "cpu_system_pct", "fewer, larger system calls"},
		{"balanced job", []string{"-c", "2"}, "@ spin -seconds 4 -threads 2 -pin 0,1", "", ""},
	}
	ids := make([]uint32, len(cases))
	submit := func(i int) {
		bc := cases[i]
		dir := filepath.Join(work, strconv.Itoa(i))
		os.MkdirAll(dir, 0o755)
		os.Chown(dir, uid, gid)
		script := "#!/bin/sh\n" + strings.ReplaceAll(strings.ReplaceAll(bc.script, "@", load), "%d", dir) + "\n"
		ids[i] = sbatch(t, bc.sbatch, script)
	}
	// sbatch --wait, submitted before the others so that it runs at once: Slurm's sbatch
	// asks after 2, 10 and 42 s (its pause quadruples up to 32 s while under MinJobAge),
	// and behind the other jobs it returned only at 42 s, a minute of each root's run.
	type sbatchWait struct {
		out, errOut string
		err         error
	}
	waited := make(chan sbatchWait, 1)
	go func() {
		args := []string{"--parsable", "--wait", "--job-name", "persyst-wait", "--uid", u.Uid, "--gid", u.Gid, "-D", work, "-o", filepath.Join(work, "wait-%j.out"), "-c", "2",
			"--wrap", "#!/bin/sh\necho start\n" + load + " spin -seconds 2\n"}
		out, errOut, err := c.run(t, nil, "sbatch", args...)
		waited <- sbatchWait{out, errOut, err}
	}()
	if !poll(time.Now().Add(time.Minute), func() bool {
		out, _, _ := c.run(t, nil, "squeue", "-h", "-n", "persyst-wait", "-o", "%i")
		return strings.TrimSpace(out) != ""
	}) {
		t.Fatal("sbatch --wait: slurmctld did not list its job within a minute")
	}
	for i, bc := range cases {
		if !alone[bc.name] {
			submit(i)
		}
	}

	// An attack: the job replaces its own output file with a symlink to a root-owned,
	// world-writable file. The digest must not land there.
	victim := filepath.Join(c.work, "root-owned")
	if err := os.WriteFile(victim, []byte("root's data\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(victim, 0o666)
	attack := sbatch(t, nil, fmt.Sprintf("#!/bin/sh\nout=%s/slurm-$SLURM_JOB_ID.out\nrm -f $out\nln -s %s $out\n%s spin -seconds 2\n", work, victim, load))
	// An opted-out job: no digest, nothing written.
	optout := sbatch(t, []string{"--persyst=off"}, "#!/bin/sh\necho hello\n")

	// sbatch --wait: when it returns, the digest is in the file.
	t.Run("digest before sbatch --wait returns", func(t *testing.T) {
		w := <-waited
		out, errOut, err := w.out, w.errOut, w.err
		if err != nil {
			t.Fatalf("sbatch --wait: %v\n%s%s", err, out, errOut)
		}
		id := strings.TrimSpace(strings.Split(strings.TrimSpace(out), ";")[0])
		b, err := os.ReadFile(filepath.Join(work, "wait-"+id+".out"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "-- persyst: job "+id) || !strings.Contains(string(b), "Allocated CPUs left idle") {
			t.Errorf("right after sbatch --wait returned, the output file has no digest:\n%s", b)
		}
	})

	for i, bc := range cases {
		if alone[bc.name] {
			for _, id := range append(ids[:i:i], attack, optout) {
				c.waitDone(t, id, 3*time.Minute)
			}
			submit(i)
		}
		t.Run(bc.name, func(t *testing.T) {
			id := ids[i]
			if st := c.waitDone(t, id, 3*time.Minute); st != "COMPLETED" {
				t.Fatalf("job %d ended %s", id, st)
			}
			path := filepath.Join(work, fmt.Sprintf("slurm-%d.out", id))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != uid {
				t.Errorf("output file owned by uid %d, want the job user %d", sys.Uid, uid)
			}
			rep := c.report(t, id)
			// What the daemon said and measured first, the failure last: CI shows the
			// end of a failed test's output.
			fail := func(format string, args ...any) {
				t.Helper()
				c.debugJob(t, id)
				t.Fatalf(format, args...)
			}
			if bc.top == "" {
				if len(rep.Findings) != 0 || !strings.Contains(text, fmt.Sprintf("persyst: job %d: no issues found", id)) {
					fail("balanced job: findings %v; output:\n%s", keys(rep.Findings), text)
				}
				return
			}
			at := 0
			if b := besides[bc.name]; b != "" && len(rep.Findings) > 1 && rep.Findings[0].Key == b {
				at = 1
			}
			if len(rep.Findings) == 0 || rep.Findings[at].Key != bc.top {
				fail("first finding %v, want %s; output:\n%s", keys(rep.Findings), bc.top, text)
			}
			first := fmt.Sprintf("%d. %s", at+1, rep.Findings[at].Name)
			if !strings.Contains(text, first) || !strings.Contains(strings.Join(strings.Fields(text), " "), bc.advice) {
				fail("output file lacks %q or the advice %q:\n%s", first, bc.advice, text)
			}
			for _, l := range strings.Split(text[strings.Index(text, "-- persyst:"):], "\n") {
				if len(l) > 80 {
					t.Errorf("digest line of %d columns: %q", len(l), l)
				}
			}
			t.Logf("job %d: findings %v", id, keys(rep.Findings))
		})
	}

	t.Run("symlinked output file", func(t *testing.T) {
		if st := c.waitDone(t, attack, 3*time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", attack, st)
		}
		time.Sleep(200 * time.Millisecond)
		b, _ := os.ReadFile(victim)
		if string(b) != "root's data\n" {
			t.Errorf("the root-owned file was written through the job's symlink:\n%s", b)
		}
		log := c.readLog(t, "persyst-"+c.jobInfo(t, attack)["BatchHost"])
		if !strings.Contains(log, "digest not written") || !strings.Contains(log, "symlink") {
			t.Errorf("the refusal is not logged")
		}
	})
	t.Run("opted out", func(t *testing.T) {
		if st := c.waitDone(t, optout, time.Minute); st != "COMPLETED" {
			t.Fatalf("job %d ended %s", optout, st)
		}
		b, _ := os.ReadFile(filepath.Join(work, fmt.Sprintf("slurm-%d.out", optout)))
		if string(b) != "hello\n" {
			t.Errorf("opted-out job's output: %q, want only its own line", b)
		}
	})
}

func keys(rs []digestResult) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Key)
	}
	return out
}

type digestResult = struct {
	Key  string `json:"key"`
	Name string `json:"name"`
}

// report is the findings of the job's report from its batch host.
func (c *cluster) report(t *testing.T, id uint32) struct{ Findings []digestResult } {
	t.Helper()
	var out struct{ Findings []digestResult }
	for _, f := range c.jobReport(t, id).Findings {
		out.Findings = append(out.Findings, digestResult{Key: f.Key, Name: f.Name})
	}
	return out
}

// debugJob logs what the job's batch host's daemon said and measured about a job.
func (c *cluster) debugJob(t *testing.T, id uint32) {
	node := c.jobInfo(t, id)["BatchHost"]
	tag := fmt.Sprintf(`"job":%d`, id)
	for _, l := range strings.Split(c.readLog(t, "persyst-"+node), "\n") {
		if strings.Contains(l, tag+",") || strings.Contains(l, tag+"}") {
			t.Logf("daemon: %s", l)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	samples, err := daemon.JobSamples(ctx, c.socket(node), id)
	for _, s := range samples {
		var per []string
		for _, cpu := range s.CPU {
			per = append(per, fmt.Sprintf("cpu%d task-clock %.0f ms", cpu.CPU, cpu.Values["task-clock"]/1e6))
		}
		busy, ok := s.Job[sample.SchedBusyThreadSeconds]
		t.Logf("sample %s %.2f s: user %.2f s, system %.2f s, run-queue wait %.2f s, busy threads' time %.2f s (measured %v), its CPUs busy %.2f s, %s",
			s.Reason, s.Seconds, s.Job["cpu_user_seconds"], s.Job["cpu_system_seconds"], s.Job[sample.SchedWaitSeconds], busy, ok,
			s.Job[sample.NodeCPUsBusySeconds], strings.Join(per, ", "))
	}
	if err != nil {
		t.Logf("samples: %v", err)
	}
	for _, l := range strings.Split(c.readLog(t, "slurmd-"+node), "\n") {
		if strings.Contains(l, "persyst") && (strings.Contains(l, fmt.Sprintf("[%d.", id)) || strings.Contains(l, fmt.Sprintf("job %d:", id))) {
			t.Logf("slurmd: %s", l)
		}
	}
}
