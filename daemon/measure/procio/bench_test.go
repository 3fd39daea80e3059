package procio

import (
	"strconv"
	"testing"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

// BenchmarkUpdate reads N sleeping processes per Update (after a first Update, so the
// processes are known and only their deltas are computed). ns/op is per Update of all N.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{1, 16, 128} {
		b.Run("procs="+strconv.Itoa(n), func(b *testing.B) {
			pids := startSleepers(b, n)
			tr := NewTracker(hostfs.New("/"), TrackerOptions{})
			if _, got, err := tr.Update(pids); err != nil || got != n {
				b.Fatalf("first Update: %d processes, %v", got, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, got, err := tr.Update(pids); err != nil || got != n {
					b.Fatalf("Update: %d processes, %v", got, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/proc")
		})
	}
}

// BenchmarkListProcs lists a fake job cgroup tree of 3 steps with 4 tasks each.
func BenchmarkListProcs(b *testing.B) {
	root := b.TempDir()
	job := "/sys/fs/cgroup/job_1"
	pid := 100
	for s := range 3 {
		for k := range 4 {
			d := root + job + "/step_" + strconv.Itoa(s) + "/user/task_" + strconv.Itoa(k)
			testenv.Write(b, d+"/cgroup.procs", strconv.Itoa(pid)+"\n"+strconv.Itoa(pid+1)+"\n")
			testenv.Write(b, d+"/memory.current", "0\n")
			pid += 2
		}
		testenv.Write(b, root+job+"/step_"+strconv.Itoa(s)+"/cgroup.procs", "")
		testenv.Write(b, root+job+"/step_"+strconv.Itoa(s)+"/user/cgroup.procs", "")
	}
	testenv.Write(b, root+job+"/cgroup.procs", "")
	fsys := hostfs.New(root)
	b.ReportAllocs()
	for b.Loop() {
		if pids, err := ListProcs(fsys, job); err != nil || len(pids) != 24 {
			b.Fatalf("%d pids, %v", len(pids), err)
		}
	}
}
