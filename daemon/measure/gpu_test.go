package measure

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/nvml"
	"github.com/persyst/persyst/nvml/nvmltest"
	"github.com/persyst/persyst/sample"
)

// Three FAKE GPUs (nvmltest), their minor numbers not in NVML's order: the job holds 0
// and 1; GPU 0 runs one block (busy all the
// time, 1 % of its SMs), GPU 1 does nothing, GPU 2 is another job's.
const gpuScenario = `device uuid=GPU-aaaa bus=00000000:3B:00.0 minor=5 memory=85899345920 gpm=1 name=Fake_H100
device uuid=GPU-bbbb bus=00000000:86:00.0 minor=3 memory=85899345920 gpm=1 name=Fake_H100
device uuid=GPU-cccc bus=00000000:AF:00.0 minor=0 memory=85899345920 gpm=1 name=Fake_H100
at 0 gpu=0 util=100 sm=1 occupancy=1 power=120 mem=4294967296 throttle=thermal
at 0 gpu=1 util=0 power=70 mem=536870912
at 0 gpu=2 util=100 sm=90 power=600
`

func gpuMeter(t *testing.T, procs string, spec Spec) (*Meter, *time.Time) {
	m, now, _ := gpuMeterScenario(t, gpuScenario, procs, spec)
	return m, now
}

// gpuMeterScenario opens a meter of a job on FAKE GPUs playing scenario; errs counts the
// driver's error reports, the kernel's log followed.
func gpuMeterScenario(t *testing.T, scenario, procs string, spec Spec) (*Meter, *time.Time, *GPUErrors) {
	t.Helper()
	b := nvmltest.Build(t)
	pf := filepath.Join(t.TempDir(), "procs")
	if err := os.WriteFile(pf, []byte(procs), 0o644); err != nil {
		t.Fatal(err)
	}
	h := nvml.New(nvml.Options{Path: b.Helper, Library: b.Fake, Interval: 200 * time.Millisecond,
		Env: append(nvmltest.Scenario(t, scenario), "PERSYST_FAKE_NVML_PROCS="+pf)})
	t.Cleanup(func() { h.Close() })
	f := newFakeJob(t)
	f.set(t, 0, 0, 100, 100)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	errs := &GPUErrors{}
	errs.Following()
	env := &Env{Host: hostfs.New(f.root), Stats: cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}),
		GPU: h, GPUErrors: errs, Log: zerolog.Nop(), Now: func() time.Time { return now }}
	spec.Name, spec.CPUs, spec.ProcCgroup = "job 42", []int{0}, f.dir
	spec.StatCgroups = map[string]string{"unified": f.dir}
	if spec.ExtraPIDs == nil {
		spec.ExtraPIDs = func() []int { return []int{4242} }
	}
	m, err := Open(env, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, &now, errs
}

// TestGPUErrors: uncorrected ECC errors and the driver's hardware Xid reports on the
// job's GPUs (by PCI address, as the kernel's log gives it) count; another GPU's not.
func TestGPUErrors(t *testing.T) {
	sc := gpuScenario + "at 0.4 gpu=0 util=100 ecc=2\nat 0.4 gpu=2 ecc=5\n"
	m, now, errs := gpuMeterScenario(t, sc, "", Spec{GPUs: []string{"0", "1"}})
	errs.Add("0000:86:00") // GPU 1
	errs.Add("0000:af:00") // GPU 2, not the job's
	time.Sleep(800 * time.Millisecond)
	*now = now.Add(800 * time.Millisecond)
	s, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Job[sample.GPUErrors]; got != 3 {
		t.Errorf("gpu_errors = %v, want 3 (2 ECC on GPU 0, 1 Xid on GPU 1); not measured: %q", got, m.Summary().NotMeasured[sample.GPUErrors])
	}
}

// TestMatchGPUs: on a node with NVIDIA's and AMD's GPUs, a job's GPU names find the
// vendor's device they name, never the other's: an NVIDIA minor number is no render
// node's, and ROCR_VISIBLE_DEVICES counts the AMD GPUs only.
func TestMatchGPUs(t *testing.T) {
	devs := []nvml.Device{
		{Index: 0, Minor: 0, Parent: -1, Vendor: "NVIDIA", UUID: "GPU-aaaa"},
		{Index: 1, Minor: 128, Parent: -1, Vendor: "NVIDIA", UUID: "GPU-bbbb"},
		{Index: 2, Minor: 128, Parent: -1, Vendor: "AMD", Bus: "0000:c1:00.0"},
		{Index: 3, Minor: 129, Parent: -1, Vendor: "AMD", Bus: "0000:c9:00.0"},
	}
	for _, c := range []struct {
		name    string
		ids     []string
		want    []int
		unknown []string
	}{
		{"indices", []string{"3", "0"}, []int{0, 3}, nil},
		{"an NVIDIA minor number", []string{"minor:128"}, []int{1}, nil},
		{"an AMD render node", []string{"render:128"}, []int{2}, nil},
		{"no render node of NVIDIA's", []string{"render:0"}, nil, []string{"render:0"}},
		{"the AMD GPUs counted alone", []string{"amd:1", "amd:0"}, []int{2, 3}, nil},
		{"beyond the AMD GPUs", []string{"amd:2"}, nil, []string{"amd:2"}},
		{"a PCI bus id", []string{"c9:00.0"}, []int{3}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			idx, unknown := matchGPUs(c.ids, false, devs)
			if d := cmp.Diff(c.want, idx); d != "" {
				t.Errorf("indices (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.unknown, unknown); d != "" {
				t.Errorf("unknown (-want +got):\n%s", d)
			}
		})
	}
}

// TestGPUSource: the job's GPUs, named as Slurm and CUDA name them, summed: one busy
// with few SMs, one unused; the node's other GPU is not the job's.
func TestGPUSource(t *testing.T) {
	for _, c := range []struct {
		name string
		gpus []string
	}{
		{"NVML indices (SLURM_JOB_GPUS)", []string{"0", "1"}},
		{"UUIDs and a prefix (CUDA_VISIBLE_DEVICES)", []string{"GPU-aaaa", "GPU-bb"}},
		{"PCI bus ids", []string{"0000:3b:00.0", "86:00.0"}},
		{"minor numbers (GPUIndex=minor)", []string{"minor:5", "minor:3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, now := gpuMeter(t, "0 4242 4294967296\n2 999999 1\n", Spec{GPUs: c.gpus})
			time.Sleep(1500 * time.Millisecond)
			*now = now.Add(1500 * time.Millisecond)
			s, err := m.Read(sample.Cycle)
			if err != nil {
				t.Fatal(err)
			}
			got := func(n string) float64 {
				v, ok := s.Job[n]
				if !ok {
					t.Fatalf("%s not measured: %q", n, m.Summary().NotMeasured[n])
				}
				return v
			}
			dt := got(sample.GPUUnusedSeconds) // GPU 1 did nothing all along
			if dt < 1.2 || dt > 1.8 {
				t.Fatalf("unused GPU-seconds %.3f, want the interval (1.5 s)", dt)
			}
			near := func(n string, want, tol float64) {
				t.Helper()
				if v := got(n); math.Abs(v-want) > tol {
					t.Errorf("%s = %.3f, want %.3f ± %.3f", n, v, want, tol)
				}
			}
			near(sample.GPUs, 2, 0)
			near(sample.GPUBusySeconds, dt, 0.05)
			near(sample.GPUSMActiveSeconds, 0.01*dt, 0.005)
			near(sample.GPUThermalSeconds, dt, 0.1)
			near(sample.GPUEnergyJoules, (120+70)*dt, 15)
			near(sample.GPUMemPeakBytes, 4294967296+536870912, 0)
			near(sample.GPUMemTotalBytes, 2*85899345920, 0)
			if len(s.GPU) != 2 || s.GPU[0].GPU != 0 || s.GPU[1].GPU != 1 {
				t.Fatalf("per-GPU values %+v, want GPUs 0 and 1", s.GPU)
			}
			if b0, b1 := s.GPU[0].Values[sample.GPUValueBusySeconds], s.GPU[1].Values[sample.GPUValueBusySeconds]; math.Abs(b0-dt) > 0.05 || b1 != 0 {
				t.Errorf("per-GPU busy seconds %.3f and %.3f, want the interval and 0", b0, b1)
			}
		})
	}
}

// TestGPUShared: a GPU with a process outside the job gives it no device-wide values,
// only its processes' memory, and says why.
func TestGPUShared(t *testing.T) {
	m, now := gpuMeter(t, "0 4242 1073741824\n0 777777 2147483648\n", Spec{GPUs: []string{"0"}})
	time.Sleep(500 * time.Millisecond)
	*now = now.Add(500 * time.Millisecond)
	s, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Job[sample.GPUMemPeakBytes]; v != 1073741824 {
		t.Errorf("memory of a shared GPU = %v, want the job's process's 1 GiB", v)
	}
	sum := m.Summary()
	for _, n := range gpuShared {
		if _, ok := s.Job[n]; ok {
			t.Errorf("%s = %v on a shared GPU", n, s.Job[n])
		}
		if why := sum.NotMeasured[n]; !strings.Contains(why, "GPU 0 is shared with processes outside the job") {
			t.Errorf("%s: not measured %q, want the sharing named", n, why)
		}
	}
}

// TestGPUNone: a job without GPUs has no GPU metrics and nothing said about them; a job
// whose GPUs the node lacks is told why.
func TestGPUNone(t *testing.T) {
	m, now := gpuMeter(t, "", Spec{})
	*now = now.Add(time.Second)
	s, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range gpuNames {
		if _, ok := s.Job[n]; ok {
			t.Errorf("a job without GPUs has %s", n)
		}
		if why, ok := m.Summary().NotMeasured[n]; ok {
			t.Errorf("a job without GPUs: %s not measured %q", n, why)
		}
	}
	m, now = gpuMeter(t, "", Spec{GPUs: []string{"7"}})
	*now = now.Add(time.Second)
	if _, err := m.Read(sample.Cycle); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff("none of the job's GPUs (7) is among the node's 3", m.Summary().NotMeasured[sample.GPUBusySeconds]); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// BenchmarkGPURead: what a job's read of 8 GPUs costs the daemon (the request to the
// helper, its answer parsed, the job's sums) with the FAKE NVML; what NVML's calls cost
// the helper on a real GPU is bench/gpu_check.sh's part 3.
func BenchmarkGPURead(b *testing.B) {
	bt := nvmltest.Build(b)
	var sc strings.Builder
	for i := range 8 {
		sc.WriteString("device gpm=1\nat 0 gpu=" + strconv.Itoa(i) + " util=50 sm=40 power=300 mem=1000000\n")
	}
	h := nvml.New(nvml.Options{Path: bt.Helper, Library: bt.Fake, Interval: time.Hour, Env: nvmltest.Scenario(b, sc.String())})
	defer h.Close()
	f := newFakeJob(b)
	f.set(b, 0, 0, 100, 100)
	env := &Env{Host: hostfs.New(f.root), Stats: cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}), GPU: h,
		Enable: map[string]bool{"cgroup": false, "procio": false, "perf": false, "schedstat": false, "suspend": false, "syscalls": false},
		Log:    zerolog.Nop(), Now: time.Now}
	m, err := Open(env, Spec{Name: "job 1", CPUs: []int{0}, ProcCgroup: f.dir, AllGPUs: true})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(GPUFresh) // a new reading each time
		b.StartTimer()
		if _, err := m.Read(sample.Cycle); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGPUMIG: a job given a MIG instance (CUDA_VISIBLE_DEVICES names it by UUID) gets the
// instance's memory and activity (GPM, as NVML samples no utilization for it), and its
// GPU's power is not attributed.
func TestGPUMIG(t *testing.T) {
	sc := `device uuid=GPU-aaaa bus=00000000:3B:00.0 gpm=1 mig=1
mig parent=0 uuid=MIG-1111-2222 gi=1 memory=10737418240
mig parent=0 uuid=MIG-3333-4444 gi=2 memory=21474836480
at 0 gpu=100 util=100 sm=60 mem=5368709120 power=300
at 0 gpu=101 sm=90
`
	m, now, _ := gpuMeterScenario(t, sc, "", Spec{GPUs: []string{"MIG-1111-2222"}})
	time.Sleep(time.Second)
	*now = now.Add(time.Second)
	s, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	busy, sm := s.Job[sample.GPUBusySeconds], s.Job[sample.GPUSMActiveSeconds]
	if busy < 0.8 || busy > 1.2 || sm/busy < 0.55 || sm/busy > 0.65 {
		t.Errorf("MIG instance: busy %.3f s, SM activity %.3f s; want about 1 s and 60 %% of it", busy, sm)
	}
	if v := s.Job[sample.GPUMemTotalBytes]; v != 10737418240 {
		t.Errorf("memory of the job's GPUs %v, want the instance's 10 GiB", v)
	}
	if why := m.Summary().NotMeasured[sample.GPUEnergyJoules]; !strings.Contains(why, "MIG instance") {
		t.Errorf("energy of a MIG instance: not measured %q, want it said why", why)
	}
}

// TestGPUMIGTwoJobs: two jobs on two MIG instances of one GPU (FAKE NVML) each get
// their own instance's values, and neither is "shared" for the other's processes: NVML
// lists an instance's processes on the instance, the GPU's on the GPU.
func TestGPUMIGTwoJobs(t *testing.T) {
	sc := `device uuid=GPU-aaaa bus=00000000:3B:00.0 gpm=1 mig=1
mig parent=0 uuid=MIG-1111-2222 gi=1 memory=10737418240
mig parent=0 uuid=MIG-3333-4444 gi=2 memory=21474836480
at 0 gpu=100 util=100 sm=60 mem=5368709120
at 0 gpu=101 util=100 sm=90 mem=17179869184
`
	// The job of PID 4242 on the first instance, that of PID 5353 on the second, both on
	// the GPU.
	procs := "100 4242 5368709120\n101 5353 17179869184\n0 4242 5368709120\n0 5353 17179869184\n"
	a, nowA, _ := gpuMeterScenario(t, sc, procs, Spec{GPUs: []string{"MIG-1111-2222"}})
	b, nowB, _ := gpuMeterScenario(t, sc, procs, Spec{GPUs: []string{"MIG-3333-4444"}, ExtraPIDs: func() []int { return []int{5353} }})
	time.Sleep(time.Second)
	for _, c := range []struct {
		name     string
		m        *Meter
		now      *time.Time
		sm, mem  float64
		memTotal float64
	}{
		{"the first instance's job", a, nowA, 0.6, 5 << 30, 10 << 30},
		{"the second instance's job", b, nowB, 0.9, 16 << 30, 20 << 30},
	} {
		*c.now = c.now.Add(time.Second)
		s, err := c.m.Read(sample.Cycle)
		if err != nil {
			t.Fatal(err)
		}
		busy, sm := s.Job[sample.GPUBusySeconds], s.Job[sample.GPUSMActiveSeconds]
		if busy < 0.8 || busy > 1.2 || math.Abs(sm/busy-c.sm) > 0.05 {
			t.Errorf("%s: busy %.3f s, SM activity %.3f s; want about 1 s and %.0f %% of it", c.name, busy, sm, 100*c.sm)
		}
		if v := s.Job[sample.GPUMemPeakBytes]; v != c.mem {
			t.Errorf("%s: GPU memory %v, want its instance's %v", c.name, v, c.mem)
		}
		if v := s.Job[sample.GPUMemTotalBytes]; v != c.memTotal {
			t.Errorf("%s: memory of its GPUs %v, want its instance's %v", c.name, v, c.memTotal)
		}
		for metric, why := range c.m.Summary().NotMeasured {
			if strings.Contains(why, "shared") && !strings.Contains(why, "MIG instance") {
				t.Errorf("%s: %s not measured: %q", c.name, metric, why)
			}
		}
	}
}

// TestStoreKeepsGPUs: the per-GPU values of a job's samples are kept, and when samples
// are merged (halving) their seconds add up and the memory keeps the higher.
func TestStoreKeepsGPUs(t *testing.T) {
	st := newStore(1, nil, nil, sample.KindOf) // a tiny budget: halved at once
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for i, busy := range []float64{10, 20, 30} {
		s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Minute), Reason: sample.Cycle, Seconds: 60, Job: map[string]float64{},
			GPU: []sample.GPUValues{{GPU: 1, Values: map[string]float64{sample.GPUValueBusySeconds: busy, sample.GPUValueMemoryBytes: 100 * busy}}}}
		st.add(s, st.index(s.Job, nil, func(string) {}))
	}
	got := st.all()
	want := []sample.GPUValues{{GPU: 1, Values: map[string]float64{sample.GPUValueBusySeconds: 30, sample.GPUValueMemoryBytes: 2000}}}
	if len(got) != 2 {
		t.Fatalf("%d samples after halving, want 2", len(got))
	}
	if d := cmp.Diff(want, got[0].GPU); d != "" {
		t.Errorf("merged GPU values (-want +got):\n%s", d)
	}
}

func TestMain(m *testing.M) { os.Exit(nvmltest.Main(m)) }
