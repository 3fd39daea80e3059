package gres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/hostfs"
)

// TestParse: slurmd -G's records, as each release prints them (24.11 and on: Links= and
// Flags=; 22.05: the links alone, "(null)" where none), become GRES indices in Slurm's
// order.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []GPU
		err       string
	}{
		{name: "no GRES", out: "slurmd: debug:  Log file re-opened\n", want: nil},
		{name: "24.11: File= ranges, two types in slurm.conf's order",
			out: "slurmd: Gres Name=gpu Type=nvidia Count=2 Index=0 ID=7696487 File=/dev/nvidia[0-1] Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML,ENV_RSMI,ENV_ONEAPI,ENV_OPENCL,ENV_DEFAULT\n" +
				"slurmd: Gres Name=gpu Type=amd Count=2 Index=128 ID=7696487 File=/dev/dri/renderD[128-129] Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML,ENV_RSMI,ENV_ONEAPI,ENV_OPENCL,ENV_DEFAULT\n",
			want: []GPU{{Index: 0, Type: "nvidia", Files: []string{"/dev/nvidia0"}}, {Index: 1, Type: "nvidia", Files: []string{"/dev/nvidia1"}},
				{Index: 2, Type: "amd", Files: []string{"/dev/dri/renderD128"}}, {Index: 3, Type: "amd", Files: []string{"/dev/dri/renderD129"}}}},
		{name: "22.05: no type, cores, a timestamp before",
			out:  "[2026-12-06T10:00:00.000] Gres Name=gpu Type=(null) Count=1 Index=3 ID=7696487 File=/dev/nvidia3 Cores=0-15 CoreCnt=32 Links=-1,0\n",
			want: []GPU{{Index: 0, Files: []string{"/dev/nvidia3"}}}},
		{name: "AutoDetect=rsmi: one GPU per record, its render node",
			out: "slurmd: Gres Name=gpu Type=mi250x Count=1 Index=136 ID=7696487 File=/dev/dri/renderD136 Links=-1,0 Flags=HAS_FILE,HAS_TYPE,ENV_RSMI\n" +
				"slurmd: Gres Name=gpu Type=mi250x Count=1 Index=128 ID=7696487 File=/dev/dri/renderD128 Links=0,-1 Flags=HAS_FILE,HAS_TYPE,ENV_RSMI\n",
			want: []GPU{{Index: 0, Type: "mi250x", Files: []string{"/dev/dri/renderD136"}}, {Index: 1, Type: "mi250x", Files: []string{"/dev/dri/renderD128"}}}},
		{name: "MultipleFiles: one GPU, several files",
			out:  "slurmd: Gres Name=gpu Type=a100 Count=1 Index=21 ID=7696487 File=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML\n",
			want: []GPU{{Index: 0, Type: "a100", Files: []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"}}}},
		{name: "other GRES and fileless GPUs count for nothing",
			out: "slurmd: Gres Name=shard Type=(null) Count=8 ID=1868853875 File=/dev/nvidia0 Flags=HAS_FILE,SHARED\n" +
				"slurmd: Gres Name=gpu Type=(null) Count=1 ID=7696487 Links=(null) Flags=\n" +
				"slurmd: Gres Name=gpu Type=(null) Count=1 Index=1 ID=7696487 File=/dev/nvidia1 Links=(null) Flags=HAS_FILE\n",
			want: []GPU{{Index: 0, Files: []string{"/dev/nvidia1"}}}},
		{name: "a count that fits no file", out: "slurmd: Gres Name=gpu Type=(null) Count=3 Index=0 ID=7696487 File=/dev/nvidia[0-1] Flags=HAS_FILE\n",
			err: "slurmd -G, line 1: 3 GPUs in 2 files (/dev/nvidia[0-1]): which index is which is not known"},
		{name: "a count that is no number", out: "x\nslurmd: Gres Name=gpu Count=lots File=/dev/nvidia0\n",
			err: `slurmd -G, line 2: Count "lots": not a count`},
		{name: "a file list that is no hostlist", out: "slurmd: Gres Name=gpu Count=1 File=/dev/nvidia[0\n",
			err: `slurmd -G, line 1: File "/dev/nvidia[0":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Parse (-want +got):\n%s", d)
			}
		})
	}
}

// TestParseBounded: output that would name more GPUs than MaxGPUs is refused.
func TestParseBounded(t *testing.T) {
	out := fmt.Sprintf("slurmd: Gres Name=gpu Count=%d File=/dev/nvidia[0-%d]\n", MaxGPUs+1, MaxGPUs)
	if _, err := Parse(strings.NewReader(out)); err == nil || !strings.Contains(err.Error(), "more than 1024 GPUs") {
		t.Errorf("err = %v, want more than %d GPUs", err, MaxGPUs)
	}
}

// TestResolve: each index's device is the one GPU device node among its files.
func TestResolve(t *testing.T) {
	devs := map[string][2]uint32{
		"/dev/nvidia0": {195, 0}, "/dev/nvidia3": {195, 3}, "/dev/nvidiactl": {195, 255},
		"/dev/dri/card1": {226, 1}, "/dev/dri/renderD128": {226, 128},
		"/dev/nvidia-caps/nvidia-cap21": {237, 21}, "/dev/null": {1, 3},
	}
	stat := func(p string) (uint32, uint32, error) {
		if p == "/dev/not-a-device" {
			return 0, 0, ErrNotDevice
		}
		d, ok := devs[p]
		if !ok {
			return 0, 0, fs.ErrNotExist
		}
		return d[0], d[1], nil
	}
	gpus := []GPU{
		{Files: []string{"/dev/nvidia3"}},
		{Files: []string{"/dev/dri/card1", "/dev/dri/renderD128"}},
		{Files: []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"}},
		{Files: []string{"/dev/nvidiactl"}},
		{Files: []string{"/dev/nvidia9"}},
		{Files: []string{"/dev/not-a-device"}},
		{Files: []string{"/dev/nvidia0", "/dev/nvidia3"}},
	}
	Resolve(gpus, stat)
	var got []string
	for _, g := range gpus {
		got = append(got, g.ID()+" "+g.Why)
	}
	want := []string{
		"minor:3 ", "render:128 ",
		" /dev/nvidia-caps/nvidia-cap21: device 237:21 is not a GPU's device node",
		" /dev/nvidiactl: device 195:255 is not a GPU's device node",
		" /dev/nvidia9: file does not exist",
		" /dev/not-a-device: not a character device",
		" 2 GPU devices among /dev/nvidia0,/dev/nvidia3",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Resolve (-want +got):\n%s", d)
	}
}

// TestOrder: slurmd is asked once, in the background, for this node (-N); its device
// files are read under the node's root; a slurmd that fails says why.
func TestOrder(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Device nodes need root to be made; a plain file is none, which Resolve says.
	if err := os.WriteFile(filepath.Join(root, "dev/nvidia0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var asked []string
	run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		asked = append(asked, name+" "+strings.Join(args, " "))
		return []byte("slurmd: Gres Name=gpu Type=(null) Count=1 Index=0 ID=7696487 File=/dev/nvidia0 Links=(null) Flags=HAS_FILE\n"), nil
	}
	o := Start(context.Background(), Options{Node: "gpu7", Host: hostfs.New(root), Run: run})
	gpus, err := o.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"slurmd -G -N gpu7"}, asked); d != "" {
		t.Errorf("asked (-want +got):\n%s", d)
	}
	if len(gpus) != 1 || gpus[0].ID() != "" || !strings.Contains(gpus[0].Why, "not a character device") {
		t.Errorf("gpus = %+v, want one, not a device", gpus)
	}
	if _, ready, _ := o.Get(); !ready {
		t.Error("Get: not ready after Wait")
	}

	failing := Start(context.Background(), Options{Host: hostfs.New(root), Run: func(context.Context, string, ...string) ([]byte, error) {
		return nil, errors.New("exit status 1: fatal: Unable to determine this slurmd's NodeName")
	}})
	if _, err := failing.Wait(context.Background()); err == nil || !strings.Contains(err.Error(), "slurmd -G: exit status 1") {
		t.Errorf("err = %v, want slurmd's failure", err)
	}
}
