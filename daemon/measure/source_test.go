package measure

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// TestRegistry: every source has a unique name and a factory; a metric of sample's
// vocabulary keeps its kind wherever a source lists it, and each is produced by exactly
// one source (the vocabulary has no metric nobody measures).
func TestRegistry(t *testing.T) {
	names := map[string]bool{}
	producer := map[string]string{}
	for _, r := range Sources() {
		if r.Name == "" || r.New == nil || names[r.Name] {
			t.Errorf("registration %+v: want a unique name and a factory", r.Name)
		}
		names[r.Name] = true
		for _, m := range r.Metrics {
			if v, ok := sample.Lookup(m.Name); ok && v.Kind != m.Kind {
				t.Errorf("%s: %s is a %v, the vocabulary says %v", r.Name, m.Name, m.Kind, v.Kind)
			}
			if p, dup := producer[m.Name]; dup {
				t.Errorf("%s is produced by %s and %s", m.Name, p, r.Name)
			}
			producer[m.Name] = r.Name
		}
	}
	for _, n := range sample.Names() {
		if producer[n] == "" {
			t.Errorf("vocabulary metric %s: no source produces it", n)
		}
	}
	if err := CheckEnable(map[string]bool{"cgroup": false}, "", nil); err != nil {
		t.Errorf("CheckEnable(cgroup): %v", err)
	}
	err := CheckEnable(map[string]bool{"cgruop": false, "perf": true}, "persyst.conf", map[string]int{"perf": 2, "cgruop": 7})
	if want := `persyst.conf:7: MetricSource.cgruop: no metric source "cgruop"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckEnable(cgruop): error %v, want %q", err, want)
	}
}

// TestSourceOff: a source turned off reads nothing and says so for each of its metrics;
// the others go on.
func TestSourceOff(t *testing.T) {
	f := newFakeJob(t)
	f.set(t, 1_000_000, 0, 100, 100)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	env := &Env{
		Host: hostfs.New(f.root), Stats: cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}),
		Enable: map[string]bool{"cgroup": false}, Log: zerolog.Nop(), Now: func() time.Time { return now },
	}
	m, err := Open(env, Spec{Name: "job 1", CPUs: []int{0}, StatCgroups: map[string]string{"unified": f.dir}, ProcCgroup: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	f.set(t, 3_000_000, 0, 200, 200)
	s, err := m.Read(sample.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Job[sample.CPUUserSeconds]; ok {
		t.Errorf("cpu_user_seconds measured with the cgroup source off: %v", s.Job)
	}
	if _, ok := s.Job[sample.Processes]; !ok {
		t.Errorf("processes not measured: the procio source is on")
	}
	sum := m.Summary()
	for _, n := range cgroupNames() {
		if got, want := sum.NotMeasured[n], "not measured: the cgroup source is turned off"; got != want {
			t.Errorf("NotMeasured[%s] = %q, want %q", n, got, want)
		}
	}
	for _, n := range cgroupNames() {
		if v, ok := sum.Totals[n]; ok {
			t.Errorf("total of %s = %v with its source off", n, v)
		}
	}
}

// TestProcsSince: a process born since the job began counts what it did before the
// meter's first read (a task's first write, made before the read came); one running
// before the job began (Spec.ProcsSince) counts from that read. Fixture /proc, fake clocks.
func TestProcsSince(t *testing.T) {
	f := newFakeJob(t)
	f.set(t, 0, 0, 0, 0)
	proc := func(pid int, start uint64, wchar uint64) {
		t.Helper()
		dir := filepath.Join(f.root, "proc", strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (p) S 1 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, start)
		io := fmt.Sprintf("rchar: 0\nwchar: %d\nsyscr: 0\nsyscw: %d\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n", wchar, wchar)
		for name, s := range map[string]string{"stat": stat, "io": io} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The clocks: at now, the node has been up 1000 s; the job began 2 s before now,
	// at 998 s after boot (tick 99800).
	now := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	began := now.Add(-2 * time.Second)
	tests := []struct {
		name  string
		since time.Time
		want  float64 // write_chars after the second read
	}{
		{"the job's processes count from birth", began, 5 + 100 + 10},
		{"restored: all count from the first read", now, 100 + 10},
		{"no start given: all count from birth", time.Time{}, 5 + 100 + 1000 + 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proc(10, 99800, 5)    // the task, born as the job began, wrote 5 before the first read
			proc(11, 99799, 1000) // running 10 ms before the job began
			f.write(t, "cgroup.procs", "10\n11\n")
			clock := now
			env := &Env{
				Host: hostfs.New(f.root), Stats: cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}),
				Enable: map[string]bool{"cgroup": false, "schedstat": false}, Log: zerolog.Nop(),
				Now:    func() time.Time { return clock },
				Uptime: func() (time.Duration, error) { return 1000*time.Second + clock.Sub(now), nil },
			}
			m, err := Open(env, Spec{Name: "job 1", CPUs: []int{0}, ProcCgroup: f.dir, ProcsSince: tc.since})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			clock = clock.Add(time.Second)
			proc(10, 99800, 105)
			proc(11, 99799, 1010)
			s, err := m.Read(sample.Cycle)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Job[sample.WriteChars]; got != tc.want {
				t.Errorf("write_chars = %v, want %v", got, tc.want)
			}
		})
	}
}
