package integration

// The real-program corpus: programs HPC people run, as Debian ships them (stress-ng, fio,
// sysbench, hpcc with OpenMPI), none written here, run as Slurm batch jobs on the test
// cluster in every release's root (each release ships its own versions). Each case names
// the first finding a user of the tool would expect, or none, and why. A program that
// fails on its own (its exit status) is reported as that, apart from persyst's verdict.
// The cases are not the ones the issue that asked for the corpus tried by hand: the
// corpus grows from outside the project.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// programCase is one real program as a batch job.
type programCase struct {
	name   string
	needs  string   // the program the case runs (its Debian package installs it)
	script string   // the batch script's command; @D is a scratch directory
	sbatch []string // sbatch's options
	first  string   // the first finding a user would expect ("": none)
	why    string   // why that one
	// beside: the case runs beside other tests (TestRealProgramsBeside), its finding one
	// that other work on the machine cannot change.
	beside bool
	// busy: the program keeps every CPU it has busy with no more threads than CPUs, so
	// anything else the machine runs meanwhile (the test nodes' own daemons on its two
	// cores) is waiting for a CPU, and persyst rightly says so: where first is none, a
	// first finding of the job's surroundings (cpu_pressure, cpu_starved) reads it right
	// too. Seen once: sysbench at 70 % of its two CPUs, 30 % pressure.
	busy bool
}

// surroundings are the findings that describe other work competing for a job's CPUs.
var surroundings = map[string]bool{"cpu_pressure": true, "cpu_starved": true}

var programCases = []programCase{
	{name: "stress-ng fork", needs: "stress-ng", script: "stress-ng --fork 2 --timeout 3s --quiet", sbatch: []string{"-c", "2"},
		first: "process_fork_rate", why: "two workers fork and reap children that run no program: the kernel time is the forks'"},
	// 6 s: at 3 s its digest once had 2 samples and no futex call counted in them (the
	// calls counted in samples of 2 % of the time), and read only its 4 processes' wait
	// for the 2 CPUs.
	{name: "stress-ng futex", needs: "stress-ng", script: "stress-ng --futex 2 --timeout 6s --quiet", sbatch: []string{"-c", "2"},
		first: "lock_contention", why: "futex waits and wakes between the workers"},
	{name: "fio small buffered random reads", needs: "fio",
		script: "fio --name=r --directory=@D --rw=randread --bs=512 --size=64m --ioengine=psync --time_based --runtime=3 --output=/dev/null",
		sbatch: []string{"-c", "1"}, first: "io_read_request_size", why: "512-byte reads from the page cache: a system call per half KiB"},
	{name: "fio large sequential reads", needs: "fio",
		script: "fio --name=r --directory=@D --rw=read --bs=4m --size=256m --ioengine=psync --time_based --runtime=3 --output=/dev/null",
		sbatch: []string{"-c", "1"}, why: "4 MiB per call: the reads cost little beside what they move"},
	{name: "sysbench cpu, a thread per CPU", needs: "sysbench", script: "sysbench cpu --threads=2 --time=3 run", sbatch: []string{"-c", "2"},
		busy: true, why: "both CPUs busy in user space, nothing else"},
	{name: "sysbench threads, 16 on 2 CPUs, 2 locks", needs: "sysbench", script: "sysbench threads --threads=16 --thread-locks=2 --time=3 run",
		sbatch: []string{"-c", "2"}, first: "lock_contention", why: "16 threads take turns on 2 mutexes: they sleep on each other's locks more than they run"},
	{name: "hpcc, one rank", needs: "hpcc", script: hpcc("h1", 1, 1, 2000), sbatch: []string{"-N", "1", "-n", "1", "-c", "1"},
		busy: true, why: "HPL, DGEMM, STREAM, PTRANS, RandomAccess and FFT keep the rank's one CPU busy"},
	// Two CPUs a node for a rank of one thread: half of them idle, whatever MPI does, and
	// whatever else runs (other work takes CPU time from the rank, never adds to it), so
	// it runs beside other tests. (Most of its 30 s here are hpcc's latency and
	// bandwidth tests: TCP between network namespaces, the two ranks polling.)
	{name: "hpcc, two nodes, one rank of one thread on two CPUs each", needs: "hpcc", script: hpcc("h2", 1, 2, 500),
		sbatch: []string{"-N", "2", "--ntasks-per-node", "1", "-c", "2"}, first: "idle_cores", beside: true,
		why: "each node's rank keeps one of its two CPUs busy (the test nodes share this machine's CPUs: one each would be one CPU for both ranks)"},
}

// hpcc is the batch script of an hpcc run of p × q ranks in @D/dir: Debian's example
// input with its process grid and HPL's problem size n set, mpirun in the job's
// allocation on the cluster's network (@N), and the run's own verdict (hpcc's output ends with its end marker).
func hpcc(dir string, p, q, n int) string {
	return fmt.Sprintf(`mkdir -p @D/%[1]s && cd @D/%[1]s && sed -e 's/^2\( *Ps\)/%[2]d\1/' -e 's/^2\( *Qs\)/%[3]d\1/' -e 's/^1000\( *Ns\)/%[5]d\1/' `+
		`/usr/share/doc/hpcc/examples/_hpccinf.txt > hpccinf.txt && `+
		// The ranks talk over the cluster's network only (each test node's namespace has
		// others that lead nowhere: trying them costs a connect timeout).
		`export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=@N OMPI_MCA_oob_tcp_if_include=@N PRTE_MCA_oob_tcp_if_include=@N && `+
		`mpirun -np %[4]d hpcc && grep -q 'End of HPC Challenge' hpccoutf.txt`, dir, p, q, p*q, n)
}

// nodeNet is the test nodes' network as CIDR (their NodeAddr in slurm.conf, a /24).
func nodeNet(t *testing.T, c *cluster) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "etc", "slurm.conf"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`NodeAddr=(\d+\.\d+\.\d+)\.\d+`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no NodeAddr in slurm.conf:\n%s", b)
	}
	return string(m[1]) + ".0/24"
}

// TestRealPrograms runs the real-program corpus through Slurm, one job at a time (the
// test nodes share this machine's CPUs), and checks each digest's first finding.
func TestRealPrograms(t *testing.T) { runPrograms(t, false) }

// TestRealProgramsBeside runs the corpus's cases whose finding other work cannot change
// (programCase.beside), beside other tests on a cluster of its own.
func TestRealProgramsBeside(t *testing.T) {
	defer sideBySide(t)()
	runPrograms(t, true)
}

// runPrograms runs the cases that run beside other tests, or those that do not.
func runPrograms(t *testing.T, beside bool) {
	c := startCluster(t, 2)
	dir := filepath.Join(c.work, "programs")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o1777)
	var table []string
	for _, tc := range programCases {
		if tc.beside != beside {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.needs); err != nil {
				t.Fatalf("%s not installed (scripts/deps.sh installs it)", tc.needs)
			}
			if !beside {
				quiet(t)
			}
			out := filepath.Join(c.work, "program-%j.out")
			script := strings.NewReplacer("@D", dir, "@N", nodeNet(t, c)).Replace(tc.script)
			args := append(append([]string{}, tc.sbatch...), "-o", out, "--wrap", script)
			id := c.sbatch(t, nil, args...)
			st := c.waitDone(t, id, 3*time.Minute)
			output := func() string {
				b, _ := os.ReadFile(strings.ReplaceAll(out, "%j", fmt.Sprint(id)))
				return string(b)
			}
			if st != "COMPLETED" {
				// The program's own failure: not persyst's verdict.
				t.Fatalf("the program itself failed: job %d %s (exit %s); its output:\n%s", id, st, c.jobInfo(t, id)["ExitCode"], output())
			}
			r := c.jobReport(t, id)
			got, row, all := corpusFirst(tc.name+" (Slurm)", r)
			table = append(table, fmt.Sprintf("%s %.0f s, %d samples | %s |", row, r.Seconds, r.Samples, tc.why))
			oneStory(t, r)
			if got != tc.first && tc.busy && tc.first == "" && surroundings[got] {
				t.Logf("job %d: first finding %s: the machine's other work competed for the CPUs the job kept busy", id, got)
			} else if got != tc.first {
				t.Errorf("job %d: first finding %q, want %q (%s); findings %v; output:\n%s", id, got, tc.first, tc.why, all, output())
				for _, p := range r.Properties {
					if p.Assessed && p.TimeShare > 0 {
						t.Logf("  %s: deciles %.3g share %.2f finding %v%s", p.Key, p.Deciles, p.TimeShare, p.Finding, p.Suppressed)
					}
				}
				c.debugJob(t, id)
			}
		})
	}
	t.Logf("the real programs through Slurm:\n| program | first finding | mean severity | measured | why |\n|---|---|---|---|---|\n%s", strings.Join(table, "\n"))
}
