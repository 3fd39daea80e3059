package nvml_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/nvml"
	"github.com/persyst/persyst/nvml/nvmltest"
)

// The fake GPU 0 idles for a second, then runs full (SM activity 50 %) at 300 W; GPU 1
// is a third busy all along. The helper samples every 200 ms.
const twoGPUs = `driver 550.54.15
device uuid=GPU-aaaa bus=00000000:3B:00.0 minor=2 memory=85899345920 gpm=1 name=Fake_H100
device uuid=GPU-bbbb bus=00000000:86:00.0 minor=0 memory=42949672960 gpm=0
at 0 gpu=0 util=0 power=70 mem=1048576
at 1 gpu=0 util=100 sm=50 occupancy=20 tensor=10 dram=30 power=300 mem=8589934592 throttle=thermal
at 0 gpu=1 util=33 power=100
`

func start(t *testing.T, lib string, env []string, o nvml.Options) *nvml.Helper {
	t.Helper()
	b := nvmltest.Build(t)
	o.Path, o.Library, o.Env = b.Helper, lib, env
	if o.Interval == 0 {
		o.Interval = 200 * time.Millisecond
	}
	h := nvml.New(o)
	t.Cleanup(func() { h.Close() })
	return h
}

func TestHello(t *testing.T) {
	b := nvmltest.Build(t)
	h := start(t, b.Fake, nvmltest.Scenario(t, twoGPUs), nvml.Options{})
	got, err := h.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := nvml.Hello{Driver: "550.54.15", Devices: []nvml.Device{
		{Index: 0, UUID: "GPU-aaaa", Bus: "00000000:3B:00.0", Minor: 2, Memory: 85899345920, Name: "Fake H100", GPM: true, Parent: -1, Vendor: "NVIDIA"},
		{Index: 1, UUID: "GPU-bbbb", Bus: "00000000:86:00.0", Minor: 0, Memory: 42949672960, Name: "Fake GPU", Parent: -1, Vendor: "NVIDIA"},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("hello (-want +got):\n%s", d)
	}
}

// readTwice reads the helper, waits pause, and reads it again.
func readTwice(t *testing.T, h *nvml.Helper, pause time.Duration) (r0, r1 []nvml.Reading) {
	t.Helper()
	ctx := context.Background()
	r0, err := h.Read(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if r1, err = h.Read(ctx, 0); err != nil {
		t.Fatal(err)
	}
	return r0, r1
}

// share is the increase of GPU i's key over that of cover between two reads.
func share(t *testing.T, r0, r1 []nvml.Reading, i int, key, cover string) float64 {
	t.Helper()
	return (value(t, r1[i], key) - value(t, r0[i], key)) / (value(t, r1[i], cover) - value(t, r0[i], cover))
}

func value(t *testing.T, r nvml.Reading, k string) float64 {
	t.Helper()
	v, ok := r.Values[k]
	if !ok {
		t.Fatalf("GPU %d: no %s (not measured: %q)", r.Index, k, r.NotMeasured[k])
	}
	return v
}

// TestIntegrals: the differences of two reads are what the GPUs did in between: busy
// seconds, SM activity, energy and throttled time, in every form the helper integrates.
func TestIntegrals(t *testing.T) {
	b := nvmltest.Build(t)
	procs := filepath.Join(t.TempDir(), "procs")
	if err := os.WriteFile(procs, []byte("0 4242 1048576\n0 4243 2097152\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(nvmltest.Scenario(t, twoGPUs), "PERSYST_FAKE_NVML_PROCS="+procs)
	h := start(t, b.Fake, env, nvml.Options{})
	ctx := context.Background()
	if _, err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // into GPU 0's busy stretch
	r0, r1 := readTwice(t, h, 1500*time.Millisecond)
	if len(r0) != 2 || len(r1) != 2 {
		t.Fatalf("readings: %d, %d; want 2 GPUs", len(r0), len(r1))
	}
	dt := r1[0].Time - r0[0].Time
	near := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %.3f, want %.3f ± %.3f", what, got, want, tol)
		}
	}
	d := func(i int, k string) float64 { return value(t, r1[i], k) - value(t, r0[i], k) }
	// utilization samples come every 1/6 s: the integral lags by up to one
	near("GPU 0 busy share", share(t, r0, r1, 0, "busy", "util_s"), 1, 0.02)
	near("GPU 1 busy share", share(t, r0, r1, 1, "busy", "util_s"), 0.33, 0.02)
	near("GPU 0 SM share", share(t, r0, r1, 0, "sm", "sm_s"), 0.5, 0.02)
	near("GPU 0 tensor share", share(t, r0, r1, 0, "tensor", "tensor_s"), 0.1, 0.02)
	near("GPU 0 watts from energy", d(0, "energy")/1000/dt, 300, 10)
	near("GPU 0 thermal throttling share", d(0, "thermal_ns")/1e9/dt, 1, 0.05)
	near("GPU 0 power-capped seconds", d(0, "power_ns")/1e9, 0, 0.001)
	if got := value(t, r1[0], "mem_peak"); got != 8589934592 {
		t.Errorf("GPU 0 memory peak %v, want 8 GiB", got)
	}
	if got := uint64(value(t, r1[0], "reasons")); got&0x40 == 0 {
		t.Errorf("GPU 0 clock event reasons %#x, want thermal (0x40)", got)
	}
	if d := cmp.Diff([]nvml.Proc{{4242, 1048576}, {4243, 2097152}}, r1[0].Procs); d != "" {
		t.Errorf("GPU 0 processes (-want +got):\n%s", d)
	}
	if _, ok := r1[1].Values["sm"]; ok {
		t.Errorf("GPU 1 has no GPM, yet an SM activity: %v", r1[1].Values)
	}
	// A read within the freshness window is the same answer.
	r2, err := h.Read(ctx, time.Minute)
	if err != nil || r2[0].Time != r1[0].Time {
		t.Errorf("a fresh read asked the helper again (t %v, was %v; %v)", r2[0].Time, r1[0].Time, err)
	}
}

// TestOldDriver: a driver without the sample buffer, GPM, energy or the versioned names
// still gives utilization (the rates, integrated per tick) and memory; what it lacks is
// named, not zero.
func TestOldDriver(t *testing.T) {
	b := nvmltest.Build(t)
	h := start(t, b.FakeOld, nvmltest.Scenario(t, twoGPUs), nvml.Options{})
	ctx := context.Background()
	hello, err := h.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nvmlDeviceGetSamples", "nvmlGpmSampleGet", "nvmlDeviceGetTotalEnergyConsumption"} {
		if !strings.Contains(strings.Join(hello.Absent, " "), want) {
			t.Errorf("absent %v: want %s named", hello.Absent, want)
		}
	}
	if hello.Devices[0].GPM {
		t.Error("GPM on a driver without it")
	}
	r0, r1 := readTwice(t, h, time.Second)
	if busy := share(t, r0, r1, 1, "busy", "util_s"); math.Abs(busy-0.33) > 0.02 {
		t.Errorf("GPU 1 busy share %.3f, want 0.33", busy)
	}
	for _, k := range []string{"energy", "sm"} {
		if _, ok := r1[0].Values[k]; ok {
			t.Errorf("old driver: %s = %v, want absent", k, r1[0].Values[k])
		}
	}
}

// TestUnavailable: no library, a driver that does not start — GPUs not measured, with
// the reason, and no helper left behind.
func TestUnavailable(t *testing.T) {
	b := nvmltest.Build(t)
	for _, c := range []struct {
		name, lib, scenario, want string
	}{
		{"no library", filepath.Join(t.TempDir(), "libnvidia-ml.so.1"), "", "no NVIDIA driver: "},
		{"driver not loaded", b.Fake, "fail init 9\n", "NVML did not start: Driver Not Loaded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := start(t, c.lib, nvmltest.Scenario(t, c.scenario), nvml.Options{})
			_, err := h.Start(context.Background())
			var u *nvml.Unavailable
			if !errors.As(err, &u) || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("Start: %v, want Unavailable %q…", err, c.want)
			}
			if _, err2 := h.Read(context.Background(), 0); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Read before Retry: %v, want the same reason", err2)
			}
		})
	}
}

// TestHungDriver: a call that never returns costs the read its deadline, stops the
// helper, and a new one is started once Retry has passed.
func TestHungDriver(t *testing.T) {
	b := nvmltest.Build(t)
	now := time.Now()
	clock := func() time.Time { return now }
	h := start(t, b.Fake, nvmltest.Scenario(t, twoGPUs+"hang nvmlDeviceGetMemoryInfo after 0.5\n"),
		nvml.Options{Timeout: 700 * time.Millisecond, Retry: time.Minute, Now: clock, Interval: 5 * time.Second})
	ctx := context.Background()
	if _, err := h.Read(ctx, 0); err != nil {
		t.Fatalf("first read (before the hang): %v", err)
	}
	time.Sleep(600 * time.Millisecond)
	began := time.Now()
	_, err := h.Read(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), "did not answer within 700ms") {
		t.Fatalf("read of a hung driver: %v", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the hung read took %s, deadline 700ms", took)
	}
	if _, err := h.Read(ctx, 0); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("read before Retry: %v, want the hang's reason", err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := h.Read(ctx, 0); err != nil {
		t.Errorf("read after Retry (a new helper, before its own hang): %v", err)
	}
}

// TestHelperDies: a helper that ends (a crash in the driver's library) is reported with
// its exit status, not as a cut answer.
func TestHelperDies(t *testing.T) {
	b := nvmltest.Build(t)
	h := start(t, b.Fake, nvmltest.Scenario(t, twoGPUs+"crash nvmlDeviceGetMemoryInfo after 0.5\n"),
		nvml.Options{Interval: 5 * time.Second})
	ctx := context.Background()
	if _, err := h.Read(ctx, 0); err != nil {
		t.Fatalf("first read (before the crash): %v", err)
	}
	time.Sleep(600 * time.Millisecond)
	_, err := h.Read(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), "persyst-nvml exit status 3") {
		t.Fatalf("read of a crashed helper: %v, want its exit status", err)
	}
}

// TestMIG: a GPU in MIG mode gives its instances as devices of their own, with their
// memory and GPM activity (on the GPU, by GPU instance); their GPU's power, energy and
// throttling are not theirs.
func TestMIG(t *testing.T) {
	b := nvmltest.Build(t)
	h := start(t, b.Fake, nvmltest.Scenario(t, `device uuid=GPU-a bus=00000000:3B:00.0 gpm=1 mig=1
mig parent=0 uuid=MIG-1111 gi=1 memory=10737418240
mig parent=0 uuid=MIG-2222 gi=2 memory=21474836480
at 0 gpu=100 util=90 sm=80 mem=5000 power=300
at 0 gpu=101 sm=0
`), nvml.Options{})
	ctx := context.Background()
	hello, err := h.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []nvml.Device{
		{Index: 0, UUID: "GPU-a", Bus: "00000000:3B:00.0", Minor: 0, Memory: 85899345920, Name: "Fake GPU", MIG: true, GPM: true, Parent: -1, Vendor: "NVIDIA"},
		{Index: 1, UUID: "MIG-1111", Minor: -1, Memory: 10737418240, Name: "Fake MIG", GPM: true, Parent: 0, GI: 1, Vendor: "NVIDIA"},
		{Index: 2, UUID: "MIG-2222", Minor: -1, Memory: 21474836480, Name: "Fake MIG", GPM: true, Parent: 0, GI: 2, Vendor: "NVIDIA"},
	}
	if d := cmp.Diff(want, hello.Devices); d != "" {
		t.Fatalf("devices (-want +got):\n%s", d)
	}
	r0, r1 := readTwice(t, h, time.Second)
	if sm := share(t, r0, r1, 1, "sm", "sm_s"); math.Abs(sm-0.8) > 0.02 {
		t.Errorf("MIG-1111 SM activity %.3f, want 0.8", sm)
	}
	for _, k := range []string{"energy", "power", "thermal_ns", "ecc"} {
		if _, ok := r1[1].Values[k]; ok {
			t.Errorf("a MIG instance has its GPU's %s", k)
		}
	}
	if _, ok := r1[1].Values["busy"]; ok {
		t.Error("a MIG instance has NVML utilization samples (NVML gives none)")
	}
}

func TestMain(m *testing.M) { os.Exit(nvmltest.Main(m)) }
