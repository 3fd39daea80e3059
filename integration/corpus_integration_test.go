package integration

// The workload corpus: programs built to show one behaviour each (build/persyst-corpus,
// in C like the codes persyst watches, and persyst-workload), run through `persyst run`
// as a user would. Each workload's intended finding must come first; the negative
// controls (balanced compute, several processes, large sequential I/O, `true`, a cold
// interpreter start) must have none. The end states, OOM kills and a job starved by a
// neighbour are in the corpus through Slurm (TestEndStates, TestCauses, TestDigest).
// The table (workload, first finding, severity) is logged at the end.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/phases"
	"github.com/persyst/persyst/sample"
	"github.com/persyst/persyst/standalone"
)

type corpusCase struct {
	name  string
	cpus  string   // taskset CPU list ("": all CPUs)
	pre   string   // shell command run first, not measured (as root)
	argv  []string // "@C" is persyst-corpus, "@W" persyst-workload, "@D" a scratch directory
	first string   // the intended first finding ("": none; "startup": ended within its start-up)
	// quota: the run's cpu cgroup gets a CPU quota of half a CPU as soon as it exists (a
	// site's cgroup policy), while the workload keeps two CPUs busy.
	quota bool
	// memLimit: the run's memory cgroup is limited to this many bytes as soon as it
	// exists (as Slurm's --mem would); event is then the event that must lead the digest.
	memLimit int64
	event    string
}

func TestCorpus(t *testing.T) {
	testenv.Root(t, "persyst run creates cgroups")
	persyst, load := binaries(t)
	corpus := filepath.Join(repoRoot, "build/persyst-corpus")
	if _, err := os.Stat(corpus); err != nil {
		t.Fatalf("%s not built (make build)", corpus)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "persyst.conf")
	// Memory trends are judged from 3 s on, as on the test cluster.
	if err := os.WriteFile(conf, []byte("DigestMinSeconds=3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []corpusCase{
		{name: "true", argv: []string{"true"}, first: "startup"},
		{name: "cold interpreter start", pre: "sync; echo 3 > /proc/sys/vm/drop_caches", argv: []string{"perl", "-e", "1"}, first: "startup"},
		{name: "balanced compute", argv: []string{"@C", "spin", "3", "2"}},
		{name: "multi-process compute", argv: []string{"sh", "-c", "@C spin 3 1 & @C spin 3 1; wait"}},
		{name: "large sequential writes", cpus: "0", argv: []string{"@C", "write", "@D/big", "3000000000", "4194304"}},
		{name: "sleep only", argv: []string{"sleep", "3"}, first: "idle_cores"},
		{name: "one thread on two CPUs", argv: []string{"@C", "spin", "3", "1"}, first: "idle_cores"},
		{name: "tiny reads", cpus: "0", argv: []string{"@C", "read", "@D/r", "1048576", "64", "3"}, first: "io_read_request_size"},
		{name: "tiny writes", cpus: "0", argv: []string{"@C", "write", "@D/w", "67108864", "64", "3"}, first: "io_write_request_size"},
		// Small requests cost the job: unbuffered lines (a write(2) per line: kernel time),
		// a flush to storage after every 4 KiB (each write waits for the device).
		{name: "unbuffered lines", cpus: "0", argv: []string{"sh", "-c", `perl -e '$|=1; my $e=time+3; while (time<$e) { print "x" x 25, "\n" for 1..1000 }' > @D/lines`}, first: "io_write_request_size"},
		{name: "sync after every write", cpus: "0", argv: []string{"@C", "syncwrite", "3", "@D/sync"}, first: "io_write_request_size"},
		// Small requests that cost nothing: programs through pipes (4 KiB pipe transfers),
		// and a stdio writer's 4 KiB writes of 64 MiB.
		{name: "pipeline through pipes", cpus: "0", argv: []string{"sh", "-c", "seq 3000000 | shuf | sort -n > @D/sorted"}},
		{name: "stdio writer", cpus: "0", argv: []string{"sh", "-c", "@W write -file @D/stdio -bytes 67108864 -size 4096 && @C spin 2 1"}},
		// A pipe written in 64-byte pieces (each call wakes the reader, which reads what
		// has piled up): small writes to a pipe, not to a file.
		{name: "tiny writes into a pipe", cpus: "0", argv: []string{"sh", "-c", "@W write -file /dev/stdout -bytes 67108864 -size 64 | cat >/dev/null"}, first: "pipe_write_request_size"},
		{name: "one CPU that only waits", cpus: "0", argv: []string{"sleep", "3"}, first: "idle_cpu"},
		{name: "open storm (openat)", cpus: "0", argv: []string{"@C", "open", "3", "@D/f"}, first: "file_open_rate"},
		{name: "open storm (open)", cpus: "0", argv: []string{"@C", "open", "3", "@D/f", "legacy"}, first: "file_open_rate"},
		{name: "fork/exec storm", argv: []string{"@C", "forkexec", "3", "/bin/true"}, first: "process_creation_rate"},
		// Processes forked that start no program: a shell's subshells.
		{name: "fork storm (subshells)", cpus: "0", argv: []string{"bash", "-c", "end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do (:); done"}, first: "process_fork_rate"},
		{name: "oversubscription", argv: []string{"@C", "spin", "3", "8"}, first: "oversubscription"},
		{name: "mutex contention", argv: []string{"@C", "mutex", "3", "16"}, first: "lock_contention"},
		{name: "memory leak", cpus: "0", argv: []string{"@W", "alloc", "-mib", "512", "-steps", "10", "-step-seconds", "0.6", "-hold", "1"}, first: "memory_growth"},
		{name: "major faults after cache drop", cpus: "0", pre: "@C write @D/m 268435456 1048576 && sync", argv: []string{"@C", "mapread", "3", "@D/m", "256"}, first: "major_fault_rate"},
		{name: "kernel time", cpus: "0", argv: []string{"@C", "stat", "3"}, first: "cpu_system_pct"},
		{name: "CPU quota throttling", argv: []string{"@C", "spin", "3", "2"}, quota: true, first: "cpu_throttled"},
		// A kill for lack of memory leads the digest, before any finding, as in a job's.
		{name: "killed for lack of memory", cpus: "0", argv: []string{"sh", "-c", "@W alloc -mib 512 -steps 4 -step-seconds 0.5 -hold 1; sleep 2"},
			memLimit: 200 << 20, event: "oom_kill"},
	}
	var table []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pre != "" {
				pre := strings.NewReplacer("@D", dir, "@C", corpus, "@W", load).Replace(tc.pre)
				if out, err := exec.Command("sh", "-c", pre).CombinedOutput(); err != nil {
					t.Logf("%s: %v %s (the start is then less cold)", tc.pre, err, out)
				}
			}
			argv := make([]string, len(tc.argv))
			for i, a := range tc.argv {
				argv[i] = strings.NewReplacer("@D", dir, "@C", corpus, "@W", load).Replace(a)
			}
			quota := noQuota
			if tc.quota {
				quota = 0
			}
			var res standalone.Result
			var d *digest.Report
			var got, row string
			var all []string
			// A run that work outside it slowed (its own report says so: time lost to
			// other work on its CPUs) measured the machine, not the program: run once more.
			for try := 1; ; try++ {
				quiet(t)
				res = corpusRun(t, persyst, conf, tc.cpus, filepath.Join(dir, "result.json"), argv, quota, tc.memLimit)
				if d = res.Digest; d == nil {
					t.Fatal("no digest")
				}
				got, row, all = corpusFirst(tc.name, d)
				if got == tc.first || try == 2 || d.Interference == nil || d.Interference.LostSeconds <= 0 {
					break
				}
				t.Logf("run %d: first finding %q with %.2f s lost to work outside it (%s): run again", try, got, d.Interference.LostSeconds, d.Interference.Class)
			}
			table = append(table, row)
			oneStory(t, d)
			if tc.event != "" {
				if len(d.Events) == 0 || d.Events[0].Key != tc.event {
					t.Errorf("events %+v, want %s first", d.Events, tc.event)
				}
				if text := digest.Text(*d, digest.TextOptions{}); !strings.Contains(text, "\n! Out of memory") {
					t.Errorf("the digest does not lead with the kill:\n%s", text)
				}
				return
			}
			if got != tc.first {
				t.Errorf("first finding %q, want %q (findings %v)", got, tc.first, all)
				corpusEvidence(t, tc.name, filepath.Join(dir, "result.json"), res)
			}
			if tc.first == "" && len(d.Findings) > 0 || tc.first == "startup" && len(d.Findings) > 0 {
				t.Errorf("a negative control has findings %v", all)
			}
		})
	}
	t.Logf("the corpus through persyst run:\n| workload | first finding | mean severity |\n|---|---|---|\n%s", strings.Join(table, "\n"))
}

// corpusFirst is a digest's first finding ("": none; "startup": too short to judge), its
// row of the corpus table (workload, first finding, severity) and every finding.
func corpusFirst(name string, d *digest.Report) (first, row string, all []string) {
	what, sev := "none", ""
	switch {
	case len(d.Findings) > 0:
		f := d.Findings[0]
		first, what, sev = f.Key, f.Key, fmt.Sprintf("%.2f (%.0f %% of the job)", f.MeanSeverity, 100*f.TimeShare)
	case d.StartupOnly:
		first, what = "startup", "none (too short to judge)"
	}
	for _, f := range d.Findings {
		all = append(all, f.Key)
	}
	return first, fmt.Sprintf("| %s | %s | %s |", name, what, sev), all
}

// oneStory checks that a digest does not contradict itself where other work took the
// job's CPUs: with a starvation finding (the share of the time any thread waited) and
// time lost to other work both said, they agree (within a tenth of the time) or the
// digest says why they differ.
func oneStory(t *testing.T, d *digest.Report) {
	t.Helper()
	in := d.Interference
	if in == nil || in.Share < digest.InterferenceShown || len(in.Causes) == 0 || in.Causes[0].Key != phases.CauseCPU {
		return
	}
	for _, f := range d.Findings {
		if f.Key != "cpu_starved" || len(f.Deciles) != 11 {
			continue
		}
		text := strings.Join(strings.Fields(digest.Text(*d, digest.TextOptions{})), " ")
		if f.Median()/100 >= in.Share+0.1 && !strings.Contains(text, "Its threads waited for a CPU more of the time") {
			t.Errorf("starved of CPU %.0f %% of the time, %.0f %% lost to other work, and no word of why they differ:\n%s",
				f.Median(), 100*in.Share, digest.Text(*d, digest.TextOptions{}))
		}
	}
}

// corpusEvidence keeps a failed case's result under build/test-artifacts and logs what
// it measured: how the command ended, its samples' memory and CPU, what was not measured.
func corpusEvidence(t *testing.T, name, result string, res standalone.Result) {
	t.Helper()
	arts, err := artifacts()
	if b, rerr := os.ReadFile(result); err == nil && rerr == nil {
		keep := filepath.Join(arts, "corpus-"+strings.NewReplacer(" ", "_", "/", "_").Replace(name)+".json")
		if err := os.WriteFile(keep, b, 0o644); err == nil {
			t.Logf("result kept in %s", keep)
		}
	}
	t.Logf("exit status %d, signal %q, %.2f s, %d samples, not measured: %v",
		res.ExitStatus, res.Signal, res.Summary.Seconds, len(res.Samples), res.Summary.NotMeasured)
	for _, s := range res.Samples {
		t.Logf("  %s %-7s %.2fs anon %.0f mem %.0f peak %.0f user %.2f", s.Time.Format("15:04:05.000"), s.Reason, s.Seconds,
			s.Job[sample.MemAnonBytes], s.Job[sample.MemBytes], s.Job[sample.MemPeakBytes], s.Job[sample.CPUUserSeconds])
	}
}

// noQuota: corpusRun sets no CPU quota.
const noQuota = time.Duration(-1)

// corpusRun runs persyst run (on cpus, if set) in a private mount namespace with tracefs
// mounted, its result written to a file of its own; quota (unless noQuota) after that
// long, its cpu cgroup gets a quota of half a CPU.
func corpusRun(t *testing.T, persyst, conf, cpus, result string, argv []string, quota time.Duration, memLimit int64) standalone.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := `mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; exec "$@"`
	args := []string{"-m", "sh", "-c", script, "sh"}
	if cpus != "" {
		args = append(args, "taskset", "-c", cpus)
	}
	args = append(args, persyst, "run", "--config", conf, "--interval", "1s", "--log-level", "error", "--json", "--json-file", result, "--")
	cmd := exec.CommandContext(ctx, "unshare", append(args, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// unshare, sh and taskset exec: the command's pid is persyst's.
	limit := func(file, value string) {
		f := fmt.Sprintf("/sys/fs/cgroup/%s", strings.Replace(file, "@", fmt.Sprintf("persyst_run/run-%d", cmd.Process.Pid), 1))
		deadline := time.Now().Add(10 * time.Second)
		for {
			if err := os.WriteFile(f, []byte(value), 0); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: %v", f, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if quota >= 0 {
		time.Sleep(quota)
		limit("cpu/@/cpu.cfs_quota_us", "50000")
	}
	if memLimit > 0 {
		limit("memory/@/memory.limit_in_bytes", strconv.FormatInt(memLimit, 10))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("persyst run %v: %v\n%s", argv, err, out.String())
	}
	b, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	var res standalone.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result of persyst run %v: %v", argv, err)
	}
	return res
}

// quiet waits (up to 30 s) until the machine's CPUs are at least 80 % idle, so that what
// earlier tests left running (a cluster shutting down) does not starve a workload.
func quiet(t *testing.T) {
	t.Helper()
	idle := func() (idle, total float64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		for i, v := range f[1:] {
			x, _ := strconv.ParseFloat(v, 64)
			total += x
			if i == 3 || i == 4 { // idle, iowait
				idle += x
			}
		}
		return idle, total
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		i0, t0 := idle()
		time.Sleep(500 * time.Millisecond)
		i1, t1 := idle()
		if t1 > t0 && (i1-i0)/(t1-t0) >= 0.8 {
			return
		}
	}
	t.Logf("the machine did not become quiet within 30 s")
}

// TestCorpusSlurm runs the corpus's workloads that no other test runs through Slurm as
// batch jobs, one at a time (the test nodes share this machine's CPUs), and checks the
// first finding of the digest the batch host's daemon made.
func TestCorpusSlurm(t *testing.T) {
	c := startCluster(t, 1)
	_, load := binaries(t)
	corpus := filepath.Join(repoRoot, "build/persyst-corpus")
	dir := filepath.Join(c.work, "corpus")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o1777)
	cases := []struct {
		name, script string
		sbatch       []string
		first        string // "": no finding; "startup": too short to judge
		pre          string // shell command run first, outside the job
	}{
		{"true", "true", nil, "startup", ""},
		{"balanced compute", "@C spin 3 2", []string{"-c", "2"}, "", ""},
		{"sleep only", "sleep 3", []string{"-c", "2"}, "idle_cores", ""},
		{"one CPU that only waits", "sleep 3", []string{"-c", "1"}, "idle_cpu", ""},
		{"tiny reads", "@C read @D/r 1048576 64 3", nil, "io_read_request_size", ""},
		{"fork/exec storm", "@C forkexec 3 /bin/true", nil, "process_creation_rate", ""},
		{"fork storm (subshells)", "bash -c 'end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do (:); done'", nil, "process_fork_rate", ""},
		{"oversubscription", "@C spin 3 8", []string{"-c", "2"}, "oversubscription", ""},
		{"mutex contention", "@C mutex 3 16", []string{"-c", "2"}, "lock_contention", ""},
		// Not here: the major-fault workload (TestCorpus runs it through persyst run). As a
		// batch job in the pristine root it came out I/O-stalled first in 2 of 3 runs, with
		// major faults counted in only 40 % of its intervals although it read its file in
		// all of them; the cause is not found yet.
	}
	var table []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			repl := strings.NewReplacer("@C", corpus, "@W", load, "@D", dir)
			if tc.pre != "" {
				if out, err := exec.Command("sh", "-c", repl.Replace(tc.pre)).CombinedOutput(); err != nil {
					t.Fatalf("%s: %v %s", tc.pre, err, out)
				}
			}
			quiet(t)
			script := repl.Replace(tc.script)
			args := append(append([]string{}, tc.sbatch...), "-o", filepath.Join(c.work, "corpus-%j.out"), "--wrap", script)
			id := c.sbatch(t, nil, args...)
			if st := c.waitDone(t, id, 2*time.Minute); st != "COMPLETED" {
				t.Fatalf("job %d ended %s", id, st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := daemon.JobReport(ctx, c.socket(c.nodes[0]), id)
			if err != nil {
				t.Fatal(err)
			}
			got, row, all := corpusFirst(tc.name+" (Slurm)", r)
			table = append(table, row)
			oneStory(t, r)
			// Slurm's own set-up can make a job of `true` outlast its start-up: no finding
			// either way.
			if got != tc.first && !(tc.first == "startup" && got == "") {
				b, _ := os.ReadFile(filepath.Join(c.work, fmt.Sprintf("corpus-%d.out", id)))
				t.Errorf("job %d: first finding %q, want %q (findings %v); output:\n%s", id, got, tc.first, all, b)
				for _, p := range r.Properties {
					t.Logf("  %s: assessed %v deciles %.3g share %.2f finding %v %s%s", p.Key, p.Assessed, p.Deciles, p.TimeShare, p.Finding, p.NotAssessed, p.Suppressed)
				}
			}
		})
	}
	t.Logf("the corpus through Slurm:\n| workload | first finding | mean severity |\n|---|---|---|\n%s", strings.Join(table, "\n"))
}
