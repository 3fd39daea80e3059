package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/wire"
)

// BenchmarkApply measures one persisted step_start with N jobs already in the registry
// (ended jobs are kept for the retention, so N grows with the node's job rate).
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{10, 1000, 5000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			r, err := OpenRegistry(RegistryConfig{Node: "n1", Dir: b.TempDir()}, zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := 1; i <= n; i++ {
				for _, k := range []wire.Kind{wire.JobStart, wire.StepStart, wire.StepEnd, wire.JobEnd} {
					e := &wire.Event{JobID: uint32(i), UID: 1000, Persyst: wire.On, Time: t0, JobCores: "0-47",
						Cgroups: map[string]string{"freezer": fmt.Sprintf("/sys/fs/cgroup/freezer/slurm/uid_1000/job_%d", i)}}
					if k == wire.StepStart || k == wire.StepEnd {
						e.StepID = "batch"
					}
					if _, err := r.Apply(k, e, t0); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := &wire.Event{JobID: uint32(n + 1), StepID: fmt.Sprint(i % 1000), UID: 1000, Persyst: wire.On, Time: t0}
				if _, err := r.Apply(wire.StepStart, e, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
