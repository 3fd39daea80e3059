package digest

import "github.com/persyst/persyst/properties"

// A job given MIG instances, slices of a GPU, is told of its slices where a finding
// means them: a slice that ran nothing holds a share of a GPU others could use, and a
// slice whose memory went mostly unused calls for a smaller slice, not "a smaller GPU".

// sliceRecommendations replace the catalog's recommendations of GPU properties for a job
// whose GPUs are all MIG instances.
var sliceRecommendations = map[string]string{
	"gpu_unused": "A MIG slice is a share of a GPU given to the job alone: one that ran nothing held it from other jobs. " +
		"Request slices only for the steps that use them, or make the program use each (CUDA_VISIBLE_DEVICES names the job's slices).",
	"gpu_memory_unused": "The job used under a tenth of its MIG slices' memory: a smaller slice (a MIG profile with less memory, " +
		"where the site offers one) would serve it as well and leave the larger ones to jobs that need them.",
}

// gpuWords is how a digest names a job's GPUs: how many on the node (0: not known, several
// nodes) and the noun ("GPU", "MIG slice").
type gpuWords struct {
	n    int
	noun string
}

// allSlices says whether every GPU of the report is a MIG instance.
func allSlices(r *Report) bool { return r.GPUs > 0 && r.GPUSlices == r.GPUs }

func gpuNoun(r Report) gpuWords {
	if allSlices(&r) {
		return gpuWords{n: r.GPUs, noun: "MIG slice"}
	}
	return gpuWords{n: r.GPUs, noun: "GPU"}
}

// SliceWords gives a job on MIG slices the slices' recommendations (a report rebuilt from
// elsewhere, Slurm's accounting, takes the catalog's and then these).
func SliceWords(r *Report) {
	if !allSlices(r) {
		return
	}
	for _, rs := range [][]properties.Result{r.Findings, r.Properties} {
		for i := range rs {
			if rec, ok := sliceRecommendations[rs[i].Key]; ok {
				rs[i].Recommendation = rec
			}
		}
	}
}
