package measure

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/measure/cgstats"
	"github.com/persyst/persyst/daemon/measure/perfcg"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/perfevents"
	"github.com/persyst/persyst/sample"
)

func TestDelta(t *testing.T) {
	c := func(raw, en, run uint64) perfcg.Count {
		return perfcg.Count{Available: true, Raw: raw, Enabled: en, Running: run}
	}
	tests := []struct {
		name      string
		cur, prev perfcg.Count
		want      float64
		low       bool
	}{
		{"not multiplexed", c(1500, 2000, 2000), c(500, 1000, 1000), 1000, false},
		{"half the interval on the PMU", c(1500, 3000, 2000), c(1000, 1000, 1000), 1000, false},
		{"quarter: extrapolated and flagged", c(1250, 5000, 2000), c(1000, 1000, 1000), 1000, true},
		{"enabled but never running", c(10, 2000, 1000), c(10, 1000, 1000), 0, true},
		{"idle CPU", c(0, 0, 0), c(0, 0, 0), 0, false},
		{"counter went backwards", c(5, 10, 10), c(9, 5, 5), 0, false},
	}
	for _, tc := range tests {
		got, low := delta(tc.cur, tc.prev, 0.5)
		if got != tc.want || low != tc.low {
			t.Errorf("%s: delta = %v, low %v; want %v, %v", tc.name, got, low, tc.want, tc.low)
		}
	}
}

// fakeJob is a cgroup v2 job directory under a temporary root, with files the test
// rewrites between reads.
type fakeJob struct {
	root, dir string
}

func newFakeJob(t testing.TB) *fakeJob {
	root := t.TempDir()
	dir := "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"
	if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fakeJob{root: root, dir: dir}
	f.write(t, "cgroup.procs", "")
	return f
}

func (f *fakeJob) write(t testing.TB, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.root, f.dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeJob) set(t testing.TB, userUs, sysUs, mem, peak int) {
	t.Helper()
	f.write(t, "cpu.stat", "usage_usec "+itoa(userUs+sysUs)+"\nuser_usec "+itoa(userUs)+"\nsystem_usec "+itoa(sysUs)+"\n")
	f.write(t, "memory.current", itoa(mem)+"\n")
	f.write(t, "memory.peak", itoa(peak)+"\n")
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestMeterFixture drives a Meter over fake cgroup files with a fake clock: samples hold
// counter increases and gauges, totals add counters, keep the last gauge and the highest
// peak, and unmeasured metrics are named with a reason, never reported as 0.
func TestMeterFixture(t *testing.T) {
	f := newFakeJob(t)
	f.set(t, 1_000_000, 0, 100, 100)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	env := &Env{
		Host:        hostfs.New(f.root),
		Stats:       cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}),
		Log:         zerolog.Nop(),
		Now:         func() time.Time { return now },
		SampleBytes: 1, // merge as soon as there are more than 2 samples
		Events:      perfevents.SoftwareEvents()[:1],
	}
	m, err := Open(env, Spec{
		Name: "job 42", CPUs: []int{0, 1}, PerfWhy: "test: no perf",
		StatCgroups: map[string]string{"unified": f.dir}, ProcCgroup: f.dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Samples()); n != 0 {
		t.Fatalf("%d samples after the baseline, want 0", n)
	}
	steps := []struct {
		user, sys, mem, peak int
	}{
		{3_000_000, 500_000, 300, 400}, // +2 s user, +0.5 s system
		{4_000_000, 500_000, 200, 400}, // +1 s user
		{7_000_000, 1_500_000, 50, 900},
	}
	var got []map[string]float64
	for _, s := range steps {
		now = now.Add(time.Minute)
		f.set(t, s.user, s.sys, s.mem, s.peak)
		smp, err := m.Read(sample.Cycle)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if smp.Seconds != 60 {
			t.Errorf("sample interval %v s, want 60", smp.Seconds)
		}
		if r, ok := smp.Rate(sample.CPUUserSeconds); !ok || r != smp.Job[sample.CPUUserSeconds]/60 {
			t.Errorf("Rate(cpu_user_seconds) = %v, %v", r, ok)
		}
		got = append(got, map[string]float64{
			sample.CPUUserSeconds: smp.Job[sample.CPUUserSeconds], sample.CPUSystemSeconds: smp.Job[sample.CPUSystemSeconds],
			sample.MemBytes: smp.Job[sample.MemBytes], sample.MemPeakBytes: smp.Job[sample.MemPeakBytes],
		})
	}
	want := []map[string]float64{
		{sample.CPUUserSeconds: 2, sample.CPUSystemSeconds: 0.5, sample.MemBytes: 300, sample.MemPeakBytes: 400},
		{sample.CPUUserSeconds: 1, sample.CPUSystemSeconds: 0, sample.MemBytes: 200, sample.MemPeakBytes: 400},
		{sample.CPUUserSeconds: 3, sample.CPUSystemSeconds: 1, sample.MemBytes: 50, sample.MemPeakBytes: 900},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	sum := m.Summary()
	wantTotals := map[string]float64{sample.CPUUserSeconds: 6, sample.CPUSystemSeconds: 1.5, sample.MemBytes: 50, sample.MemPeakBytes: 900}
	gotTotals := map[string]float64{}
	for k := range wantTotals {
		gotTotals[k] = sum.Totals[k]
	}
	if diff := cmp.Diff(wantTotals, gotTotals); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
	// Over the budget the first two samples were merged: the job's whole life is kept.
	if sum.Samples != 2 || sum.Halved != 1 {
		t.Errorf("kept %d samples, halved %d times; want 2 and 1", sum.Samples, sum.Halved)
	}
	merged := m.Samples()
	wantMerged := []map[string]float64{
		{sample.CPUUserSeconds: 3, sample.CPUSystemSeconds: 0.5, sample.MemBytes: 200, sample.MemPeakBytes: 400},
		{sample.CPUUserSeconds: 3, sample.CPUSystemSeconds: 1, sample.MemBytes: 50, sample.MemPeakBytes: 900},
	}
	for i, x := range merged {
		for k, w := range wantMerged[i] {
			if x.Job[k] != w {
				t.Errorf("merged sample %d: %s = %v, want %v", i, k, x.Job[k], w)
			}
		}
	}
	if merged[0].Seconds != 120 {
		t.Errorf("merged sample covers %v s, want 120", merged[0].Seconds)
	}
	if sum.Seconds != 180 || sum.CPUs != "0-1" {
		t.Errorf("summary seconds %v CPUs %q, want 180 and 0-1", sum.Seconds, sum.CPUs)
	}
	for name, want := range map[string]string{
		"task-clock":           "test: no perf",
		sample.NetRxBytes:      "node counters are not attributed",
		sample.MajorPageFaults: "memory.stat",
	} {
		if why := sum.NotMeasured[name]; !strings.Contains(why, want) {
			t.Errorf("not measured %s: %q, want it to say %q", name, why, want)
		}
		if _, ok := sum.Totals[name]; ok {
			t.Errorf("%s has a total although it was not measured", name)
		}
	}
	// The job's cgroup vanishes: an ordinary event, and later notes do not claim that
	// metrics measured before were never measured.
	if err := os.RemoveAll(filepath.Join(f.root, f.dir)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := m.Read(sample.End); err != nil {
		t.Errorf("read after the cgroup vanished: %v", err)
	}
	sum = m.Summary()
	if _, ok := sum.NotMeasured[sample.CPUUserSeconds]; ok || !sum.Ended {
		t.Errorf("after the end: not measured %q, ended %v", sum.NotMeasured[sample.CPUUserSeconds], sum.Ended)
	}
	if sum.Totals[sample.CPUUserSeconds] != 6 {
		t.Errorf("total user time changed to %v after the cgroup vanished", sum.Totals[sample.CPUUserSeconds])
	}
}

// TestNodeNetworkOnlyWhenExclusive: node network counters are attributed to a job only
// over intervals in which it had the node to itself.
func TestNodeNetworkOnlyWhenExclusive(t *testing.T) {
	f := newFakeJob(t)
	f.set(t, 0, 0, 1, 1)
	netdev := func(rx, tx int) {
		s := "Inter-|   Receive                                                |  Transmit\n" +
			" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n" +
			"    lo: 999 9 0 0 0 0 0 0 999 9 0 0 0 0 0 0\n" +
			"  eth0: " + itoa(rx) + " 10 0 0 0 0 0 0 " + itoa(tx) + " 20 0 0 0 0 0 0\n"
		if err := os.MkdirAll(filepath.Join(f.root, "proc/net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.root, "proc/net/dev"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	netdev(1000, 2000)
	now := time.Unix(1_800_000_000, 0)
	alone := true
	env := &Env{
		Host: hostfs.New(f.root), Stats: cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}),
		Log: zerolog.Nop(), Now: func() time.Time { return now },
	}
	m, err := Open(env, Spec{Name: "job 1", CPUs: []int{0}, StatCgroups: map[string]string{"unified": f.dir},
		Exclusive: func() bool { return alone }})
	if err != nil {
		t.Fatal(err)
	}
	var got []any
	for _, step := range []struct {
		rx, tx int
		alone  bool
	}{{1500, 2100, true}, {2500, 2200, false}, {3000, 2300, true}, {3100, 2400, true}} {
		now = now.Add(time.Second)
		netdev(step.rx, step.tx)
		alone = step.alone
		s, _ := m.Read(sample.Cycle)
		if v, ok := s.Job[sample.NetRxBytes]; ok {
			got = append(got, v, s.Job[sample.NetTxBytes])
		} else {
			got = append(got, "-")
		}
	}
	// Shared during the 2nd interval; the 3rd starts alone only at its end, so it is
	// not attributed either.
	want := []any{500.0, 100.0, "-", "-", 100.0, 100.0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("network per interval (-want +got):\n%s", diff)
	}
	if why := m.Summary().NotMeasured[sample.IBRxBytes]; !strings.Contains(why, "InfiniBand") {
		t.Errorf("ib_rcv_bytes: %q, want the reason to say there is no InfiniBand", why)
	}
}

// TestStoreBudget: a long job stays within its sample budget, keeps its whole life (first
// and last times) and its counter totals, at a coarser resolution.
func TestStoreBudget(t *testing.T) {
	st := newStore(64<<10, []int{0, 1}, []string{"task-clock"}, sample.KindOf)
	start := time.Unix(1_800_000_000, 0)
	var sumUser, sumTC float64
	for i := 1; i <= 100_000; i++ {
		s := sample.Sample{Time: start.Add(time.Duration(i) * time.Second), Reason: sample.Cycle, Seconds: 1,
			Job: map[string]float64{sample.CPUUserSeconds: float64(i % 7), sample.MemBytes: float64(i), sample.MemPeakBytes: float64(i)},
			CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": 1}}, {CPU: 1, Values: map[string]float64{"task-clock": 2}}}}
		sumUser += float64(i % 7)
		sumTC += 3
		st.add(s, st.index(s.Job, nil, nil))
	}
	if got := len(st.samples) * st.bytesPer(); got > 64<<10 {
		t.Errorf("samples use ~%d bytes, over the 64 KiB budget", got)
	}
	all := st.all()
	var gotUser, gotTC, secs float64
	for _, s := range all {
		gotUser += s.Job[sample.CPUUserSeconds]
		secs += s.Seconds
		for _, c := range s.CPU {
			gotTC += c.Values["task-clock"]
		}
	}
	last := all[len(all)-1]
	if gotUser != sumUser || gotTC != sumTC || secs != 100_000 || last.Job[sample.MemBytes] != 100_000 || last.Job[sample.MemPeakBytes] != 100_000 {
		t.Errorf("after merging to %d samples (halved %d times): user %v/%v, task-clock %v/%v, seconds %v, last mem %v peak %v",
			len(all), st.halved, gotUser, sumUser, gotTC, sumTC, secs, last.Job[sample.MemBytes], last.Job[sample.MemPeakBytes])
	}
	if !last.Time.Equal(start.Add(100_000 * time.Second)) {
		t.Errorf("last sample at %v, want the job's last read", last.Time)
	}
	// The totals are of every sample, whatever was merged: counters summed, the gauge's
	// last value, the peak's highest; per CPU, only what was measured.
	wantTotals := map[string]float64{sample.CPUUserSeconds: sumUser, sample.MemBytes: 100_000, sample.MemPeakBytes: 100_000}
	if diff := cmp.Diff(wantTotals, st.totalsMap()); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"task-clock": 200_000}, st.cpuTotalsMap(1)); diff != "" {
		t.Errorf("CPU 1 totals (-want +got):\n%s", diff)
	}
	st2 := newStore(0, []int{0}, []string{"task-clock", "cycles"}, sample.KindOf)
	s := sample.Sample{Seconds: 1, CPU: []sample.CPUValues{{CPU: 0, Values: map[string]float64{"task-clock": 5}}}}
	st2.add(s, nil)
	if diff := cmp.Diff(map[string]float64{"task-clock": 5}, st2.cpuTotalsMap(0)); diff != "" {
		t.Errorf("an event never measured has no total, not 0 (-want +got):\n%s", diff)
	}
}

// TestFIFOInCgroup: a FIFO where a cgroup file should be (a user's trick in a step's
// cgroup directory) is refused, not read: the meter never blocks on it, and the metric
// is not measured, with the reason.
func TestFIFOInCgroup(t *testing.T) {
	f := newFakeJob(t)
	f.set(t, 1_000_000, 0, 100, 100)
	p := filepath.Join(f.root, f.dir, "memory.current")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	env := &Env{Host: hostfs.New(f.root), Stats: cgstats.NewReader(hostfs.New(f.root), cgstats.Options{}), Log: zerolog.Nop(),
		Now: func() time.Time { return now }}
	done := make(chan *Meter, 1)
	go func() {
		m, err := Open(env, Spec{Name: "job 1", CPUs: []int{0}, StatCgroups: map[string]string{"unified": f.dir}, ProcCgroup: f.dir})
		if err != nil {
			t.Error(err)
		}
		now = now.Add(time.Minute)
		if m != nil {
			m.Read(sample.Cycle)
		}
		done <- m
	}()
	select {
	case m := <-done:
		if m == nil {
			return
		}
		sum := m.Summary()
		if _, ok := sum.Totals[sample.MemBytes]; ok {
			t.Errorf("mem_bytes measured from a FIFO")
		}
		if why := sum.NotMeasured[sample.MemBytes]; why == "" {
			t.Errorf("mem_bytes not named as not measured")
		}
		if _, ok := sum.Totals[sample.CPUUserSeconds]; !ok {
			t.Errorf("cpu_user_seconds not measured beside the FIFO")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the meter blocked on a FIFO in the cgroup directory")
	}
}
