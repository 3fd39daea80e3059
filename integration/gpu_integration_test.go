package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/accounting"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/nvml/nvmltest"
)

// gpuDevices are the FAKE GPUs of every node (nvml/helper/fake.c): 80 GiB H100s with GPM.
const gpuDevices = `device uuid=GPU-0000 bus=00000000:1B:00.0 minor=0 memory=85899345920 gpm=1 name=Fake_H100
device uuid=GPU-1111 bus=00000000:43:00.0 minor=1 memory=85899345920 gpm=1 name=Fake_H100
device uuid=GPU-2222 bus=00000000:52:00.0 minor=2 memory=85899345920 gpm=1 name=Fake_H100
device uuid=GPU-3333 bus=00000000:9D:00.0 minor=3 memory=85899345920 gpm=1 name=Fake_H100
`

// TestGPUJobs: GPU jobs on the test cluster with Slurm's GRES (gres.conf File= lines
// of character devices) and a FAKE NVIDIA driver (no machine here has a GPU): the
// job's GPUs reach the daemon from the prolog's SLURM_JOB_GPUS, and its digest says what
// they did. bench/gpu_check.sh checks the same measurement on a real GPU.
func TestGPUJobs(t *testing.T) {
	defer sideBySide(t)()
	b := nvmltest.Build(t)
	dir := t.TempDir()
	scenario, procs := filepath.Join(dir, "scenario"), filepath.Join(dir, "procs")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(scenario, gpuDevices)
	write(procs, "")
	c := startCluster(t, 1, "ACCOUNTING=1", "PERSYST_GPUS=4", "PERSYST_FAKE_NVML_LIB="+filepath.Dir(b.Fake),
		"PERSYST_FAKE_NVML="+scenario, "PERSYST_FAKE_NVML_PROCS="+procs)
	busy := func(gpu string) string {
		return "at 0 gpu=" + gpu + " util=98 sm=95 occupancy=40 tensor=80 dram=50 power=600 mem=64424509440\n"
	}
	for _, tc := range []struct {
		name, gres, states, procs string
		first                     string // the first finding's key ("": no GPU finding)
		text                      string // in the digest
		notAssessed               string // gpu_low_util's reason
	}{
		{"4 GPUs, 2 used", "gpu:4", busy("0") + busy("1"), "", "gpu_unused", "2 of 4 GPUs did nothing", ""},
		{"busy", "gpu:2", busy("0") + busy("1"), "", "", "and 2 GPUs", ""},
		{"one block", "gpu:1", "at 0 gpu=0 util=99 sm=1 occupancy=1 power=130 mem=64424509440\n", "", "gpu_sm_activity", "GPU kernels keep few SMs busy", ""},
		// Another job's process (PID 1 stands for it) on the job's GPU.
		{"shared", "gpu:1", busy("0"), "0 1 1073741824\n", "", "and 1 GPU", "shared with processes outside the job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(scenario, gpuDevices+tc.states)
			write(procs, tc.procs)
			out := filepath.Join(c.work, strings.ReplaceAll(tc.name, " ", "_")+"-%j.out")
			id := c.sbatch(t, nil, "--gres="+tc.gres, "-o", out, "--wrap", "sleep 6")
			j := c.waitJob(t, c.nodes[0], id, "its GPUs", func(j *daemon.Job) bool { return j.GPUs != "" })
			if want := map[string]string{"gpu:4": "0,1,2,3", "gpu:2": "0,1", "gpu:1": "0"}[tc.gres]; j.GPUs != want {
				t.Errorf("the job's GPUs from the prolog: %q, want %q", j.GPUs, want)
			}
			if tc.name == "4 GPUs, 2 used" {
				// Prometheus: the job's GPU gauges while it runs (MetricsJobLabels: jobid).
				c.waitSeries(t, fmt.Sprintf(`persyst_job_gpus_unused{jobid="%d",node="%s"} 2`, id, c.nodes[0]), "persyst_job_gpu")
			}
			c.waitDone(t, id, time.Minute)
			text := readDigest(t, strings.ReplaceAll(out, "%j", strconv.FormatUint(uint64(id), 10)))
			t.Log(text)
			if !strings.Contains(text, tc.text) {
				t.Errorf("digest lacks %q:\n%s", tc.text, text)
			}
			if tc.name == "4 GPUs, 2 used" {
				page, errOut, err := c.run(t, nil, persystBin(), "report", "--html", strconv.FormatUint(uint64(id), 10))
				if err != nil {
					t.Fatalf("persyst report --html: %v\n%s", err, errOut)
				}
				for _, want := range []string{`id="chart-gpu"`, `id="chart-gpu_memory"`, "dashed red: GPUs per node", `data-gpus="4"`, c.nodes[0] + " GPUs"} {
					if !strings.Contains(page, want) {
						t.Errorf("persyst report --html lacks %s", want)
					}
				}
			}
			if tc.name == "4 GPUs, 2 used" {
				// Slurm's accounting: the summary in AdminComment carries the GPUs and the finding.
				tok, ok := accounting.Find(c.sacctComment(t, id))
				if !ok {
					t.Fatal("no persyst summary in the job's AdminComment")
				}
				ar, err := accounting.Decode(tok, func(string) string { return "" })
				if err != nil {
					t.Fatal(err)
				}
				if ar.GPUs != 4 || len(ar.Findings) == 0 || ar.Findings[0].Key != "gpu_unused" {
					t.Errorf("accounting summary: %d GPUs, findings %v; want 4 and gpu_unused first", ar.GPUs, ar.Findings)
				}
			}
			r := c.jobReport(t, id)
			var first string
			for _, f := range r.Findings {
				if strings.HasPrefix(f.Key, "gpu_") {
					first = f.Key
					break
				}
			}
			if len(r.Findings) > 0 && tc.first != "" && r.Findings[0].Key != tc.first {
				t.Errorf("first finding %s, want %s", r.Findings[0].Key, tc.first)
			}
			if first != tc.first {
				t.Errorf("first GPU finding %q, want %q\n%s", first, tc.first, text)
			}
			if tc.notAssessed != "" {
				for _, p := range r.Properties {
					if p.Key == "gpu_low_util" && !strings.Contains(p.NotAssessed, tc.notAssessed) {
						t.Errorf("gpu_low_util: not assessed %q, want %q", p.NotAssessed, tc.notAssessed)
					}
				}
			}
		})
	}
	t.Run("no GPU", func(t *testing.T) {
		out := filepath.Join(c.work, "nogpu-%j.out")
		id := c.sbatch(t, nil, "-o", out, "--wrap", "sleep 3")
		c.waitDone(t, id, time.Minute)
		if text := readDigest(t, strings.ReplaceAll(out, "%j", strconv.FormatUint(uint64(id), 10))); strings.Contains(text, "GPU") {
			t.Errorf("a job without GPUs has GPUs in its digest:\n%s", text)
		}
		for _, p := range c.jobReport(t, id).Properties {
			if strings.HasPrefix(p.Key, "gpu_") {
				t.Errorf("a job without GPUs has property %s (%s)", p.Key, p.NotAssessed)
			}
		}
	})
}

// waitSeries waits up to 5 s for the first node's daemon's /metrics to give the line
// want, and fails with its lines that hold about where it does not.
func (c *cluster) waitSeries(t *testing.T, want, about string) {
	t.Helper()
	url := fmt.Sprintf("http://%s.11:%d/metrics", c.getenv("PERSYST_CLUSTER_NET"), daemonMetricsPort)
	var body string
	for range 50 {
		if body = scrape(url); strings.Contains(body, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s lacks %s:\n%s", url, want, grepLines(body, about))
}

// getenv is a variable of the cluster's environment (its env file), "" if absent.
func (c *cluster) getenv(name string) string {
	v := ""
	for _, kv := range c.env {
		if k, val, _ := strings.Cut(kv, "="); k == name {
			v = val // the last one wins, as in exec
		}
	}
	return v
}

// scrape returns a /metrics page ("" if it does not answer).
func scrape(url string) string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// readDigest waits for the digest at the end of a job's output file.
func readDigest(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	for range 100 {
		b, _ = os.ReadFile(path)
		if strings.Contains(string(b), "persyst") {
			return string(b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no digest in %s: %q", path, b)
	return ""
}
