package measure

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/amdgpu"
	"github.com/persyst/persyst/amdgpu/fakeamdgpu"
	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// TestAMDGPUSource: a job's AMD GPU (a FAKE amdgpu sysfs tree and KFD) is measured as an
// NVIDIA GPU is: busy time, energy, memory and throttling over the interval; what AMD's
// driver does not give (SM activity) not measured, naming the vendor; once a process
// outside the job uses the GPU, its device-wide values are not the job's.
func TestAMDGPUSource(t *testing.T) {
	f := newFakeJob(t)
	f.set(t, 0, 0, 100, 100)
	tree, err := fakeamdgpu.New(f.root,
		fakeamdgpu.Card{Bus: "0000:c1:00.0", Render: 128, GPUID: 11, Name: "AMD Instinct MI250X", VRAM: 64 << 30, Metrics: 3},
		fakeamdgpu.Card{Bus: "0000:c9:00.0", Render: 129, GPUID: 12, Name: "AMD Instinct MI250X", VRAM: 64 << 30, Metrics: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	busy := func(joules float64, vram uint64) {
		t.Helper()
		if err := tree.Set(0, fakeamdgpu.State{Busy: 100, VRAMUsed: vram, Watts: 400, Joules: joules, Thermal: true}); err != nil {
			t.Fatal(err)
		}
		if err := tree.Set(1, fakeamdgpu.State{Busy: 100, VRAMUsed: 1 << 30, Watts: 500, Joules: 9 * joules}); err != nil {
			t.Fatal(err)
		}
	}
	busy(1000, 8<<30)
	tree.Proc(4242, map[uint64]uint64{11: 8 << 30})
	tree.Proc(777, map[uint64]uint64{12: 1 << 30}) // another job's, on the other card
	s, err := amdgpu.NewSampler(amdgpu.New(hostfs.New(tree.Sys())), amdgpu.Options{Now: clock, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gpus := newAMDGPUs(s, s.Devices())
	s.Sample()
	env := &Env{Host: hostfs.New(f.root), Stats: cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}),
		GPU: gpus, Log: zerolog.Nop(), Now: clock}
	spec := Spec{Name: "job 42", CPUs: []int{0}, ProcCgroup: f.dir, StatCgroups: map[string]string{"unified": f.dir},
		ExtraPIDs: func() []int { return []int{4242} }, GPUs: []string{"0000:c1:00.0"}}
	m, err := Open(env, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Two seconds at 400 W, busy and hot all along, 12 GiB at most.
	now = now.Add(time.Second)
	busy(1400, 12<<30)
	s.Sample()
	now = now.Add(time.Second)
	busy(1800, 10<<30)
	s.Sample()
	got, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		metric string
		want   float64
	}{
		{sample.GPUs, 1}, {sample.GPUBusySeconds, 2}, {sample.GPUUnusedSeconds, 0}, {sample.GPUEnergyJoules, 800},
		{sample.GPUThermalSeconds, 2}, {sample.GPUPowerCappedSeconds, 0}, {sample.GPUMemPeakBytes, 12 << 30}, {sample.GPUMemTotalBytes, 64 << 30},
	} {
		if v, ok := got.Job[c.metric]; !ok || math.Abs(v-c.want) > 1e-6 {
			t.Errorf("%s = %v (measured %v: %q), want %v", c.metric, v, ok, m.Summary().NotMeasured[c.metric], c.want)
		}
	}
	if why := m.Summary().NotMeasured[sample.GPUSMActiveSeconds]; !strings.Contains(why, "AMD") || !strings.Contains(why, "no SM activity") {
		t.Errorf("SM activity not measured for %q, want AMD's driver named", why)
	}
	// A process outside the job on the job's GPU: its busy time and energy are no longer
	// the job's.
	tree.Proc(31337, map[uint64]uint64{11: 1 << 30})
	now = now.Add(time.Second)
	busy(2200, 10<<30)
	s.Sample()
	got, err = m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	for _, metric := range []string{sample.GPUBusySeconds, sample.GPUEnergyJoules} {
		if v, ok := got.Job[metric]; ok {
			t.Errorf("%s = %v on a GPU shared with an outside process, want not measured", metric, v)
		}
	}
	if v := got.Job[sample.GPUMemPeakBytes]; v != 8<<30 {
		t.Errorf("memory %v on the shared GPU, want the 8 GiB the KFD lists for the job's process", v)
	}
}
