package daemon

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/sample"
)

// TestAppendSampleJSON: the kept samples' encoding is encoding/json's, byte for byte.
func TestAppendSampleJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 1, 123456789, time.UTC)
	for _, tt := range []struct {
		name string
		s    sample.Sample
	}{
		{"empty", sample.Sample{}},
		{"cycle", sample.Sample{Time: t0, Reason: sample.Cycle, Seconds: 1.000213,
			Job: map[string]float64{"cpu_user_seconds": 0.0123, "mem_bytes": 73400320, "tasks": 1, "psi_cpu_some_seconds": 0},
			CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": 1.5e9, "syscalls:sys_enter_openat": 3}}, {CPU: 1, Values: nil}},
		}},
		{"exponents", sample.Sample{Time: t0.In(time.FixedZone("x", 3600)), Reason: sample.End,
			Job: map[string]float64{"a": 1e-7, "b": 2.5e-9, "c": 1e21, "d": -3e-300, "e": 999999999999999999999, "f": 1e20, "g": 5e-324}}},
		{"integral", sample.Sample{Time: t0, Reason: sample.Cycle,
			Job: map[string]float64{"a": 0, "b": math.Copysign(0, -1), "c": 123, "d": -5, "e": 1<<53 + 2, "f": 999999999999999, "g": 1e15, "h": -1e15, "i": 1e16, "j": 0.5}}},
		{"per GPU", sample.Sample{Time: t0, Reason: sample.Cycle, Seconds: 60, Job: map[string]float64{"gpus": 2},
			GPU: []sample.GPUValues{{GPU: 0, Values: map[string]float64{"busy_seconds": 59.5}}, {GPU: 3, Values: map[string]float64{"memory_bytes": 1 << 30}}}}},
		{"low coverage", sample.Sample{Time: t0, Reason: sample.Step, Job: map[string]float64{}, LowCoverage: []string{"cycles@0", "instructions@1"}}},
		{"escaped strings", sample.Sample{Time: t0, Reason: "a<b", Job: map[string]float64{"x&y": 1, "é": 2, "q\"": 3}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendSampleJSON([]byte("prefix"), tt.s)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff("prefix"+string(want), string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// Keys kept from the last sample: the same keys, other keys, more and fewer keys,
	// nil and empty maps, each as encoding/json writes it.
	var keys jsonKeys
	for i, m := range []map[string]float64{
		{"b": 1, "a": 2}, {"a": 3, "b": 4}, {"a": 1, "c": 2}, {"a": 1, "c": 2, "d": 0.5}, {"d": 1}, nil, {}, {"z": 1, "y": 2},
	} {
		s := sample.Sample{Time: t0, Reason: sample.Cycle, Job: m, CPU: []sample.CPUValues{{CPU: 0, Values: m}, {CPU: 1, Values: map[string]float64{"q": float64(i)}}}}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendSampleJSONKeys(nil, s, &keys)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("with kept keys, map %d (-want +got):\n%s", i, diff)
		}
	}
	// What JSON cannot hold is the same error.
	bad := sample.Sample{Time: t0, Job: map[string]float64{"x": math.NaN()}}
	_, werr := json.Marshal(bad)
	got, err := appendSampleJSON([]byte("prefix"), bad)
	if err == nil || werr == nil || err.Error() != werr.Error() || string(got) != "prefix" {
		t.Errorf("NaN: got %q, %v; want prefix, %v", got, err, werr)
	}
}
