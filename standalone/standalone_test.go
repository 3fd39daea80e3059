package standalone

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestVisibleGPUs: the GPUs a command may use, as CUDA's and ROCm's variables name them:
// CUDA_VISIBLE_DEVICES first, else ROCR_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES, whose
// indices count the AMD GPUs alone; none set: every GPU.
func TestVisibleGPUs(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		ids  []string
		all  bool
	}{
		{"none set", nil, nil, true},
		{"CUDA's", map[string]string{"CUDA_VISIBLE_DEVICES": "1, GPU-aaaa", "ROCR_VISIBLE_DEVICES": "0"}, []string{"1", "GPU-aaaa"}, false},
		{"CUDA's, empty", map[string]string{"CUDA_VISIBLE_DEVICES": ""}, nil, false},
		{"ROCm's", map[string]string{"ROCR_VISIBLE_DEVICES": "0,2"}, []string{"amd:0", "amd:2"}, false},
		{"HIP's, a UUID", map[string]string{"HIP_VISIBLE_DEVICES": "GPU-4b3f2a1c"}, []string{"GPU-4b3f2a1c"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ids, all := visibleGPUsOf(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			if d := cmp.Diff(c.ids, ids); d != "" || all != c.all {
				t.Errorf("all %v, want %v; ids (-want +got):\n%s", all, c.all, d)
			}
		})
	}
}
