package jobmap

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/slurmver"
)

var update = flag.Bool("update", false, "rewrite the golden files of the recorded releases")

// sameFacts is what every source must read alike from the same job.
type sameFacts struct {
	State, User, Name, NodeList string
	Nodes                       []string
	Cores                       []int
	MemPerNodeMB                int
	ArrayJobID, ArrayTaskID     uint32
	IsArray                     bool
}

// lossy are the readings known to be wrong, by "<series> <source> <job id>": Slurm's own
// answer lost what the pattern was. The test checks that each is still wrong, so that the
// list does not outlive the loss.
var lossy = map[string]string{
	"22.05 scontrol show job 6": `scontrol 22.05 prints "%%" as it is: "%%j" then reads as the pattern "%j" (scontrol.go)`,
}

// pendingTask is the loss every release has for job 10, a pending array task, in every
// source that gives the output path as Slurm expanded it (scontrol's text, and every source
// with slurmver.OutputPartlyExpanded): Slurm expands %a of its record as NO_VAL
// (4294967294), and gives the task's id once it runs (a digest is made of running jobs only).
const pendingTask = "Slurm expands %a of a pending array task as NO_VAL"

// lost says whether the reading of job id by source of release rel is known to be wrong,
// and why.
func lost(rel slurmver.Release, source string, id uint32) (string, bool) {
	if why, ok := lossy[fmt.Sprintf("%s %s %d", rel.Series(), source, id)]; ok {
		return why, true
	}
	if id == 10 && (source == "scontrol show job" || rel.Has(slurmver.OutputPartlyExpanded)) {
		return pendingTask, true
	}
	return "", false
}

func factsOf(j *Job) sameFacts {
	f := sameFacts{State: j.State, User: j.User, Name: j.Name, NodeList: j.NodeList, Nodes: j.Nodes, MemPerNodeMB: j.MemPerNodeMB,
		ArrayJobID: j.ArrayJobID, ArrayTaskID: j.ArrayTaskID, IsArray: j.IsArray}
	for _, a := range j.Alloc {
		f.Cores = append(f.Cores, a.Cores)
	}
	return f
}

// TestRecordedReleases reads what each Slurm release persyst is tested with
// (slurmver.Tested) said of the same jobs (testdata/slurm-<series>/, recorded by
// scripts/record-slurm.sh), through every source persyst has for it, with the data parser
// its commands print (commandsParser): slurmrestd, the JSON command (scontrol
// --json=VERSION with the data parser plugins, else squeue --json) and scontrol's text. Each
// job's output and error files are the ones Slurm wrote (truth.txt), and the sources
// agree on its state, user, nodes, cores per node, memory and array ids. What slurmrestd
// gives is kept in jobs.golden.json (go test ./jobmap -run TestRecordedReleases -update).
func TestRecordedReleases(t *testing.T) {
	for _, d := range slurmver.Tested {
		rel, series := d.Slurm, d.Slurm.Series()
		t.Run(series, func(t *testing.T) {
			dir := filepath.Join("testdata", "slurm-"+series)
			sources := readRecorded(t, dir, rel)
			truth := readTruth(t, filepath.Join(dir, "truth.txt"))
			restd := sources["slurmrestd"]
			if len(restd) != len(truth) {
				t.Errorf("slurmrestd gives %d jobs, Slurm ran %d", len(restd), len(truth))
			}
			for name, jobs := range sources {
				byID := map[uint32]*Job{}
				for _, j := range jobs {
					byID[j.JobID] = j
				}
				for id, files := range truth {
					j := byID[id]
					if j == nil {
						t.Errorf("%s: no job %d", name, id)
						continue
					}
					right := j.Stdout == files[0] && j.Stderr == files[1]
					switch why, known := lost(rel, name, id); {
					case known && right:
						t.Errorf("%s: job %s is read right now: remove it from lossy (%s)", name, j.ID(), why)
					case !known && !right:
						t.Errorf("%s: job %s: output %q, error %q; Slurm wrote %q, %q", name, j.ID(), j.Stdout, j.Stderr, files[0], files[1])
					}
					if diff := cmp.Diff(factsOf(byID[id]), factsOf(findJob(restd, id))); name != "slurmrestd" && diff != "" {
						t.Errorf("job %d: %s and slurmrestd differ (-%s +slurmrestd):\n%s", id, name, name, diff)
					}
				}
			}
			b, err := json.MarshalIndent(restd, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			testenv.Golden(t, filepath.Join(dir, "jobs.golden.json"), string(b)+"\n", *update, "go test ./jobmap -run TestRecordedReleases -update")
		})
	}
}

// readRecorded parses a recording through every source of its release.
func readRecorded(t *testing.T, dir string, rel slurmver.Release) map[string][]*Job {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hosts := func(n string) string { return n } // the test cluster's nodes are their hosts
	p := commandsParser(rel)
	if p == nil {
		t.Fatalf("Slurm %v's commands print no JSON persyst reads", rel)
	}
	command, file := "squeue --json", "squeue.json"
	if rel.Has(slurmver.DataParserPlugins) {
		command, file = "scontrol --json", "scontrol-json.json"
	}
	out := map[string][]*Job{}
	var err error
	if out["slurmrestd"], err = p.parse(read("restd-jobs.json"), hosts); err != nil {
		t.Fatalf("slurmrestd: %v", err)
	}
	if out[command], err = p.parse(read(file), hosts); err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	if out["scontrol show job"], err = parseScontrol(read("scontrol-show-job-o-d.txt"), rel, hosts); err != nil {
		t.Fatalf("scontrol show job: %v", err)
	}
	return out
}

// readTruth reads truth.txt: job id → the files Slurm wrote its output and error to.
func readTruth(t *testing.T, path string) map[uint32][2]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32][2]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Split(l, "\t")
		if strings.HasPrefix(l, "#") || len(f) != 3 {
			continue
		}
		_, id := nameID("x(" + f[0] + ")")
		out[id] = [2]string{f[1], f[2]}
	}
	return out
}

func findJob(jobs []*Job, id uint32) *Job {
	for _, j := range jobs {
		if j.JobID == id {
			return j
		}
	}
	return &Job{}
}

// TestStateOf: a v0.0.40+ state list is named as Slurm's job_state_string names it: the
// first flag of its order that is set, else the base state.
func TestStateOf(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"RUNNING"}, "RUNNING"},
		{[]string{"COMPLETED", "COMPLETING"}, "COMPLETING"},
		{[]string{"PENDING", "EXPEDITING", "REQUEUED"}, "EXPEDITING"}, // Slurm 25.11's flag
		{[]string{"PENDING", "REQUEUED", "SIGNALING"}, "REQUEUED"},
		{nil, ""},
	} {
		if got := stateOf(tc.in); got != tc.want {
			t.Errorf("stateOf(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
