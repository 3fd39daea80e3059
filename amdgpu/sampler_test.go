package amdgpu_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/amdgpu"
	"github.com/persyst/persyst/amdgpu/fakeamdgpu"
	"github.com/persyst/persyst/hostfs"
)

// TestSampler: between reads the cards' busy share, throttling and energy add up over
// time, as persyst-nvml's do (a FAKE tree, a fake clock): busy and throttled time as
// each sample says, energy by the counter's increase (a counter that went back counts
// nothing for that stretch), else by the power's mean; the VRAM's peak since the
// previous read.
func TestSampler(t *testing.T) {
	root := t.TempDir()
	tree, err := fakeamdgpu.New(root,
		fakeamdgpu.Card{Bus: "0000:c1:00.0", Render: 128, GPUID: 7, VRAM: 64 << 30, Metrics: 3},
		fakeamdgpu.Card{Bus: "0000:d1:00.0", Render: 129, VRAM: 192 << 30, PowerInput: true},
		fakeamdgpu.Card{Bus: "0000:e1:00.0", Render: 130, VRAM: 192 << 30, PowerInput: true, Metrics: 7})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	s, err := amdgpu.NewSampler(amdgpu.New(hostfs.New(tree.Sys())), amdgpu.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	// The third card, an MI300X-like one of gpu_metrics v1.7, counts the ticks it was held
	// back: a quarter of them by its power limit in the first second, none after.
	res := func(ticks, ppt uint32) fakeamdgpu.State {
		return fakeamdgpu.State{Busy: 90, Watts: 700, Joules: float64(ticks), Ticks: ticks, PowerTicks: ppt}
	}
	step := func(a, b, c fakeamdgpu.State) {
		t.Helper()
		for i, st := range []fakeamdgpu.State{a, b, c} {
			if err := tree.Set(i, st); err != nil {
				t.Fatal(err)
			}
		}
		s.Sample()
		now = now.Add(time.Second)
	}
	idle := fakeamdgpu.State{Watts: 150}
	step(fakeamdgpu.State{Busy: 50, Watts: 400, Joules: 1000, VRAMUsed: 1 << 30}, idle, res(1000, 0))
	step(fakeamdgpu.State{Busy: 100, Watts: 400, Joules: 1400, VRAMUsed: 9 << 30}, idle, res(1100, 25))
	step(fakeamdgpu.State{Busy: 0, Watts: 400, Joules: 1800, VRAMUsed: 2 << 30, Thermal: true}, idle, res(1200, 25))
	step(fakeamdgpu.State{Busy: 0, Watts: 400, Joules: 10, VRAMUsed: 2 << 30}, idle, res(1300, 25)) // the first card's counter reset
	now = now.Add(-time.Second)                                                                     // the last sample's moment again: nothing is added
	s.Sample()
	r := s.Read()
	a, b, c3 := r[0], r[1], r[2]
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"busy s", a.Values["busy"], 1}, {"util_s", a.Values["util_s"], 3},
		{"energy mJ", a.Values["energy"], 800e3}, {"thermal_ns", a.Values["thermal_ns"], 1e9}, {"power_ns", a.Values["power_ns"], 0},
		{"mem", a.Values["mem"], 2 << 30}, {"mem_peak", a.Values["mem_peak"], 9 << 30},
		{"power only: energy mJ", b.Values["energy"], 150 * 3 * 1e3},
		{"residencies: power_ns", c3.Values["power_ns"], 0.25e9}, {"residencies: thermal_ns", c3.Values["thermal_ns"], 0},
	} {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if _, ok := b.Values["thermal_ns"]; ok || b.NotMeasured["thermal_ns"] == "" || b.NotMeasured["ecc"] != "" && b.Values["ecc"] != 0 {
		t.Errorf("the card without gpu_metrics: %+v", b)
	}
	if a.ProcsWhy != "" || b.ProcsWhy == "" {
		t.Errorf("processes: %q and %q, want the first card's known and the second's (not in the KFD) not", a.ProcsWhy, b.ProcsWhy)
	}
	// The peak is the VRAM in use since the previous read.
	if r := s.Read(); r[0].Values["mem_peak"] != 2<<30 {
		t.Errorf("mem_peak after a read: %v, want the 2 GiB in use since", r[0].Values["mem_peak"])
	}
	// No sample for longer than five intervals (a card that hangs its reads): not
	// measured, never idle.
	now = now.Add(6 * time.Second)
	if r := s.Read(); len(r[0].Values) != 0 || r[0].NotMeasured["busy"] == "" || r[0].ProcsWhy == "" {
		t.Errorf("a card not sampled for 6 s read %+v", r[0])
	}
	// A die that reports no power at all (an MI250X's second): the other dies' power may
	// be their package's, both dies': no die's energy is then given.
	if err := tree.Set(0, fakeamdgpu.State{Busy: 50}); err != nil {
		t.Fatal(err)
	}
	s.Sample()
	r = s.Read()
	if _, ok := r[1].Values["energy"]; ok || !strings.Contains(r[1].NotMeasured["energy"], "package") || !strings.Contains(r[0].NotMeasured["energy"], "second die") {
		t.Errorf("energy beside a die without power: %v (%q) and %q", r[1].Values["energy"], r[1].NotMeasured["energy"], r[0].NotMeasured["energy"])
	}
}
