package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/internal/testenv"
)

// TestMeasurerRefind runs measurement cycles over a job's real cgroup v1 directories that
// come and go while it runs: a cgroup made without an event is picked up within
// refindEvery, one made with a step start at the next cycle; a cgroup removed at a step
// end, or without an event, is dropped and its kept statistics files are closed.
func TestMeasurerRefind(t *testing.T) {
	testenv.Root(t, "creates cgroups")
	const cg = "/sys/fs/cgroup"
	for _, c := range []string{"cpuacct", "memory", "pids"} {
		if _, err := os.Stat(filepath.Join(cg, c)); err != nil {
			testenv.Unavailable(t, fmt.Sprintf("no cgroup v1 %s hierarchy: %v", c, err))
		}
	}
	node := fmt.Sprintf("refind%d", os.Getpid())
	const id = 960001
	dir := func(c string) string {
		return filepath.Join(cg, c, "slurm_"+node, "uid_0", "job_"+strconv.Itoa(id))
	}
	rmdir := func(t *testing.T, d string) {
		for range 100 {
			if err := unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cannot remove %s", d)
	}
	t.Cleanup(func() {
		for _, c := range []string{"cpuacct", "memory", "pids"} {
			for _, d := range []string{dir(c), filepath.Dir(dir(c)), filepath.Dir(filepath.Dir(dir(c)))} {
				rmdir(t, d)
			}
		}
	})
	mk := func(c string) func(t *testing.T) {
		return func(t *testing.T) {
			if err := os.MkdirAll(dir(c), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("cpuacct")(t)

	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	reg := newReg(t, RegistryConfig{Node: node})
	m, err := NewMeasurer(MeasureConfig{Root: "/", Cycle: time.Second, CgroupParent: "persyst_" + node}, reg, node, zerolog.Nop(), clock)
	if err != nil {
		t.Fatal(err)
	}
	if m.owned.parent != "" {
		t.Cleanup(func() { rmdir(t, m.host.Path(m.owned.parent)) })
	}
	// Started a while ago: the meter does not wait for a cpuset cgroup (cpusetWait).
	started := now.Add(-time.Minute)
	j, err := reg.Apply(wire.JobStart, &wire.Event{JobID: id, UID: 0, Persyst: wire.On, Time: started}, started)
	if err != nil {
		t.Fatal(err)
	}
	prepareNow(m, j)
	t.Cleanup(func() { m.end(id) })
	m.cycle()
	if measured(m, id) == nil {
		t.Fatal("job not measured")
	}
	meter := measured(m, id).Meter()

	// Slurm's hierarchies the meter reads (persyst's own v2 cgroup left out), and how
	// many statistics files it keeps open per hierarchy.
	type state struct {
		Keys  []string
		Files int
	}
	perDir := map[string]int{} // files kept open for a hierarchy alone, learnt on the way
	files0 := meter.OpenFiles()
	got := func() state {
		var s state
		for k := range meter.Spec().StatCgroups {
			if k != "unified" {
				s.Keys = append(s.Keys, k)
			}
		}
		slices.Sort(s.Keys)
		s.Files = meter.OpenFiles() - files0
		return s
	}
	for _, step := range []struct {
		name   string
		do     func(t *testing.T)
		cycles int
		after  time.Duration // clock step per cycle
		want   func() state
	}{
		{"memory cgroup made, no event, 1 s later", mk("memory"), 1, time.Second, func() state { return state{Keys: []string{"cpuacct"}} }},
		{"10 s later", nil, 1, refindEvery, func() state {
			perDir["memory"] = meter.OpenFiles() - files0
			return state{Keys: []string{"cpuacct", "memory"}, Files: perDir["memory"]}
		}},
		{"pids cgroup made with a step start", func(t *testing.T) { mk("pids")(t); prepareNow(m, j) }, 1, time.Second, func() state {
			perDir["pids"] = meter.OpenFiles() - files0 - perDir["memory"]
			return state{Keys: []string{"cpuacct", "memory", "pids"}, Files: perDir["memory"] + perDir["pids"]}
		}},
		{"pids cgroup removed at a step end", func(t *testing.T) { rmdir(t, dir("pids")); _ = m.StepEnded(context.Background(), j, "0") }, 1, time.Second, func() state {
			return state{Keys: []string{"cpuacct", "memory"}, Files: perDir["memory"]}
		}},
		{"memory cgroup removed without an event: gone at a read, dropped at the next", func(t *testing.T) { rmdir(t, dir("memory")) }, 2, time.Second, func() state {
			return state{Keys: []string{"cpuacct"}}
		}},
	} {
		if step.do != nil {
			step.do(t)
		}
		for range step.cycles {
			now = now.Add(step.after)
			m.cycle()
		}
		g := got()
		if diff := cmp.Diff(step.want(), g); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
	}
	t.Logf("statistics files kept open: %d for cpuacct and persyst's own cgroup, %v by hierarchy", files0, perDir)
	if perDir["memory"] <= 0 || perDir["pids"] <= 0 {
		t.Errorf("files kept open for memory %d, pids %d: want some", perDir["memory"], perDir["pids"])
	}
}
