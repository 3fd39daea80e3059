package slurmver

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Release
		wantErr string
	}{
		{in: "slurm 22.05.8", want: Release{22, 5, 8}},
		{in: "slurm-wlm 24.11.5\n", want: Release{24, 11, 5}},
		{in: "26.05.3", want: Release{26, 5, 3}},
		{in: "slurm 25.11.0-0rc1", want: Release{25, 11, 0}},
		{in: "slurm 23.11", want: Release{23, 11, 0}},
		{in: "", wantErr: "want"},
		{in: "slurm", wantErr: "no MAJOR.MINOR"},
		{in: "slurm x.05.1", wantErr: `major "x"`},
		{in: "slurm 22.y.1", wantErr: `minor "y"`},
		{in: "slurm 22.05.z", wantErr: `micro "z"`},
		{in: "slurm 22.05.1 extra", wantErr: "want"},
		{in: "slurm 300.05.1", wantErr: "major"},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// TestNumber: SLURM_VERSION_NUMBER's encoding both ways (slurm_version.h:
// SLURM_VERSION_NUM(a,b,c) (((a) << 16) + ((b) << 8) + (c))).
func TestNumber(t *testing.T) {
	r := Release{24, 11, 5}
	if got, want := r.Number(), uint32(0x180b05); got != want {
		t.Errorf("%v.Number() = %#x, want %#x", r, got, want)
	}
	if got := FromNumber(0x180b05); got != r {
		t.Errorf("FromNumber(0x180b05) = %v, want %v", got, r)
	}
	if got := r.String(); got != "24.11.5" {
		t.Errorf("String() = %q", got)
	}
	if got := (Release{22, 5, 8}).Series(); got != "22.05" {
		t.Errorf("Series() = %q", got)
	}
	if (Release{}).Known() || (Release{}).String() != "unknown" {
		t.Error("the zero release is known")
	}
	for _, tc := range []struct {
		a, b Release
		same bool
	}{
		{Release{24, 11, 1}, Release{24, 11, 6}, true},
		{Release{24, 5, 1}, Release{24, 11, 1}, false},
		{Release{23, 11, 1}, Release{24, 11, 1}, false},
	} {
		if got := tc.a.SameSeries(tc.b); got != tc.same {
			t.Errorf("%v.SameSeries(%v) = %v", tc.a, tc.b, got)
		}
	}
	if !(Release{24, 11, 0}).AtLeast(24, 11) || (Release{24, 5, 0}).AtLeast(24, 11) || !(Release{25, 5, 0}).AtLeast(24, 11) {
		t.Error("AtLeast")
	}
}
