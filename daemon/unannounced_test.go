package daemon

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/exporter"
)

// TestUnannounced: a job whose cgroup exists for the grace time without any event of it
// is counted once and warned of (then at most every unannouncedWarnEvery); jobs the
// registry knows, by id or by their SLUID directory, jobs gone within the grace time and
// jobs there at the first look are not.
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
	u := newUnannounced("node1", reg, metrics, zerolog.New(&logs))
	dir := func(name string, id uint32) jobcgroup.Dir {
		return jobcgroup.Dir{Name: name, Path: "/sys/fs/cgroup/system.slice/slurmstepd.scope/" + name, JobID: id}
	}
	old, known, sluid := dir("job_1", 1), dir("job_5", 5), dir("s0KF3ZQ8Y4M7TD", 0)
	lost, brief, other := dir("job_7", 7), dir("job_8", 8), dir("s0KF3ZQ8Y4M7TE", 0)
	late := dir("job_9", 9)
	for _, step := range []struct {
		at   time.Duration
		dirs []jobcgroup.Dir
	}{
		{0, []jobcgroup.Dir{old}},
		{10 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, brief, other}},
		{20 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, other}},
		{39 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, brief, other}}, // brief is back: seen anew
		{40 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, brief, other}},
		{50 * time.Second, []jobcgroup.Dir{old, known, sluid, lost, brief, other}},
		{60 * time.Second, []jobcgroup.Dir{late}},
		{100 * time.Second, []jobcgroup.Dir{late}},
		{200 * time.Second, []jobcgroup.Dir{late}},
	} {
		u.look(at(step.at), step.dirs)
	}
	want := UnannouncedJobs{Total: 3, Recent: []uint32{7, 0, 9}, Last: tp(at(100 * time.Second))}
	if diff := cmp.Diff(want, u.report(), cmpopts.SortSlices(func(a, b uint32) bool { return a < b })); diff != "" {
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
