package powercap_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/daemon/measure/powercap"
	"github.com/persyst/persyst/daemon/measure/powercap/fakepowercap"
)

// A two-package server with DRAM zones, core subzones and the mmio copy of package 0.
var server = []fakepowercap.Zone{
	{Dir: "intel-rapl:0", Name: "package-0", MaxRange: 262143328850},
	{Dir: "intel-rapl:0:0", Name: "core", MaxRange: 262143328850},
	{Dir: "intel-rapl:0:1", Name: "dram", MaxRange: 65712999613},
	{Dir: "intel-rapl:1", Name: "package-1", MaxRange: 262143328850},
	{Dir: "intel-rapl:1:0", Name: "dram", MaxRange: 65712999613},
	{Dir: "intel-rapl-mmio:0", Name: "package-0", MaxRange: 262143328850},
}

func TestZones(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zones []fakepowercap.Zone
		want  []string // dir name: domain, range
		err   error
	}{
		{name: "a server: packages and their DRAM; no core, no mmio copy", zones: server,
			want: []string{"intel-rapl:0 package 262143328850", "intel-rapl:0:1 dram 65712999613",
				"intel-rapl:1 package 262143328850", "intel-rapl:1:0 dram 65712999613"}},
		{name: "a laptop's platform counter beside its package", zones: []fakepowercap.Zone{
			{Dir: "intel-rapl:0", Name: "package-0", MaxRange: 262143328850}, {Dir: "intel-rapl:1", Name: "psys"}},
			want: []string{"intel-rapl:0 package 262143328850", "intel-rapl:1 psys 0"}},
		{name: "only core subzones", zones: []fakepowercap.Zone{{Dir: "intel-rapl:0:0", Name: "core"}}, err: powercap.ErrNone},
		{name: "no tree", err: powercap.ErrNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "powercap")
			if tc.zones != nil {
				if _, err := fakepowercap.New(dir, 1000, tc.zones...); err != nil {
					t.Fatal(err)
				}
			}
			zones, err := powercap.Zones(dir)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			var got []string
			for _, z := range zones {
				got = append(got, filepath.Base(z.Dir)+" "+string(z.Domain)+" "+strconv.FormatUint(z.MaxRange, 10))
				if v, err := z.Read(); err != nil || v != 1000 {
					t.Errorf("%s: read %d, %v; want 1000", z.Dir, v, err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
		})
	}
}

func TestZoneBadCounter(t *testing.T) {
	dir := t.TempDir()
	if _, err := fakepowercap.New(dir, 5, server[0]); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "intel-rapl:0", "energy_uj")
	if err := os.WriteFile(p, []byte("12a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	zones, err := powercap.Zones(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zones[0].Read(); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a malformed counter: error %v, want one naming %s", err, p)
	}
}

func TestCounter(t *testing.T) {
	const max = 1_000_000_000 // 1 kJ
	for _, tc := range []struct {
		name     string
		max      uint64
		readings []uint64
		want     []float64 // joules per reading; -1: ErrBackwards
	}{
		{name: "counts up", max: max, readings: []uint64{5e6, 15e6, 15e6, 40e6}, want: []float64{0, 10, 0, 25}},
		{name: "wraps at its range", max: max, readings: []uint64{990e6, 5e6, 25e6}, want: []float64{0, 15, 20}},
		{name: "a drop no wrap explains is a reset, and counting goes on from it", max: max,
			readings: []uint64{600e6, 100e6, 130e6}, want: []float64{0, -1, 30}},
		{name: "no range: every drop is a reset", readings: []uint64{990e6, 5e6, 6e6}, want: []float64{0, -1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := powercap.NewCounter(tc.max)
			var got []float64
			for _, r := range tc.readings {
				j, err := c.Add(r)
				switch {
				case errors.Is(err, powercap.ErrBackwards):
					j = -1
				case err != nil:
					t.Fatal(err)
				}
				got = append(got, j)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("joules (-want +got):\n%s", diff)
			}
		})
	}
}
