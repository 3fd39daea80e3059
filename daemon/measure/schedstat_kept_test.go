package measure

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// TestSchedstatKept reads real processes' threads through kept files: a thread that comes
// is found, a process that exits has its files closed, Close leaves none open.
func TestSchedstatKept(t *testing.T) {
	sleep := exec.Command("/bin/sleep", "1000")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	src := &schedstatSource{last: map[int]schedCount{}, kept: map[int]*schedProc{}}
	env := &Env{Host: hostfs.New("/")}
	read := func(pids ...int) (seen int) {
		r := &Read{Sample: &sample.Sample{Job: map[string]float64{}}, Spec: &Spec{Name: "job"}, env: env,
			notes: map[string]string{}, havePIDs: true, pids: pids}
		if err := src.Read(r); err != nil {
			t.Fatal(err)
		}
		return len(src.last)
	}
	self := os.Getpid()
	// This test's own threads: the Go runtime may start more at any time (never fewer),
	// so they are checked against what the read saw: every thread has its kept file, and
	// each process its task directory.
	type result struct{ Threads, Open int }
	release := make(chan struct{})
	defer close(release)
	prev := 0
	for _, step := range []struct {
		name string
		do   func()
		pids []int
		want func(seen int) result
	}{
		{"one thread", nil, []int{sleep.Process.Pid}, func(int) result { return result{1, 2} }},
		{"again, through the kept files", nil, []int{sleep.Process.Pid}, func(int) result { return result{1, 2} }},
		{"and this test's threads", nil, []int{sleep.Process.Pid, self}, func(seen int) result {
			return result{max(seen, 2), seen + 2}
		}},
		{"threads more", func() {
			// More goroutines locked to their threads than the process has threads:
			// the runtime must start new ones.
			for range prev + 1 {
				started := make(chan struct{})
				go func() {
					runtime.LockOSThread()
					close(started)
					<-release
				}()
				<-started
			}
		}, []int{sleep.Process.Pid, self}, func(seen int) result {
			return result{max(seen, prev+1), seen + 2}
		}},
		{"the sleep exited", func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }, []int{sleep.Process.Pid, self}, func(seen int) result {
			return result{seen, seen + 1}
		}},
		{"no longer the job's", nil, nil, func(int) result { return result{0, 0} }},
	} {
		if step.do != nil {
			step.do()
		}
		seen := read(step.pids...)
		got := result{seen, src.OpenFiles()}
		// The runtime starts and ends threads of this process at any time: a read that
		// saw them change between the listing and the keeping keeps the files at a later
		// read (as it must).
		for try := 0; try < 20 && slices.Contains(step.pids, self) && got != step.want(seen); try++ {
			seen = read(step.pids...)
			got = result{seen, src.OpenFiles()}
		}
		if diff := cmp.Diff(step.want(seen), got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
		prev = seen
	}
	read(self)
	if src.OpenFiles() == 0 {
		t.Fatal("nothing kept open")
	}
	if err := src.Close(); err != nil || src.OpenFiles() != 0 {
		t.Errorf("Close: %v, %d files open", err, src.OpenFiles())
	}
	read(self)
	if src.OpenFiles() != 0 {
		t.Errorf("read after Close kept %d files open", src.OpenFiles())
	}
}
