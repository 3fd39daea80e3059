package calibrate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/properties"
	"github.com/persyst/persyst/sample"
)

// allowedCPUs are the CPUs this test may run on.
func allowedCPUs(t *testing.T) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var out []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// TestRunShort runs both benchmarks for real, briefly and on small arrays, writes the
// calibration and reads it back the ways persyst does.
func TestRunShort(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmarks the machine for about a second")
	}
	dir := filepath.Join(t.TempDir(), "cal", "sub")
	const budget = time.Second
	t0 := time.Now()
	res, err := Run(context.Background(), Options{Budget: budget, ArrayBytes: 16 << 20, CPUs: allowedCPUs(t), Dir: dir})
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s\n%s", took, Text(res))
	if took > 2*budget+time.Second {
		t.Errorf("took %s for a budget of %s", took, budget)
	}
	v := res.Calibration.Values
	s, f := res.Stream, res.Flops
	for name, bw := range map[string]float64{"copy": s.Copy, "scale": s.Scale, "add": s.Add, "triad": s.Triad,
		"stream_bw_node": v["stream_bw_node"], "stream_bw_core": v["stream_bw_core"]} {
		if !(bw > 100e6 && bw < 1e12) {
			t.Errorf("%s = %g B/s, want between 100 MB/s and 1 TB/s", name, bw)
		}
	}
	if s.Rounds < streamMinRounds {
		t.Errorf("%d STREAM rounds, want at least %d", s.Rounds, streamMinRounds)
	}
	if got, want := v["stream_bw_node"], (s.Copy+s.Scale+s.Add+s.Triad)/4; got != want {
		t.Errorf("stream_bw_node %g, want the average of the kernels %g", got, want)
	}
	if got, want := v["stream_bw_core"], v["stream_bw_node"]/v["cores"]; got != want {
		t.Errorf("stream_bw_core %g, want stream_bw_node / cores %g", got, want)
	}
	for name, r := range map[string]float64{"peak_flops_core": v["peak_flops_core"], "scalar per core": f.Scalar() / v["cores"]} {
		if !(r > 1e8 && r < 1e13) {
			t.Errorf("%s = %g flop/s, want between 1e8 and 1e13", name, r)
		}
	}
	if got, want := v["peak_flops_core"], f.Scalar()/v["cores"]*float64(res.Lanes); got != want {
		t.Errorf("peak_flops_core %g, want scalar per core × %d lanes = %g", got, res.Lanes, want)
	}
	if got, want := v["peak_flops_node"], v["peak_flops_core"]*v["cores"]; got != want {
		t.Errorf("peak_flops_node %g, want %g", got, want)
	}
	if f.FMA && !(f.FMARate > 0) {
		t.Errorf("the processor has FMA but the FMA kernel measured %g", f.FMARate)
	}
	for _, k := range []string{"stream_bw_node", "stream_bw_core", "peak_flops_core", "peak_flops_node", "cores", "mem_total_bytes"} {
		if _, ok := v[k]; !ok {
			t.Errorf("no %s in %v", k, v)
		}
		if res.Calibration.Methods[k] == "" {
			t.Errorf("no method for %s", k)
		}
	}

	// The file, and nothing else, in the new directory.
	want := properties.CalibrationFile(dir, res.Calibration.NodeType)
	if res.File != want {
		t.Errorf("written to %s, want %s", res.File, want)
	}
	if fi, err := os.Stat(want); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("calibration file: %v, %v", fi, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("calibration dir: %v, %v", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in %s: %v", dir, ents)
	}

	// properties reads back what Run wrote.
	got, err := properties.LoadCalibration(dir, res.Calibration.NodeType)
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeType != res.Calibration.NodeType || !got.Measured.Equal(res.Calibration.Measured) ||
		len(got.Values) != len(v) || len(got.Methods) != len(res.Calibration.Methods) {
		t.Errorf("read back %+v\nwrote %+v", got, res.Calibration)
	}
	for k, x := range v {
		if got.Values[k] != x {
			t.Errorf("read back %s = %g, wrote %g", k, got.Values[k], x)
		}
	}

	// This node's engine takes its thresholds from the calibration: Run's default node
	// type is the one LoadForNode looks up.
	e, cal, err := properties.LoadForNode(hostfs.New("/"), dir, properties.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if cal.NodeType != res.Calibration.NodeType || cal.Values["peak_flops_core"] != v["peak_flops_core"] {
		t.Fatalf("LoadForNode found %s %v, want %s", cal.NodeType, cal.Values, res.Calibration.NodeType)
	}
	thr := map[string]float64{}
	for _, r := range e.NewAccumulator(properties.JobInfo{}).Finish(nil, sample.Summary{}) {
		if r.Threshold != nil {
			thr[r.Key] = *r.Threshold
		}
	}
	for key, want := range map[string]float64{
		"flops_rate":              0.15 * v["peak_flops_core"],
		"memory_bw:memory_bound":  v["stream_bw_core"],
		"memory_bw:compute_bound": v["stream_bw_core"],
	} {
		if got, ok := thr[key]; !ok || got != want {
			t.Errorf("threshold of %s = %g (%v), want %g", key, got, ok, want)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t0 := time.Now()
	_, err := Run(ctx, Options{Budget: 5 * time.Second, ArrayBytes: 1 << 20, CPUs: allowedCPUs(t), Dir: t.TempDir()})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("a cancelled run took %s", d)
	}
}

// A thread that cannot be pinned ends the run with an error, without leaving the
// others waiting at the barrier.
func TestPinFailure(t *testing.T) {
	cpus := []int{allowedCPUs(t)[0], 1 << 20} // no such CPU
	if _, err := Stream(context.Background(), StreamOptions{CPUs: cpus, ArrayBytes: 1 << 20, Duration: time.Second}); err == nil {
		t.Error("Stream pinned a thread to CPU 1048576")
	}
	if _, err := Flops(context.Background(), FlopsOptions{CPUs: cpus, Duration: time.Second}); err == nil {
		t.Error("Flops pinned a thread to CPU 1048576")
	}
}

func TestSave(t *testing.T) {
	dir := t.TempDir()
	c := properties.Calibration{NodeType: "Some_CPU-4cpus", Measured: time.Unix(1700000000, 0).UTC(),
		Values: map[string]float64{"stream_bw_node": 4e10, "cores": 4}, Methods: map[string]string{"cores": "counted"}}
	for i := range 2 { // the second replaces the first
		c.Values["stream_bw_node"] = 4e10 + float64(i)
		p, err := Save(dir, c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := properties.LoadCalibration(dir, c.NodeType)
		if err != nil || p != properties.CalibrationFile(dir, c.NodeType) || got.Values["stream_bw_node"] != 4e10+float64(i) {
			t.Errorf("save %d: %s, %+v, %v", i, p, got, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in %s: %v", dir, ents)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		c.NodeType = bad
		if _, err := Save(dir, c); err == nil {
			t.Errorf("saved node type %q", bad)
		}
	}
}

// An unwritable directory is reported before any benchmark runs.
func TestRunUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := Run(context.Background(), Options{Budget: 5 * time.Second, CPUs: allowedCPUs(t), Dir: filepath.Join(file, "cal")}); err == nil {
		t.Error("Run wrote below a regular file")
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("the error came after %s", d)
	}
}
