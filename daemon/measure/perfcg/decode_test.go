package perfcg

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/perfevents"
	"golang.org/x/sys/unix"
)

func words(ws ...uint64) []byte {
	b := make([]byte, 8*len(ws))
	for i, w := range ws {
		binary.NativeEndian.PutUint64(b[8*i:], w)
	}
	return b
}

func TestDecodeSingle(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    [3]uint64
		wantErr bool
	}{
		{"full", words(1234, 2000, 1000), [3]uint64{1234, 2000, 1000}, false},
		{"zero", words(0, 0, 0), [3]uint64{}, false},
		{"max", words(math.MaxUint64, 1, 1), [3]uint64{math.MaxUint64, 1, 1}, false},
		{"short", words(1, 2), [3]uint64{}, true},
		{"long", words(1, 2, 3, 4), [3]uint64{}, true},
		{"empty", nil, [3]uint64{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, en, run, err := decodeSingle(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, [3]uint64{v, en, run}); diff != "" {
				t.Errorf("decodeSingle (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeGroup(t *testing.T) {
	type result struct {
		Enabled, Running uint64
		Vals             []idValue
	}
	tests := []struct {
		name    string
		in      []byte
		want    result
		wantErr bool
	}{
		{"two", words(2, 500, 250, 10, 7, 20, 8), result{500, 250, []idValue{{7, 10}, {8, 20}}}, false},
		{"one", words(1, 5, 5, 99, 3), result{5, 5, []idValue{{3, 99}}}, false},
		{"none", words(0, 1, 1), result{1, 1, []idValue{}}, false},
		{"truncated member", words(2, 500, 250, 10, 7, 20), result{}, true},
		{"nr too large", words(1<<62, 1, 1), result{}, true},
		{"header only part", words(1, 2), result{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			en, run, vals, err := decodeGroup(tt.in, make([]idValue, 0, 4))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, result{en, run, vals}, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("decodeGroup (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMakeCount(t *testing.T) {
	tests := []struct {
		name                  string
		raw, enabled, running uint64
		want                  Count
	}{
		{"full coverage", 100, 1000, 1000, Count{Available: true, Raw: 100, Enabled: 1000, Running: 1000, Scaled: 100, Coverage: 1}},
		{"half", 100, 1000, 500, Count{Available: true, Raw: 100, Enabled: 1000, Running: 500, Scaled: 200, Coverage: 0.5}},
		{"low", 100, 1000, 250, Count{Available: true, Raw: 100, Enabled: 1000, Running: 250, Scaled: 400, Coverage: 0.25, LowCoverage: true}},
		{"rounds down", 10, 3, 2, Count{Available: true, Raw: 10, Enabled: 3, Running: 2, Scaled: 15, Coverage: 2.0 / 3}},
		{"cgroup never ran on cpu", 0, 0, 0, Count{Available: true, Coverage: 1}},
		{"never scheduled", 0, 1000, 0, Count{Available: true, Enabled: 1000, LowCoverage: true}},
		{"running > enabled (clock skew)", 7, 10, 11, Count{Available: true, Raw: 7, Enabled: 10, Running: 11, Scaled: 7, Coverage: 1}},
		{"no overflow in product", 1 << 40, 1 << 40, 1 << 39, Count{Available: true, Raw: 1 << 40, Enabled: 1 << 40, Running: 1 << 39, Scaled: 1 << 41, Coverage: 0.5}},
		{"saturates", math.MaxUint64, 4, 1, Count{Available: true, Raw: math.MaxUint64, Enabled: 4, Running: 1, Scaled: math.MaxUint64, Coverage: 0.25, LowCoverage: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := makeCount(tt.raw, tt.enabled, tt.running, DefaultLowCoverage)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("makeCount (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFillGroup(t *testing.T) {
	row := make([]Count, 3)
	members := []member{{event: 2, id: 11}, {event: 0, id: 10}}
	if err := fillGroup(row, members, 100, 50, []idValue{{10, 1}, {11, 2}}, DefaultLowCoverage); err != nil {
		t.Fatal(err)
	}
	want := []Count{
		{Available: true, Raw: 1, Enabled: 100, Running: 50, Scaled: 2, Coverage: 0.5},
		{},
		{Available: true, Raw: 2, Enabled: 100, Running: 50, Scaled: 4, Coverage: 0.5},
	}
	if diff := cmp.Diff(want, row); diff != "" {
		t.Errorf("fillGroup (-want +got):\n%s", diff)
	}
	if err := fillGroup(row, []member{{event: 0, id: 99}}, 1, 1, []idValue{{10, 1}}, 0.5); err == nil {
		t.Error("fillGroup with unknown id: want error")
	}
}

func TestCountsSum(t *testing.T) {
	na := errors.New("gone")
	c := Counts{
		CPUs:   []int{0, 1},
		Events: []perfevents.Event{{Name: "a"}, {Name: "b"}},
		PerCPU: [][]Count{
			{makeCount(10, 100, 100, 0.5), makeCount(5, 10, 10, 0.5)},
			{makeCount(10, 100, 25, 0.5), {Err: na}},
		},
	}
	want := Count{Available: true, Raw: 20, Enabled: 200, Running: 125, Scaled: 50, Coverage: 0.625, LowCoverage: true}
	if diff := cmp.Diff(want, c.Sum(0)); diff != "" {
		t.Errorf("Sum(a) (-want +got):\n%s", diff)
	}
	if got := c.Sum(1); got.Available || !errors.Is(got.Err, na) {
		t.Errorf("Sum(b) = %+v, want not available with the CPU's error", got)
	}
	if got := c.Index("b"); got != 1 {
		t.Errorf("Index(b) = %d, want 1", got)
	}
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "sys/kernel/debug/tracing/events/syscalls/sys_enter_openat")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "id"), []byte("782\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := hostfs.New(root)
	e, err := Resolve(fs, tp("syscalls:sys_enter_openat"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Config != 782 {
		t.Errorf("id = %d, want 782", e.Config)
	}
	if _, err := Resolve(fs, tp("syscalls:sys_enter_open")); err == nil {
		t.Error("missing tracepoint: want error")
	}
	if _, err := Resolve(hostfs.New(t.TempDir()), tp("syscalls:sys_enter_openat")); !errors.Is(err, ErrNoTracefs) {
		t.Errorf("no tracefs: err = %v, want ErrNoTracefs", err)
	}
	if _, err := Resolve(fs, tp("../x")); err == nil {
		t.Error("bad name: want error")
	}
	sw := perfevents.SoftwareEvents()[0]
	if got, err := Resolve(fs, sw); err != nil || got != sw {
		t.Errorf("software event changed: %+v, %v", got, err)
	}
}

func TestOpenBadArguments(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		dir  string
		cpus []int
	}{
		{"no cpus", dir, nil},
		{"negative cpu", dir, []int{0, -1}},
		{"missing cgroup", filepath.Join(dir, "nope"), []int{0}},
	} {
		if g, err := Open(tt.dir, tt.cpus, perfevents.SoftwareEvents()); err == nil {
			g.Close()
			t.Errorf("%s: Open succeeded, want error", tt.name)
		}
	}
}

// tp is the catalog's form of a tracepoint event, unresolved.
func tp(name string) perfevents.Event {
	return perfevents.Event{Name: name, Kind: perfevents.Tracepoint, Type: unix.PERF_TYPE_TRACEPOINT}
}
