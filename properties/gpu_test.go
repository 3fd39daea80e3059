package properties

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/sample"
)

// onceKey marks a metric of a case that has its value in the first interval only.
const onceKey = "once:"

// TestGPUFindings: the GPU properties on recorded values (per second of a job with 4
// CPUs). The busy and one-block rows are what persyst-nvml measured on an H200 running
// bench/gpu/workload.py (97.5 % utilized, 94.7 % SM activity; 99.0 % and 0.8 %).
func TestGPUFindings(t *testing.T) {
	const gib = 1 << 30
	busy := map[string]float64{sample.GPUs: 1, sample.GPUErrors: 0, sample.GPUBusySeconds: 0.975, sample.GPUUnusedSeconds: 0,
		sample.GPUSMActiveSeconds: 0.947, sample.GPUThermalSeconds: 0, sample.GPUPowerCappedSeconds: 0.68,
		sample.GPUEnergyJoules: 692, sample.GPUMemPeakBytes: 60 * gib, sample.GPUMemTotalBytes: 80 * gib}
	with := func(m map[string]float64, kv ...any) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1].(float64)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		job     map[string]float64
		cpuBusy float64 // share of each of the 4 CPUs busy
		want    []string
		value   map[string]float64 // medians of findings
	}{
		{"busy GPU", busy, 0.3, nil, nil},
		{"2 of 4 GPUs used", with(busy, sample.GPUs, 4.0, sample.GPUBusySeconds, 1.95, sample.GPUUnusedSeconds, 2.0,
			sample.GPUSMActiveSeconds, 1.894, sample.GPUMemTotalBytes, 320.0*gib, sample.GPUMemPeakBytes, 120.0*gib), 0.3,
			[]string{"gpu_unused"}, map[string]float64{"gpu_unused": 0.5}},
		{"one block", with(busy, sample.GPUBusySeconds, 0.99, sample.GPUSMActiveSeconds, 0.008), 0.3, []string{"gpu_sm_activity"}, nil},
		{"data loader: CPUs saturated", with(busy, sample.GPUBusySeconds, 0.3, sample.GPUSMActiveSeconds, 0.28), 1,
			[]string{"gpu_cpu_starved"}, map[string]float64{"gpu_cpu_starved": 30}},
		{"data loader: reads stall", with(busy, sample.GPUBusySeconds, 0.3, sample.GPUSMActiveSeconds, 0.28, sample.PSIIOSomeSeconds, 0.5), 0.3,
			[]string{"gpu_cpu_starved"}, nil},
		{"low use, CPUs idle", with(busy, sample.GPUBusySeconds, 0.2, sample.GPUSMActiveSeconds, 0.19), 0.3,
			[]string{"gpu_low_util"}, map[string]float64{"gpu_low_util": 20}},
		// An idle GPU read a few ms off the interval (H200, persyst run): idle, not
		// "barely busy" from a division by the rounding.
		{"idle, the interval rounded", with(busy, sample.GPUBusySeconds, 0.0, sample.GPUUnusedSeconds, 0.9998,
			sample.GPUSMActiveSeconds, 0.0), 0.3, []string{"gpu_unused"}, nil},
		{"hot node", with(busy, sample.GPUThermalSeconds, 0.5), 0.3, []string{"gpu_thermal"}, nil},
		// One error in the job's first interval only (onceKey).
		{"one hardware error", with(busy, onceKey+sample.GPUErrors, 1.0), 0.3, []string{"gpu_errors"}, nil},
		{"small memory", with(busy, sample.GPUMemPeakBytes, 4.0*gib), 0.3, []string{"gpu_memory_unused"}, nil},
		{"shared GPU: memory only", map[string]float64{sample.GPUs: 1, sample.GPUMemPeakBytes: 4.0 * gib, sample.GPUMemTotalBytes: 80.0 * gib}, 0.3, nil, nil},
		{"no GPU", map[string]float64{}, 0.3, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tenSeconds(t, func(i int) (map[string]float64, []sample.CPUValues) {
				job := map[string]float64{sample.CPUUserSeconds: 4 * tc.cpuBusy, sample.CPUSystemSeconds: 0}
				for k, v := range tc.job {
					if !strings.HasPrefix(k, onceKey) {
						job[k] = v
					}
				}
				for k, v := range tc.job {
					if n, ok := strings.CutPrefix(k, onceKey); ok && i == 0 {
						job[n] = v // after the others: it overrides them
					}
				}
				var cpus []sample.CPUValues
				for c := range 4 {
					cpus = append(cpus, sample.CPUValues{CPU: c, Values: map[string]float64{"task-clock": tc.cpuBusy * 1e9}})
				}
				return job, cpus
			}, nil)
			var got []string
			values := map[string]float64{}
			for _, r := range Findings(Fold(res)) {
				if len(r.ID) > 4 && r.ID[:4] == "gpu_" {
					got = append(got, r.ID)
					values[r.ID] = r.Median()
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("GPU findings (-want +got):\n%s", d)
			}
			for k, want := range tc.value {
				if v := values[k]; v < want-0.01 || v > want+0.01 {
					t.Errorf("%s median %.3f, want %.3f", k, v, want)
				}
			}
		})
	}
}

// TestGPUIdleNotAssessed: a GPU idle all along, its busy time missing in the first
// interval only (the GPU's first read): the busy share has no value where it was
// measured, nothing to assess rather than a reason that is none; SM activity, never
// measured (an AMD GPU), keeps its reason.
func TestGPUIdleNotAssessed(t *testing.T) {
	const noSM = "AMD GPUs give no SM activity"
	res := tenSeconds(t, func(i int) (map[string]float64, []sample.CPUValues) {
		job := map[string]float64{sample.CPUUserSeconds: 0.4, sample.CPUSystemSeconds: 0, sample.GPUs: 1,
			sample.GPUMemPeakBytes: 1 << 28, sample.GPUMemTotalBytes: 64 << 30}
		if i > 0 {
			job[sample.GPUBusySeconds], job[sample.GPUUnusedSeconds] = 0, 1
		}
		return job, nil
	}, map[string]string{sample.GPUSMActiveSeconds: noSM})
	got := map[string]string{}
	for _, r := range res {
		got[r.Key] = r.NotAssessed
	}
	if got["gpu_low_util"] != NothingToAssess {
		t.Errorf("gpu_low_util not assessed %q, want %q", got["gpu_low_util"], NothingToAssess)
	}
	if w := got["gpu_sm_activity"]; !strings.Contains(w, noSM) && !strings.HasPrefix(w, "not evaluated") {
		t.Errorf("gpu_sm_activity not assessed %q, want %q", w, noSM)
	}
}

// tenSeconds runs a job of 4 CPUs for ten one-second samples, interval i's values
// from job, through the default strategy, and returns its results (notMeasured: the
// summary's metrics without a value, with why).
func tenSeconds(t *testing.T, job func(i int) (map[string]float64, []sample.CPUValues), notMeasured map[string]string) []Result {
	t.Helper()
	e, err := Load(Settings{MinSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	acc := e.NewAccumulator(JobInfo{NCPUs: 4})
	t0 := time.Unix(1_800_000_000, 0)
	var samples []sample.Sample
	totals := map[string]float64{}
	for i := range 10 {
		values, cpus := job(i)
		s := sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Reason: sample.Cycle, Seconds: 1, Job: values, CPU: cpus}
		acc.Add(s)
		samples = append(samples, s)
		for k, v := range values {
			if sample.KindOf(k) == sample.Counter {
				totals[k] += v
			} else {
				totals[k] = max(totals[k], v)
			}
		}
	}
	return acc.Finish(samples, sample.Summary{Seconds: 10, Samples: 10, Totals: totals, NotMeasured: notMeasured})
}
