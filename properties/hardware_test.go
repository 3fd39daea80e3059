package properties

import (
	"math"
	"testing"
	"time"

	"github.com/persyst/persyst/sample"
)

// TestHardwarePropertiesSimulatedCounters evaluates the hardware properties on counter
// values constructed for two textbook cases (this machine has no PMU, and no recording
// from one is in the repository): a memory-bound scalar code and a compute-bound
// vectorized one, on an Intel Sapphire Rapids core table (raw FP_ARITH events).
func TestHardwarePropertiesSimulatedCounters(t *testing.T) {
	c, err := DefaultCatalog()
	if err != nil {
		t.Fatal(err)
	}
	st, err := DefaultStrategy(c)
	if err != nil {
		t.Fatal(err)
	}
	cal := map[string]float64{"max_freq_hz": 3e9, "min_freq_hz": 1e9, "peak_flops_core": 32e9, "stream_bw_core": 2e9}
	e, err := NewEngine(Config{Catalog: c, Strategy: st, Calibration: cal})
	if err != nil {
		t.Fatal(err)
	}
	fp := func(scalarDP, avx512DP float64) map[string]float64 {
		return map[string]float64{"fp_scalar_double": scalarDP, "fp_scalar_single": 0, "fp_128_double": 0, "fp_128_single": 0,
			"fp_256_double": 0, "fp_256_single": 0, "fp_512_double": avx512DP, "fp_512_single": 0}
	}
	cpu := func(cycles, instr, misses float64, f map[string]float64) sample.CPUValues {
		v := map[string]float64{"task-clock": 1e9, "cycles": cycles, "instructions": instr, "branches": instr / 5,
			"branch-misses": instr / 5 * 0.01, "cache-references": misses * 2, "cache-misses": misses, "loads": instr / 3, "stores": instr / 10}
		for k, x := range f {
			v[k] = x
		}
		return sample.CPUValues{CPU: 0, Values: v}
	}
	run := func(c sample.CPUValues) map[string]Result {
		acc := e.NewAccumulator(JobInfo{NCPUs: 1, Topology: []sample.CPUTopo{{CPU: 0}}})
		for i := 0; i < 5; i++ {
			acc.Add(sample.Sample{Time: time.Unix(int64(i), 0), Reason: sample.Cycle, Seconds: 1,
				Job: map[string]float64{"cpu_user_seconds": 1, "cpu_system_seconds": 0}, CPU: []sample.CPUValues{c}})
		}
		out := map[string]Result{}
		for _, r := range acc.Finish(nil, sample.Summary{Seconds: 5}) {
			out[r.Key] = r
		}
		return out
	}

	// Memory bound: CPI 3, 50 M last-level misses/s (3.2 GB/s > 2 GB/s per core), scalar.
	mem := run(cpu(3e9, 1e9, 50e6, fp(1e8, 0)))
	expect := func(rs map[string]Result, key string, finding bool, median float64) {
		t.Helper()
		r := rs[key]
		if !r.Assessed {
			t.Errorf("%s not assessed: %s", key, r.NotAssessed)
			return
		}
		if r.Finding != finding || math.Abs(r.Median()-median) > 1e-9*math.Max(1, math.Abs(median)) {
			t.Errorf("%s: finding %v median %v, want %v and %v (%+v)", key, r.Finding, r.Median(), finding, median, r)
		}
	}
	expect(mem, "cpi", true, 3)
	expect(mem, "memory_bw:memory_bound", true, 64*50e6)
	expect(mem, "llc_miss_per_instr", true, 0.05)
	if r := mem["flops_rate"]; r.Assessed {
		t.Errorf("flops_rate evaluated although the code is memory bound (compute-bound replica false): %+v", r)
	}
	// Compute bound and vectorized: CPI 0.5, 1 M misses/s, 1e9 AVX-512 DP instructions/s.
	cmp := run(cpu(3e9, 6e9, 1e6, fp(0, 1e9)))
	expect(cmp, "instruction_rate", false, 6e9)
	expect(cmp, "memory_bw:compute_bound", false, 64e6)
	expect(cmp, "flops_rate", false, 8e9) // 8 DP flops per AVX-512 instruction; threshold 4.8e9
	// The flop rate is fine, so the strategy does not refine into vectorization.
	if r := cmp["vector_ratio"]; r.Assessed {
		t.Errorf("vector_ratio evaluated although flops_rate was not severe: %+v", r)
	}
	if r := cmp["cpi"]; r.Assessed && r.Finding {
		t.Errorf("cpi 0.5 is a finding: %+v", r)
	}
	// Scalar compute-bound code: the vector ratio is 0, a finding.
	scalar := run(cpu(3e9, 6e9, 1e6, fp(2e9, 0)))
	expect(scalar, "vector_ratio", true, 0)
	expect(scalar, "flops_rate", true, 2e9)
}

// TestHardwareNotAssessedWithoutPMU: without hardware counters, the hardware properties
// are "not assessed" with the measurement's reason, never evaluated as zero.
func TestHardwareNotAssessedWithoutPMU(t *testing.T) {
	c, _ := DefaultCatalog()
	st, _ := DefaultStrategy(c)
	e, _ := NewEngine(Config{Catalog: c, Strategy: st, Calibration: map[string]float64{"max_freq_hz": 3e9, "min_freq_hz": 1e9}})
	acc := e.NewAccumulator(JobInfo{NCPUs: 1})
	acc.Add(sample.Sample{Reason: sample.Cycle, Seconds: 1, Job: map[string]float64{"task-clock": 1e9},
		CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": 1e9}}}})
	why := "not available: no PMU for this event (typical in VMs)"
	for _, r := range acc.Finish(nil, sample.Summary{Seconds: 1, NotMeasured: map[string]string{"instructions": why, "cycles": why}}) {
		if r.Key == "instruction_rate" && (r.Assessed || r.NotAssessed != "instructions: "+why) {
			t.Errorf("instruction_rate: assessed %v, %q", r.Assessed, r.NotAssessed)
		}
	}
}

// TestPowerSimulatedCounters: RAPL energy over an interval becomes watts, for a job alone
// on its node (values constructed: no power PMU here).
func TestPowerSimulatedCounters(t *testing.T) {
	c, _ := DefaultCatalog()
	st, _ := DefaultStrategy(c)
	e, _ := NewEngine(Config{Catalog: c, Strategy: st})
	acc := e.NewAccumulator(JobInfo{NCPUs: 1})
	for i := 0; i < 3; i++ {
		acc.Add(sample.Sample{Reason: sample.Cycle, Seconds: 60, Job: map[string]float64{"energy_pkg_joules": 60 * 180, "energy_ram_joules": 60 * 12}})
	}
	for _, r := range acc.Finish(nil, sample.Summary{Seconds: 180}) {
		switch r.Key {
		case "pkg_power":
			if !r.Assessed || r.Median() != 180 || r.Finding {
				t.Errorf("pkg_power: %+v", r)
			}
		case "dram_power":
			if !r.Assessed || r.Median() != 12 {
				t.Errorf("dram_power: %+v", r)
			}
		}
	}
}
