package properties

import (
	"testing"
	"time"

	"github.com/persyst/persyst/sample"
)

// TestSmallRequestsCost: small writes are a finding only where they cost the job time,
// with the node's own cost of a call (syscall_seconds): 64-byte writes at a million a
// second are; a stdio writer's 4 KiB writes and a pipeline's transfers are not; under
// software emulation (20 µs a call) 30,000 small writes a second cost as much as a
// million on a server, and are found there only with the node's measured cost; a flush
// to storage after every write (each stalls 300 µs) is found by its stall.
func TestSmallRequestsCost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		syscall float64 // syscall_seconds (0: the default)
		job     map[string]float64
		want    bool
	}{
		{"tiny writes", 0, map[string]float64{sample.WriteSyscalls: 1e6, sample.WriteChars: 64e6, sample.CPUSystemSeconds: 0.9, sample.CPUUserSeconds: 0.1}, true},
		{"stdio writer", 0, map[string]float64{sample.WriteSyscalls: 16384, sample.WriteChars: 64 << 20, sample.CPUSystemSeconds: 0.14, sample.CPUUserSeconds: 0.7,
			sample.StorageWriteBytes: 64 << 20, sample.PSIIOSomeSeconds: 0.07}, false},
		{"pipeline", 0, map[string]float64{sample.WriteSyscalls: 6000, sample.WriteChars: 25e6, sample.CPUSystemSeconds: 0.04, sample.CPUUserSeconds: 0.95}, false},
		{"tiny writes, emulated, with the node's cost", 20e-6, map[string]float64{sample.WriteSyscalls: 30000, sample.WriteChars: 1.92e6, sample.CPUSystemSeconds: 0.76, sample.CPUUserSeconds: 0.2}, true},
		{"tiny writes, emulated, a server's cost assumed", 0, map[string]float64{sample.WriteSyscalls: 30000, sample.WriteChars: 1.92e6, sample.CPUSystemSeconds: 0.76, sample.CPUUserSeconds: 0.2}, false},
		{"sync after every write", 0, map[string]float64{sample.WriteSyscalls: 3000, sample.WriteChars: 12e6, sample.CPUSystemSeconds: 0.25, sample.CPUUserSeconds: 0.01,
			sample.StorageWriteBytes: 12e6, sample.PSIIOSomeSeconds: 0.9}, true},
		// Calls on files counted apart (eBPF): a million tiny writes to a pipe and the
		// few large ones to a file are large file writes; the same million to a file are
		// small ones.
		{"tiny writes to a pipe, files told apart", 0, map[string]float64{sample.WriteSyscalls: 1e6 + 16, sample.WriteChars: 64e6 + 64<<20, sample.CPUSystemSeconds: 0.9, sample.CPUUserSeconds: 0.1,
			sample.FileWriteCalls: 16, sample.FileWriteBytes: 64 << 20, sample.FileReadCalls: 0, sample.FileReadBytes: 0}, false},
		{"tiny writes to a file, files told apart", 0, map[string]float64{sample.WriteSyscalls: 1e6, sample.WriteChars: 64e6, sample.CPUSystemSeconds: 0.9, sample.CPUUserSeconds: 0.1,
			sample.FileWriteCalls: 1e6, sample.FileWriteBytes: 64e6, sample.FileReadCalls: 0, sample.FileReadBytes: 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Settings{MinSeconds: 1}
			if tc.syscall > 0 {
				s.Calibration = map[string]float64{NameSyscallSeconds: tc.syscall}
			}
			e, err := Load(s)
			if err != nil {
				t.Fatal(err)
			}
			acc := e.NewAccumulator(JobInfo{NCPUs: 1})
			t0 := time.Unix(1_800_000_000, 0)
			for i := range 10 {
				job := map[string]float64{sample.ReadSyscalls: 0, sample.ReadChars: 0}
				for k, v := range tc.job {
					job[k] = v
				}
				acc.Add(sample.Sample{Time: t0.Add(time.Duration(i) * time.Second), Reason: sample.Cycle, Seconds: 1, Job: job,
					CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": 1e9}}}})
			}
			got := false
			for _, r := range Findings(Fold(acc.Finish(nil, sample.Summary{Seconds: 10, Samples: 10}))) {
				got = got || r.Key == "io_write_request_size"
			}
			if got != tc.want {
				t.Errorf("small writes found: %v, want %v", got, tc.want)
			}
		})
	}
}
