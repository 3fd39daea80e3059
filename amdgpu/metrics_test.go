package amdgpu_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/amdgpu"
)

// TestMetrics: each revision's table read back as written (the energy at its offset,
// throttling as v1.3's status or v1.6 and v1.7's residencies), fields the driver left
// all ones absent, and a table of another size, format or revision refused with why.
func TestMetrics(t *testing.T) {
	in := amdgpu.Metrics{Joules: 1234.5, HasEnergy: true, HasThrottle: true, PowerCapped: true,
		HasResidency: true, Ticks: 1000, PowerResidency: 250, ThermalResidency: 5}
	xcp := map[int]float64{0: 90, 3: 12, 7: 100}
	for content, want := range map[int]amdgpu.Metrics{
		1: {Format: 1, Content: 1, Joules: 1234.5, HasEnergy: true},
		3: {Format: 1, Content: 3, Joules: 1234.5, HasEnergy: true, HasThrottle: true, PowerCapped: true},
		4: {Format: 1, Content: 4, Joules: 1234.5, HasEnergy: true},
		5: {Format: 1, Content: 5, Joules: 1234.5, HasEnergy: true},
		6: {Format: 1, Content: 6, Joules: 1234.5, HasEnergy: true, HasResidency: true, Ticks: 1000, PowerResidency: 250, ThermalResidency: 5, XCPBusy: xcp},
		7: {Format: 1, Content: 7, Joules: 1234.5, HasEnergy: true, HasResidency: true, Ticks: 1000, PowerResidency: 250, ThermalResidency: 5, XCPBusy: xcp},
		8: {Format: 1, Content: 8, Joules: 1234.5, HasEnergy: true, HasResidency: true, Ticks: 1000, PowerResidency: 250, ThermalResidency: 5, XCPBusy: xcp},
	} {
		in := in
		if content >= 6 {
			in.XCPBusy = xcp // each compute partition's busy share (xcp_stats)
		}
		b, err := amdgpu.EncodeMetrics(content, in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := amdgpu.ParseMetrics(b)
		if err != nil {
			t.Errorf("v1.%d: %v", content, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("v1.%d (-want +got):\n%s", content, diff)
		}
	}
	// Left unset by the driver: all ones.
	b, _ := amdgpu.EncodeMetrics(3, amdgpu.Metrics{})
	if m, err := amdgpu.ParseMetrics(b); err != nil || m.HasEnergy || m.HasThrottle {
		t.Errorf("a v1.3 table of unset fields: %+v, %v", m, err)
	}
	good, _ := amdgpu.EncodeMetrics(3, in)
	short := append([]byte(nil), good[:100]...)
	wrongSize := append([]byte(nil), good...)
	binary.LittleEndian.PutUint16(wrongSize, 104)
	apu := append([]byte(nil), good...)
	apu[2] = 2
	future := append([]byte(nil), good...)
	future[3] = 9
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"shorter than its header": {[]byte{1, 2}, "shorter than its header"},
		"cut short":               {short, "100 bytes (header: 120), want 120"},
		"another revision's size": {wrongSize, "(header: 104), want 120"},
		"an APU's":                {apu, "not a discrete GPU's table"},
		"a revision not known":    {future, "v1.9: a revision not read here"},
	} {
		if _, err := amdgpu.ParseMetrics(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
