package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/hostfs"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/exporter"
)

// TestUnannounced: a job that has had a step's cgroup for the grace time without any
// event of it is counted once and warned of (then at most every unannouncedWarnEvery);
// jobs the registry knows, by id or by their SLUID directory, jobs with only the extern
// step (a prolog may be running), jobs gone within the grace time and jobs there at the
// first look are not. look says when to look again for a job that waits.
func TestUnannounced(t *testing.T) {
	reg := newReg(t, RegistryConfig{Dir: t.TempDir()})
	applyAll(t, reg, []applied{
		{wire.JobStart, ev(5, "", at(0)), at(0)},
		{wire.StepStart, ev(6, "batch", at(0), func(e *wire.Event) {
			e.Cgroups = map[string]string{"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/s0KF3ZQ8Y4M7TD"}
		}), at(0)},
	})
	prom := exporter.NewRegistry(exporter.RoleDaemon, "test")
	metrics := exporter.NewDaemon(prom)
	var logs bytes.Buffer
	u := newUnannounced(hostfs.FS{}, "node1", reg, metrics, zerolog.New(&logs), time.Now)
	dir := func(name string, id uint32) jobcgroup.Dir {
		return jobcgroup.Dir{Name: name, Path: "/sys/fs/cgroup/system.slice/slurmstepd.scope/" + name, JobID: id, Steps: true}
	}
	old, known, sluid := dir("job_1", 1), dir("job_5", 5), dir("s0KF3ZQ8Y4M7TD", 0)
	lost, brief, other := dir("job_7", 7), dir("job_8", 8), dir("s0KF3ZQ8Y4M7TE", 0)
	prolog := dir("job_11", 11)
	prolog.Steps = false
	late := dir("job_9", 9)
	for i, step := range []struct {
		at    time.Duration
		dirs  []jobcgroup.Dir
		again time.Duration
	}{
		{0, []jobcgroup.Dir{old}, 0},
		{10 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, brief, other, prolog}, 10 * time.Second},
		{14 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, other, prolog}, 6 * time.Second},
		{17 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, brief, other, prolog}, 3 * time.Second}, // brief is back: seen anew
		{20 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, brief, other, prolog}, 7 * time.Second},
		{27 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, prolog}, 0},
		{60 * time.Second, []jobcgroup.Dir{late, prolog}, 10 * time.Second},
		{100 * time.Second, []jobcgroup.Dir{late, prolog}, 0},
		{200 * time.Second, []jobcgroup.Dir{late, prolog}, 0},
	} {
		if again := u.look(at(step.at), step.dirs); again != step.again {
			t.Errorf("look #%d at %v: again in %v, want %v", i, step.at, again, step.again)
		}
		// Known jobs' directories are settled: their steps are not looked for again;
		// those of a job in its prolog are, every look.
		if i == 5 && (u.unsettled(known) || u.unsettled(sluid) || u.unsettled(lost) || !u.unsettled(prolog)) {
			t.Errorf("look #%d: unsettled known %v, SLUID %v, counted %v, in its prolog %v; want false, false, false, true",
				i, u.unsettled(known), u.unsettled(sluid), u.unsettled(lost), u.unsettled(prolog))
		}
	}
	want := UnannouncedJobs{Total: 3, Recent: []uint32{7, 0, 9}, Last: tp(at(100 * time.Second))}
	if diff := cmp.Diff(want, u.report()); diff != "" {
		t.Errorf("unannounced jobs (-want +got):\n%s", diff)
	}
	body := scrape(t, exporter.Handler(exporter.ServeOptions{Registry: prom, Log: zerolog.Nop()}))
	if !strings.Contains(body, "persyst_daemon_unannounced_jobs_total 3\n") {
		t.Errorf("scrape lacks persyst_daemon_unannounced_jobs_total 3:\n%s", body)
	}
	// One warning: the other two came within unannouncedWarnEvery of it.
	if n := strings.Count(logs.String(), "never heard of"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
	for _, want := range []string{`"level":"warn"`, "persyst check", "plugstack.conf"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("warning lacks %q:\n%s", want, logs.String())
		}
	}
	// After unannouncedWarnEvery, the next one warns again, with how many came since the last warning (the two held back and itself).
	logs.Reset()
	u.look(at(11*time.Minute), []jobcgroup.Dir{late, dir("job_10", 10)})
	u.look(at(12*time.Minute), []jobcgroup.Dir{late, dir("job_10", 10)})
	if !strings.Contains(logs.String(), `"jobs_since_warning":3`) || !strings.Contains(logs.String(), `"total":4`) {
		t.Errorf("second warning: %s", logs.String())
	}
	// Only what exists is kept.
	u.look(at(13*time.Minute), nil)
	if len(u.first)+len(u.counted) != 0 {
		t.Errorf("after every directory is gone, %d first-seen and %d counted are kept", len(u.first), len(u.counted))
	}
}

// TestUnannouncedLooksAgain: a job that may be unannounced is looked at again when its
// grace time is over, not at the next cycle; the second look counts it.
func TestUnannouncedLooksAgain(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/fs/cgroup/system.slice/slurmstepd.scope/job_3/step_batch"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := at(0)
	u := newUnannounced(hostfs.New(root), "node1", newReg(t, RegistryConfig{Dir: t.TempDir()}), nil, zerolog.Nop(), func() time.Time { return now })
	mounts := []jobcgroup.Mount{{Key: "unified", Path: "/sys/fs/cgroup", IsV2: true}}
	u.lookIn(nil) // the first look: nothing was there
	now = at(time.Second)
	u.lookIn(mounts)
	select {
	case d := <-u.again:
		if d != unannouncedGrace {
			t.Errorf("asked to look again in %v, want %v", d, unannouncedGrace)
		}
	default:
		t.Fatal("a job that may be unannounced: no look asked for")
	}
	now = at(time.Second + unannouncedGrace)
	u.lookIn(mounts)
	if got := u.report(); got.Total != 1 || got.Recent[0] != 3 {
		t.Errorf("after the grace time: %+v, want job 3", got)
	}
	if len(u.again) != 0 {
		t.Error("asked to look again with no job waiting")
	}
}

// TestUnannouncedCycleLooks: the cycle looks at the first cycle and then at most every
// unannouncedLookEvery (a clock set back looks at once); a job appearing between looks is
// found at the next.
func TestUnannouncedCycleLooks(t *testing.T) {
	root := t.TempDir()
	now := at(0)
	u := newUnannounced(hostfs.New(root), "node1", newReg(t, RegistryConfig{Dir: t.TempDir()}), nil, zerolog.Nop(), func() time.Time { return now })
	var looks []time.Duration
	mounts := func() []jobcgroup.Mount {
		looks = append(looks, now.Sub(at(0)))
		return []jobcgroup.Mount{{Key: "unified", Path: "/sys/fs/cgroup", IsV2: true}}
	}
	for s := range 12 {
		now = at(time.Duration(s) * time.Second)
		if s == 3 {
			if err := os.MkdirAll(filepath.Join(root, "sys/fs/cgroup/system.slice/slurmstepd.scope/job_3/step_batch"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		u.atCycle(mounts)
	}
	now = at(4 * time.Second) // set back
	u.atCycle(mounts)
	want := []time.Duration{0, unannouncedLookEvery, 2 * unannouncedLookEvery, 4 * time.Second}
	if diff := cmp.Diff(want, looks); diff != "" {
		t.Errorf("cycle looks at (-want +got):\n%s", diff)
	}
	if _, ok := u.first["job_3"]; !ok {
		t.Errorf("job_3, made between looks, not found at the next: first-seen %v", u.first)
	}
}
