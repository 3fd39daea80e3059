package perfevents

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestWithIPC(t *testing.T) {
	names := func(es []Event) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Group+"/"+e.Name)
		}
		return out
	}
	got := names(WithIPC(append(SoftwareEvents()[:1], HardwareEvents()...)))
	want := []string{
		"/task-clock",
		"ipc/cycles", "ipc/instructions", "ipc/ref-cycles",
		"branch/cycles", "branch/instructions", "branch/branches", "branch/branch-misses",
		"cache/cycles", "cache/instructions", "cache/cache-references", "cache/cache-misses",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WithIPC (-want +got):\n%s", diff)
	}
}

func TestRawEvents(t *testing.T) {
	type row struct {
		Name   string
		Config uint64
	}
	tests := []struct {
		id   CPUID
		arch string
		want []row
	}{
		{CPUID{Vendor: "GenuineIntel", Family: 6, Model: 0x8F}, "intel-sapphirerapids", []row{
			{"fp_scalar_double", 0x01C7}, {"fp_scalar_single", 0x02C7}, {"fp_128_double", 0x04C7}, {"fp_128_single", 0x08C7},
			{"fp_256_double", 0x10C7}, {"fp_256_single", 0x20C7}, {"fp_512_double", 0x40C7}, {"fp_512_single", 0x80C7},
			{"loads", 0x81D0}, {"stores", 0x82D0}}},
		{CPUID{Vendor: "AuthenticAMD", Family: 0x19, Model: 1}, "amd-zen3-4", []row{
			{"fp_ops", 0xFF03}, {"loads", 0x0129}, {"stores", 0x0229}}},
		{CPUID{Vendor: "GenuineIntel", Family: 6, Model: 0x3A}, "", nil}, // Ivy Bridge: no table
	}
	for _, tc := range tests {
		arch, evs := RawEvents(tc.id)
		var got []row
		for _, e := range evs {
			if e.Type != unix.PERF_TYPE_RAW || e.Kind != Hardware || e.Group != "raw" {
				t.Errorf("%s: event %+v not a grouped raw hardware event", tc.arch, e)
			}
			got = append(got, row{e.Name, e.Config})
		}
		if arch != tc.arch {
			t.Errorf("arch = %q, want %q", arch, tc.arch)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.arch, diff)
		}
	}
	// AMD's 12-bit event selects put bits 8-11 at config bits 32-35.
	if got := rawConfig("AuthenticAMD", rawEvent{event: 0x1C0, umask: 0x01}); got != 0x1_0000_01C0 {
		t.Errorf("rawConfig(0x1C0) = %#x, want 0x1000001c0", got)
	}
}
