package perfcg

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

// The fixture is the power PMU's sysfs layout as Linux presents it on a two-socket Intel
// server (type 22, energy-pkg event=0x02 in units of 2^-32 J, energy-ram event=0x03 in
// units of 2^-16 J).
func TestPowerEvents(t *testing.T) {
	got, err := PowerEvents(hostfs.New("testdata/rapl"))
	if err != nil {
		t.Fatal(err)
	}
	want := []PowerEvent{
		{Name: "energy-pkg", Type: 22, Config: 0x02, Scale: 2.3283064365386962890625e-10},
		{Name: "energy-ram", Type: 22, Config: 0x03, Scale: 1.52587890625e-05},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("power events (-want +got):\n%s", diff)
	}
	if got := hostfs.New("testdata/rapl").PackageCPUs([]int{3, 1, 2, 0}); !cmp.Equal(got, []int{0, 2}) {
		t.Errorf("PackageCPUs = %v, want [0 2]", got)
	}
	if _, err := PowerEvents(hostfs.New(t.TempDir())); !errors.Is(err, ErrNoPower) {
		t.Errorf("no power PMU: %v, want ErrNoPower", err)
	}
}

func TestParseEventConfig(t *testing.T) {
	for in, want := range map[string]uint64{"event=0x02\n": 2, "event=0xc7,umask=0x10": 0x10c7, "event=3": 3} {
		if got, err := parseEventConfig(in); err != nil || got != want {
			t.Errorf("parseEventConfig(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
	for _, in := range []string{"event", "event=zz", "period=10"} {
		if _, err := parseEventConfig(in); err == nil {
			t.Errorf("parseEventConfig(%q): no error", in)
		}
	}
}

// TestEnergyThisMachine: where the kernel has a power PMU (root), the counters open and
// advance; where it has none, that is said, never a zero.
func TestEnergyThisMachine(t *testing.T) {
	evs, err := PowerEvents(hostfs.New("/"))
	if errors.Is(err, ErrNoPower) {
		t.Logf("this machine has no RAPL power PMU: %v (energy is reported not measured)", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	testenv.Root(t, "opens system-wide energy counters")
	e, err := OpenEnergy(evs, hostfs.New("/").PackageCPUs([]int{0}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	v, err := e.Read()
	if err != nil || !strings.HasPrefix(evs[0].Name, "energy-") || v[evs[0].Name] < 0 {
		t.Errorf("read: %v %v", v, err)
	}
}
