package amdgpu_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/amdgpu"
	"github.com/persyst/persyst/amdgpu/fakeamdgpu"
	"github.com/persyst/persyst/hostfs"
)

// fakeNode lays out a FAKE node with an MI250X-like card (energy counter, gpu_metrics,
// the KFD) and an MI300X-like one in a partition (power1_input, no energy counter, no
// RAS, not in the KFD), beside a card another driver holds.
func fakeNode(t *testing.T) (*fakeamdgpu.Tree, *amdgpu.Sysfs, string) {
	t.Helper()
	root := t.TempDir()
	tree, err := fakeamdgpu.New(root,
		fakeamdgpu.Card{Bus: "0000:c1:00.0", Render: 128, GPUID: 4242, Name: "AMD Instinct MI250X", VRAM: 64 << 30, Metrics: 3},
		fakeamdgpu.Card{Bus: "0000:d1:00.0", Render: 129, Name: "AMD Instinct MI300X", VRAM: 192 << 30, Partition: "CPX", PowerInput: true, NoRAS: true})
	if err != nil {
		t.Fatal(err)
	}
	// A card of another driver, and a connector's entry: neither is an amdgpu card.
	other := filepath.Join(root, "sys/devices/pci0000:00/0000:3b:00.0")
	os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers/nvidia"), 0o755)
	os.MkdirAll(other, 0o755)
	os.Symlink(filepath.Join(root, "sys/bus/pci/drivers/nvidia"), filepath.Join(other, "driver"))
	os.MkdirAll(filepath.Join(root, "sys/class/drm/card9"), 0o755)
	os.Symlink(other, filepath.Join(root, "sys/class/drm/card9/device"))
	os.MkdirAll(filepath.Join(root, "sys/class/drm/card1-DP-1"), 0o755)
	return tree, amdgpu.New(hostfs.New(tree.Sys())), root
}

func TestDevices(t *testing.T) {
	_, sys, _ := fakeNode(t)
	devs, err := sys.Devices()
	if err != nil {
		t.Fatal(err)
	}
	type dev struct {
		Card, Bus, Name, Partition string
		Render                     int
		VRAM                       uint64
		GPUIDs                     []uint64
	}
	var got []dev
	for _, d := range devs {
		got = append(got, dev{d.Card, d.Bus, d.Name, d.Partition, d.Render, d.VRAM, d.GPUIDs})
	}
	want := []dev{
		{"card1", "0000:c1:00.0", "AMD Instinct MI250X", "", 128, 64 << 30, []uint64{4242}},
		{"card2", "0000:d1:00.0", "AMD Instinct MI300X", "CPX", 129, 192 << 30, nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
}

// TestRead: what one read gives of each card, and why what it lacks is absent.
func TestRead(t *testing.T) {
	tree, sys, _ := fakeNode(t)
	if err := tree.Set(0, fakeamdgpu.State{Busy: 87, VRAMUsed: 40 << 30, Watts: 480.5, Joules: 1234.5, PowerCapped: true, Uncorrectable: 2}); err != nil {
		t.Fatal(err)
	}
	if err := tree.Set(1, fakeamdgpu.State{Busy: 3, VRAMUsed: 1 << 30, Watts: 150}); err != nil {
		t.Fatal(err)
	}
	devs, _ := sys.Devices()
	a, b := sys.Read(devs[0]), sys.Read(devs[1])
	if a.Busy != 87 || a.VRAMUsed != 40<<30 || a.Watts != 480.5 || a.Joules != 1234.5 || !a.PowerCapped || a.Thermal || a.Uncorrectable != 2 ||
		!a.Has["busy"] || !a.Has["throttle"] || !a.Has["ras"] || !a.Has["joules"] || len(a.Why) != 0 {
		t.Errorf("the MI250X-like card read %+v", a)
	}
	if b.Busy != 3 || b.Watts != 150 || b.Has["joules"] || b.Has["ras"] || b.Has["throttle"] || b.Why["joules"] == "" || !strings.Contains(b.Why["ras"], "no RAS") {
		t.Errorf("the MI300X-like card read %+v", b)
	}
	// A die that reports no power at all, busy (an MI250X's second GCD): its power and
	// energy are not measured, never 0.
	if err := tree.Set(0, fakeamdgpu.State{Busy: 60, VRAMUsed: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if a := sys.Read(devs[0]); a.Has["watts"] || a.Has["joules"] || !strings.Contains(a.Why["joules"], "second die") {
		t.Errorf("a busy die at 0 W read %+v", a)
	}
}

// TestPartitions: a FAKE MI300X in CPX mode (4 compute partitions here; the KFD lists
// each, partition 0 on the card's render node, the others on the driver's partition
// devices) is 4 devices, each its render node, gpu_id and share of the memory; a
// partition's busy share is its own (gpu_metrics' xcp_stats), its memory its processes',
// and its power the card's, not its own.
func TestPartitions(t *testing.T) {
	root := t.TempDir()
	tree, err := fakeamdgpu.New(root,
		fakeamdgpu.Card{Bus: "0000:c1:00.0", Render: 128, GPUID: 4242, Name: "AMD Instinct MI250X", VRAM: 64 << 30, Metrics: 3},
		fakeamdgpu.Card{Bus: "0000:d1:00.0", Render: 136, GPUID: 500, Name: "AMD Instinct MI300X", VRAM: 192 << 30, Partition: "CPX",
			PowerInput: true, Metrics: 8, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	sys := amdgpu.New(hostfs.New(tree.Sys()))
	devs, err := sys.Devices()
	if err != nil {
		t.Fatal(err)
	}
	type dev struct {
		Name            string
		Render, XCP, Of int
		VRAM            uint64
		GPUIDs          []uint64
	}
	var got []dev
	for _, d := range devs {
		got = append(got, dev{d.Name, d.Render, d.XCP, d.Partitions, d.VRAM, d.GPUIDs})
	}
	part := "AMD Instinct MI300X CPX partition"
	want := []dev{{"AMD Instinct MI250X", 128, -1, 0, 64 << 30, []uint64{4242}},
		{part, 136, 0, 4, 48 << 30, []uint64{500}}, {part, 137, 1, 4, 48 << 30, []uint64{501}},
		{part, 138, 2, 4, 48 << 30, []uint64{502}}, {part, 139, 3, 4, 48 << 30, []uint64{503}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("devices (-want +got):\n%s", diff)
	}
	if err := tree.Set(1, fakeamdgpu.State{Busy: 40, VRAMUsed: 100 << 30, Watts: 700, Joules: 10, PartitionBusy: []int{0, 0, 95, 10}}); err != nil {
		t.Fatal(err)
	}
	tree.Proc(300, map[uint64]uint64{502: 30 << 30, 503: 1 << 30})
	tree.Proc(301, map[uint64]uint64{502: 2 << 30})
	n := sys.Read(devs[3]) // partition 2
	if n.Busy != 95 || !n.Has["busy"] || n.VRAMUsed != 32<<30 || !n.Has["vram"] || n.Has["watts"] || n.Has["joules"] || n.Has["throttle"] ||
		!strings.Contains(n.Why["joules"], "partition 2 of 4: the card's power") || !n.Has["ras"] {
		t.Errorf("partition 2 read %+v", n)
	}
	// A table that gives no partition's busy share (v1.5): said so, never the card's.
	tree2, err := fakeamdgpu.New(t.TempDir(), fakeamdgpu.Card{Bus: "0000:d1:00.0", Render: 128, GPUID: 9, VRAM: 192 << 30, Partition: "DPX", Metrics: 5, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	sys2 := amdgpu.New(hostfs.New(tree2.Sys()))
	devs2, _ := sys2.Devices()
	if len(devs2) != 2 {
		t.Fatalf("a DPX card: %d devices, want 2", len(devs2))
	}
	if n := sys2.Read(devs2[1]); n.Has["busy"] || !strings.Contains(n.Why["busy"], "gpu_metrics v1.5 gives no busy share for partition 1") {
		t.Errorf("partition 1 of a v1.5 table read %+v", n)
	}
}

// TestProcesses: the KFD's processes, each with the VRAM it holds on each card.
func TestProcesses(t *testing.T) {
	tree, sys, _ := fakeNode(t)
	tree.Proc(300, map[uint64]uint64{4242: 8 << 30})
	tree.Proc(301, map[uint64]uint64{4242: 1 << 30, 777: 5})
	procs, ok, err := sys.Processes()
	if err != nil || !ok {
		t.Fatalf("processes: ok %v, %v", ok, err)
	}
	want := []amdgpu.Proc{{PID: 300, VRAM: map[uint64]uint64{4242: 8 << 30}}, {PID: 301, VRAM: map[uint64]uint64{4242: 1 << 30, 777: 5}}}
	if diff := cmp.Diff(want, procs); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}
	tree.Proc(300, nil)
	if procs, _, _ := sys.Processes(); len(procs) != 1 || procs[0].PID != 301 {
		t.Errorf("after process 300 ended: %+v", procs)
	}
}

func TestParseRAS(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want amdgpu.RAS
		err  string
	}{
		{in: "ue: 3\nce: 17\n", want: amdgpu.RAS{Uncorrectable: 3, Correctable: 17}},
		{in: "ce: 1\nue: 0\n", want: amdgpu.RAS{Correctable: 1}},
		{in: "ue: x\nce: 0\n", err: "line 1: ue: want a count"},
		{in: "ue: 1\n", err: "want \"ue: N\" and \"ce: N\""},
	} {
		got, err := amdgpu.ParseRAS(strings.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
