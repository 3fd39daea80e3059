// Package slurmver is a Slurm release: what Slurm's commands print (`slurmd -V`,
// `scontrol --version`), what its plugins carry (plugin_version, SLURM_VERSION_NUMBER),
// the releases persyst is tested with (Tested) and every change between releases that
// persyst reads differently (features.go: one table, asked with Release.Has). It is a
// leaf: the job map, accounting, `persyst check` and the packaging read releases through it.
package slurmver

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// Release is a Slurm release; the zero value is "not known".
type Release struct{ Major, Minor, Micro int }

// Known says whether r is a release at all.
func (r Release) Known() bool { return r.Major != 0 }

// AtLeast says whether r is release major.minor or later. A decision of what a release
// does asks Has with the change's name instead.
func (r Release) AtLeast(major, minor int) bool {
	return r.Major > major || (r.Major == major && r.Minor >= minor)
}

// CompareSeries compares the series (major.minor) of r and s: -1 when r's is older, 0
// when they are the same, +1 when r's is newer.
func (r Release) CompareSeries(s Release) int {
	if c := cmp.Compare(r.Major, s.Major); c != 0 {
		return c
	}
	return cmp.Compare(r.Minor, s.Minor)
}

// Series is the release's major.minor ("24.11"): plugins are built for one series.
func (r Release) Series() string { return fmt.Sprintf("%d.%02d", r.Major, r.Minor) }

// String is the release as Slurm writes it ("24.11.5"; "unknown" for the zero value).
func (r Release) String() string {
	if !r.Known() {
		return "unknown"
	}
	return fmt.Sprintf("%s.%d", r.Series(), r.Micro)
}

// SameSeries says whether a SPANK plugin built for r loads in Slurm release s: Slurm
// compares only major and minor for SPANK plugins.
func (r Release) SameSeries(s Release) bool { return r.Major == s.Major && r.Minor == s.Minor }

// Number is the release as SLURM_VERSION_NUMBER encodes it (and a plugin's
// plugin_version holds): major<<16 | minor<<8 | micro.
func (r Release) Number() uint32 {
	return uint32(r.Major)<<16 | uint32(r.Minor)<<8 | uint32(r.Micro)
}

// FromNumber decodes SLURM_VERSION_NUMBER's encoding.
func FromNumber(n uint32) Release {
	return Release{Major: int(n >> 16 & 0xff), Minor: int(n >> 8 & 0xff), Micro: int(n & 0xff)}
}

// Parse reads a release from what Slurm's commands print: "slurm 22.05.8",
// "slurm-wlm 24.11.5", or the bare "25.11.0-0rc1" (a micro of 0 when only major.minor
// is given). The error names what was read.
func Parse(s string) (Release, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return Release{}, fmt.Errorf("slurm release %q: want \"slurm MAJOR.MINOR.MICRO\"", s)
	}
	v := strings.SplitN(f[len(f)-1], ".", 3)
	var r Release
	var err error
	if len(v) < 2 {
		return Release{}, fmt.Errorf("slurm release %q: no MAJOR.MINOR", s)
	}
	if r.Major, err = strconv.Atoi(v[0]); err != nil || r.Major <= 0 || r.Major > 255 {
		return Release{}, fmt.Errorf("slurm release %q: major %q is not a release number", s, v[0])
	}
	if r.Minor, err = strconv.Atoi(v[1]); err != nil || r.Minor < 0 || r.Minor > 255 {
		return Release{}, fmt.Errorf("slurm release %q: minor %q is not a release number", s, v[1])
	}
	if len(v) == 3 {
		micro := v[2]
		if i := strings.IndexFunc(micro, func(c rune) bool { return c < '0' || c > '9' }); i >= 0 {
			micro = micro[:i] // "0-0rc1"
		}
		if r.Micro, err = strconv.Atoi(micro); err != nil || r.Micro > 255 {
			return Release{}, fmt.Errorf("slurm release %q: micro %q is not a release number", s, v[2])
		}
	}
	return r, nil
}
