package jobmap

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/jobmap/v0038"
)

// TestMemDefault: memory the job was given without asking (the site's DefMemPerCPU) is
// told apart from memory it requested, by Slurm's JOB_MEM_SET flag.
func TestMemDefault(t *testing.T) {
	ptr := func(v int) *int { return &v }
	flags := func(f ...string) *[]string { return &f }
	for _, tc := range []struct {
		name            string
		perNode, perCPU *int
		flags           *[]string
		want            [3]any // MemPerNodeMB, MemPerCPUMB, MemDefault
	}{
		{"--mem", ptr(64), nil, flags("JOB_WAS_RUNNING", "JOB_MEM_SET"), [3]any{64, 0, false}},
		{"the site's default per CPU", nil, ptr(1000), flags("JOB_WAS_RUNNING"), [3]any{0, 1000, true}},
		{"memory not consumable", nil, nil, flags("JOB_WAS_RUNNING"), [3]any{0, 0, false}},
		{"no flags from an older slurmrestd", ptr(64), nil, nil, [3]any{64, 0, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := 7
			j, err := fromV0038(&v0038.V0038JobResponseProperties{JobId: &id, MemoryPerNode: tc.perNode, MemoryPerCpu: tc.perCPU, Flags: tc.flags},
				func(s string) string { return s })
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, [3]any{j.MemPerNodeMB, j.MemPerCPUMB, j.MemDefault}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
