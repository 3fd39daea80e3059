package measure

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/persyst/persyst/amdgpu"
	"github.com/persyst/persyst/nvml"
)

// GPUs reads a node's GPUs for the gpu source: NVIDIA's through persyst-nvml
// (nvml.Helper), AMD's through the amdgpu driver's sysfs (AMDGPUs). Both give the same
// cumulative values (nvml.Reading's keys), so a job's GPU values are taken one way.
type GPUs interface {
	Start(ctx context.Context) (nvml.Hello, error)
	Read(ctx context.Context, fresh time.Duration) ([]nvml.Reading, error)
	Close() error
}

// AMDDriver is the Hello.Driver of AMD GPUs read through sysfs: what names the source in
// what is not measured.
const AMDDriver = "amdgpu (sysfs)"

// amdNoGPM is why AMD GPUs give no SM activity, occupancy, tensor or DRAM activity.
const amdNoGPM = "AMD GPUs give no SM activity, occupancy, tensor or DRAM activity through the driver (NVIDIA's GPM counters)"

// AMDGPUs reads the node's AMD GPUs: its sampler runs in the background from Open until
// Close.
type AMDGPUs struct {
	s     *amdgpu.Sampler
	hello nvml.Hello
	stop  context.CancelFunc
	done  chan struct{}
	once  sync.Once
}

// OpenAMDGPUs starts sampling the cards sys finds; nil and no error where there is none.
func OpenAMDGPUs(sys *amdgpu.Sysfs, o amdgpu.Options) (*AMDGPUs, error) {
	s, err := amdgpu.NewSampler(sys, o)
	devs := s.Devices()
	if len(devs) == 0 {
		return nil, err
	}
	a := newAMDGPUs(s, devs)
	ctx, cancel := context.WithCancel(context.Background())
	a.stop, a.done = cancel, make(chan struct{})
	go func() {
		defer close(a.done)
		s.Run(ctx)
	}()
	return a, err
}

// newAMDGPUs reads the cards devs through s, sampled by whoever runs it.
func newAMDGPUs(s *amdgpu.Sampler, devs []amdgpu.Device) *AMDGPUs {
	a := &AMDGPUs{s: s, hello: nvml.Hello{Driver: AMDDriver}}
	for i, d := range devs {
		a.hello.Devices = append(a.hello.Devices, nvml.Device{Index: i, Bus: d.Bus, Minor: d.Render, Memory: d.VRAM,
			Name: d.Name, Parent: -1, GI: -1, Vendor: "AMD"})
	}
	return a
}

// Start says which cards there are.
func (a *AMDGPUs) Start(context.Context) (nvml.Hello, error) { return a.hello, nil }

// Read reads the cards now (fresh: the sampler reads at every call, in microseconds).
func (a *AMDGPUs) Read(ctx context.Context, fresh time.Duration) ([]nvml.Reading, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs := a.s.Read()
	out := make([]nvml.Reading, len(rs))
	for i, r := range rs {
		x := nvml.Reading{Index: r.Index, Time: r.Time, Values: r.Values, NotMeasured: r.NotMeasured, ProcsWhy: r.ProcsWhy}
		for _, k := range []string{"sm", "occupancy", "tensor", "dram"} {
			x.NotMeasured[k] = amdNoGPM
		}
		for _, p := range r.Procs {
			x.Procs = append(x.Procs, nvml.Proc{PID: p.PID, Memory: p.Memory})
		}
		out[i] = x
	}
	return out, nil
}

// Close stops the sampler.
func (a *AMDGPUs) Close() error {
	a.once.Do(func() {
		if a.stop != nil {
			a.stop()
			<-a.done
		}
	})
	return nil
}

// gpuSet reads a node's NVIDIA and AMD GPUs together: NVIDIA's keep NVML's indices, AMD's
// follow them, so that neither is taken for the other. A node without NVIDIA's driver
// has AMD's alone.
type gpuSet struct {
	nv, amd GPUs
	mu      sync.Mutex
	nvN     int // NVIDIA's GPUs, as the last Start found them
}

func (g *gpuSet) Start(ctx context.Context) (nvml.Hello, error) {
	a, err := g.amd.Start(ctx)
	if err != nil {
		return a, err
	}
	h, nvErr := g.nv.Start(ctx)
	var u *nvml.Unavailable
	if nvErr != nil && !errors.As(nvErr, &u) {
		return h, nvErr // a helper that failed: said, as on a node of NVIDIA's GPUs only
	}
	if nvErr != nil {
		h = nvml.Hello{} // no NVIDIA driver: the AMD GPUs alone
	}
	out := nvml.Hello{Driver: a.Driver, Absent: h.Absent, Devices: append([]nvml.Device(nil), h.Devices...)}
	if h.Driver != "" {
		out.Driver = "NVIDIA " + h.Driver + "; " + a.Driver
	}
	for _, d := range a.Devices {
		d.Index += len(h.Devices)
		out.Devices = append(out.Devices, d)
	}
	g.mu.Lock()
	g.nvN = len(h.Devices)
	g.mu.Unlock()
	return out, nil
}

func (g *gpuSet) Read(ctx context.Context, fresh time.Duration) ([]nvml.Reading, error) {
	g.mu.Lock()
	n := g.nvN
	g.mu.Unlock()
	var out []nvml.Reading
	if n > 0 {
		rs, err := g.nv.Read(ctx, fresh)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	rs, err := g.amd.Read(ctx, fresh)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		r.Index += n
		out = append(out, r)
	}
	return out, nil
}

func (g *gpuSet) Close() error { return errors.Join(g.nv.Close(), g.amd.Close()) }
