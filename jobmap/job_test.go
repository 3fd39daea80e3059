package jobmap

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v0038 "github.com/persyst/persyst/jobmap/v0038"
	v0042 "github.com/persyst/persyst/jobmap/v0042"
	"github.com/persyst/persyst/slurmver"
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

// TestRequeueFacts: a requeued job's restart count, preemption time and requeue flags,
// from each source's form: scontrol's text (COMPLETING hides the flag: the count tells),
// the v0.0.42 data parser (state and flags) and v0.0.38.
func TestRequeueFacts(t *testing.T) {
	pre := time.Date(2026, 11, 26, 12, 0, 0, 0, time.Local)
	type facts struct {
		State          string
		Restarts       int
		Preempted      time.Time
		Requeued, Held bool
	}
	got := func(j *Job, err error) facts {
		if err != nil {
			t.Fatal(err)
		}
		return facts{j.State, j.Restarts, j.Preempted, j.Requeued, j.Held}
	}
	line := func(state, extra string) facts {
		return got(parseScontrolLine("JobId=5 JobState="+state+" Restarts=1 "+extra, slurmver.Release{}, nil))
	}
	id, cnt := int32(5), int32(2)
	v42 := func(states ...string) facts {
		return got(fromV0042(&v0042.V0042JobInfo{JobId: &id, JobState: &states, RestartCnt: &cnt,
			PreemptTime: &v0042.V0042Uint64NoValStruct{Set: ptrTo(true), Number: ptrTo(pre.Unix())}}, slurmver.Release{}, func(s string) string { return s }))
	}
	id38, cnt38, pt := 5, 1, pre.Unix()
	for _, tc := range []struct {
		name      string
		got, want facts
	}{
		{"scontrol, completing", line("COMPLETING", "PreemptTime=None"), facts{"COMPLETING", 1, time.Time{}, false, false}},
		{"scontrol, pending again", line("PENDING", "PreemptTime=2026-11-26T12:00:00"), facts{"PENDING", 1, pre.UTC(), false, false}},
		{"scontrol, held", line("REQUEUE_HOLD", ""), facts{"REQUEUE_HOLD", 1, time.Time{}, true, true}},
		{"v0.0.42, completing and requeued", v42("PENDING", "COMPLETING", "REQUEUED"), facts{"COMPLETING", 2, pre.UTC(), true, false}},
		{"v0.0.38", got(fromV0038(&v0038.V0038JobResponseProperties{JobId: &id38, JobState: ptrTo("REQUEUED"), RestartCnt: &cnt38, PreemptTime: &pt},
			func(s string) string { return s })), facts{"REQUEUED", 1, pre.UTC(), true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestHostCache: Slurm's node → host names are asked for once, kept for hostsTTL, and
// asked again for a name they lack (once per lookup) or when older; names known before
// serve while asking fails.
func TestHostCache(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := hostCache{now: func() time.Time { return now }}
	fetches := 0
	answer := map[string]string{"n1": "host1"}
	var fail error
	fetch := func() (map[string]string, error) {
		fetches++
		if fail != nil {
			return nil, fail
		}
		return answer, nil
	}
	type step struct {
		advance time.Duration
		fail    bool
		names   []string // looked up with one lookup function
		want    []string
		fetches int // in all, after the step
	}
	for i, s := range []step{
		{names: nil, fetches: 0}, // nothing looked up: nothing asked
		{names: []string{"n1", "n1"}, want: []string{"host1", "host1"}, fetches: 1},
		{advance: 30 * time.Second, names: []string{"n1"}, want: []string{"host1"}, fetches: 1},
		{names: []string{"n9", "n9"}, want: []string{"n9", "n9"}, fetches: 2}, // unknown: asked once
		{advance: hostsTTL, fail: true, names: []string{"n1"}, want: []string{"host1"}, fetches: 3},
		{names: []string{"n1"}, want: []string{"host1"}, fetches: 4}, // still old: asked again
	} {
		now = now.Add(s.advance)
		fail = nil
		if s.fail {
			fail = errors.New("sinfo: slurmctld not answering")
		}
		look := c.lookup(fetch)
		var got []string
		for _, n := range s.names {
			got = append(got, look(n))
		}
		if diff := cmp.Diff(s.want, got); diff != "" || fetches != s.fetches {
			t.Errorf("step %d: names (-want +got):\n%s fetches %d, want %d", i, diff, fetches, s.fetches)
		}
	}
}
