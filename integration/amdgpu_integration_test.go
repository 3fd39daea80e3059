package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/amdgpu/fakeamdgpu"
	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/nvml/nvmltest"
)

// TestAMDGPUJobs: jobs on AMD GPUs, read from a FAKE amdgpu sysfs tree (no machine here
// has an AMD GPU), on a node that also has a FAKE NVIDIA GPU. Slurm's GRES are gres.conf
// File= lines of character devices, typed nvidia and amd (render nodes, major 226 as the
// DRM's); the job's GRES indices reach the daemon from the prolog, and slurmd -G says
// which device each is: a job's digest says what its own GPU did, never the other
// vendor's.
func TestAMDGPUJobs(t *testing.T) {
	defer sideBySide(t)()
	b := nvmltest.Build(t)
	dir := t.TempDir()
	const gpuID = 101 // the KFD's id of the first AMD GPU
	// An MI210-like card without a gpu_metrics table (its energy is its power's), and an
	// MI300X-like one in 2 compute partitions, each a GPU of Slurm's (renderD129, 130).
	tree, err := fakeamdgpu.New(filepath.Join(dir, "host"),
		fakeamdgpu.Card{Bus: "0000:c1:00.0", Render: 128, GPUID: gpuID, Name: "AMD Instinct MI210", VRAM: 64 << 30},
		fakeamdgpu.Card{Bus: "0000:c9:00.0", Render: 129, GPUID: 201, Name: "AMD Instinct MI300X", VRAM: 192 << 30, Partition: "DPX",
			PowerInput: true, Metrics: 8, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	scenario, procs := filepath.Join(dir, "scenario"), filepath.Join(dir, "procs")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const nvidia = "device uuid=GPU-0000 bus=00000000:1B:00.0 minor=0 memory=85899345920 gpm=1 name=Fake_H100\n"
	const nvidiaBusy = "at 0 gpu=0 util=98 sm=95 occupancy=40 tensor=80 dram=50 power=600 mem=64424509440\n"
	const nvidiaIdle = "at 0 gpu=0 util=0 sm=0 occupancy=0 tensor=0 dram=0 power=60 mem=0\n"
	write(procs, "")
	write(scenario, nvidia+nvidiaBusy)
	c := startCluster(t, 1, "PERSYST_GPUS=1", "PERSYST_AMD_GPUS=3", "PERSYST_FAKE_NVML_LIB="+filepath.Dir(b.Fake),
		"PERSYST_FAKE_NVML="+scenario, "PERSYST_FAKE_NVML_PROCS="+procs, "PERSYST_CONF_EXTRA=AMDGPUSysfs="+tree.Sys())
	busy := fakeamdgpu.State{Busy: 97, VRAMUsed: 60 << 30, Watts: 300}
	idle := fakeamdgpu.State{Busy: 0, VRAMUsed: 256 << 20, Watts: 40}
	for _, tc := range []struct {
		name, gres  string
		amd         fakeamdgpu.State // the MI210's
		parts       []int            // the MI300X's partitions' busy shares
		nvidia      string           // the NVIDIA GPU's state
		outside     bool             // a process outside the job (PID 1) on the first AMD GPU
		index       string           // the job's GRES index (SLURM_JOB_GPUS)
		first       string           // the first GPU finding's key ("": none)
		text        string           // in the digest
		notAssessed string           // gpu_unused's reason
	}{
		// The NVIDIA GPU beside it is busy: taken for the AMD one, the job would look busy.
		{name: "AMD left idle", gres: "gpu:amd:1", amd: idle, nvidia: nvidiaBusy, index: "1", first: "gpu_unused", text: "1 GPU (AMD Instinct MI210)"},
		{name: "AMD busy, most of its memory", gres: "gpu:amd:1", amd: busy, nvidia: nvidiaIdle, index: "1", text: "1 GPU (AMD Instinct MI210)"},
		{name: "AMD shared with a process outside the job", gres: "gpu:amd:1", amd: busy, nvidia: nvidiaBusy, outside: true, index: "1",
			text: "1 GPU (AMD Instinct MI210)", notAssessed: "shared with processes outside the job"},
		// The AMD GPUs idle: taken for the NVIDIA one, the job would look idle.
		{name: "NVIDIA busy beside idle AMD GPUs", gres: "gpu:nvidia:1", amd: idle, parts: []int{0, 0}, nvidia: nvidiaBusy, index: "0", text: "1 GPU (NVIDIA Fake H100)"},
		// A partition idle beside its busy sibling: each partition's busy share is its own.
		{name: "an MI300X partition idle beside its busy sibling", gres: "gpu:amd:3", amd: busy, parts: []int{0, 90}, nvidia: nvidiaBusy,
			index: "1,2,3", first: "gpu_unused", text: "3 GPUs (1 × AMD Instinct MI210, 2 × AMD Instinct MI300X DPX partition)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(scenario, nvidia+tc.nvidia)
			if err := tree.Set(0, tc.amd); err != nil {
				t.Fatal(err)
			}
			if err := tree.Set(1, fakeamdgpu.State{Busy: 50, Watts: 500, Joules: 1, PartitionBusy: tc.parts}); err != nil {
				t.Fatal(err)
			}
			kfd := map[uint64]uint64{}
			if tc.outside {
				kfd[gpuID] = 1 << 30
			}
			if err := tree.Proc(1, kfd); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(c.work, "amd-%j.out")
			id := c.sbatch(t, nil, "--gres="+tc.gres, "-o", out, "--wrap", "sleep 6")
			j := c.waitJob(t, c.nodes[0], id, "its GPUs", func(j *daemon.Job) bool { return j.GPUs != "" })
			if j.GPUs != tc.index {
				t.Errorf("the job's GPUs from the prolog: %q, want %q (the NVIDIA GPU is GRES index 0, the AMD ones 1 to 3)", j.GPUs, tc.index)
			}
			if tc.gres == "gpu:amd:1" && !tc.outside {
				// Prometheus names the running job's GPUs, vendor first.
				c.waitSeries(t, fmt.Sprintf(`persyst_job_gpu_info{jobid="%d",model="AMD Instinct MI210",node="%s"} 1`, id, c.nodes[0]), "persyst_job_gpu")
			}
			c.waitDone(t, id, time.Minute)
			text := readDigest(t, strings.ReplaceAll(out, "%j", strconv.FormatUint(uint64(id), 10)))
			t.Log(text)
			if !strings.Contains(strings.Join(strings.Fields(text), " "), tc.text) { // as if unwrapped
				t.Errorf("digest lacks %q", tc.text)
			}
			r := c.jobReport(t, id)
			var first string
			for _, f := range r.Findings {
				if strings.HasPrefix(f.Key, "gpu_") {
					first = f.Key
					break
				}
			}
			if first != tc.first {
				t.Errorf("first GPU finding %q, want %q", first, tc.first)
			}
			if want := len(strings.Split(tc.index, ",")); r.GPUs != want {
				t.Errorf("the report's GPUs: %d, want %d", r.GPUs, want)
			}
			if tc.notAssessed == "" {
				return
			}
			found := false
			for _, p := range r.Properties {
				if p.Key == "gpu_unused" || p.Key == "gpu_low_util" {
					found = true
					if !strings.Contains(p.NotAssessed, tc.notAssessed) {
						t.Errorf("%s: not assessed %q, want %q", p.Key, p.NotAssessed, tc.notAssessed)
					}
				}
			}
			if !found {
				t.Errorf("no gpu_unused or gpu_low_util property in the report")
			}
		})
	}
}
