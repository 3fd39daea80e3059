package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/internal/testenv"
)

var t0 = time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func tp(t time.Time) *time.Time { return &t }

func intp(i int) *int { return &i }

// applied is one Apply call.
type applied struct {
	kind wire.Kind
	ev   wire.Event
	now  time.Time
}

func ev(job uint32, step string, tm time.Time, mod ...func(e *wire.Event)) wire.Event {
	e := wire.Event{JobID: job, StepID: step, UID: 1000, GID: 1000, Persyst: wire.On, Time: tm}
	for _, m := range mod {
		m(&e)
	}
	return e
}

func newReg(t testing.TB, cfg RegistryConfig) *Registry {
	t.Helper()
	if cfg.Node == "" {
		cfg.Node = "node1"
	}
	r, err := OpenRegistry(cfg, zerolog.Nop())
	if err != nil {
		t.Fatalf("OpenRegistry: %v", err)
	}
	return r
}

func applyAll(t *testing.T, r *Registry, seq []applied) {
	t.Helper()
	for i, a := range seq {
		e := a.ev
		j, err := r.Apply(a.kind, &e, a.now)
		if err != nil {
			t.Fatalf("Apply #%d %s: %v", i, a.kind, err)
		}
		if j == nil || j.JobID != a.ev.JobID {
			t.Fatalf("Apply #%d %s returned job %+v, want job %d", i, a.kind, j, a.ev.JobID)
		}
	}
}

func TestRegistryApply(t *testing.T) {
	tests := []struct {
		name  string
		users func(uint32) string
		seq   []applied
		want  []*Job
	}{
		{
			name: "full lifecycle",
			seq: []applied{
				{wire.JobStart, ev(42, "", at(0), func(e *wire.Event) {
					e.User, e.Node, e.NNodes, e.NCPUs, e.JobMemMB = "alice", "node1", 2, 4, 4096
					e.ArrayJobID, e.ArrayTaskID = 40, 2
					e.Cgroups = map[string]string{"freezer": "/sys/fs/cgroup/freezer/slurm/uid_1000/job_42"}
				}), at(0)},
				{wire.StepStart, ev(42, "batch", at(time.Second), func(e *wire.Event) {
					e.JobCores, e.StepCores, e.StepMemMB, e.LocalTasks, e.TotalTasks = "0-3", "0-1", 1024, 1, 1
					e.Cgroups = map[string]string{"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"}
				}), at(time.Second)},
				{wire.StepEnd, ev(42, "batch", at(10*time.Second), func(e *wire.Event) { e.ExitStatus = intp(768) }), at(10 * time.Second)},
				{wire.StepStart, ev(42, "0", at(11*time.Second), func(e *wire.Event) { e.LocalTasks, e.TotalTasks = 2, 4 }), at(11 * time.Second)},
				{wire.StepEnd, ev(42, "0", at(12*time.Second), func(e *wire.Event) { e.ExitStatus = intp(9) }), at(12 * time.Second)},
				{wire.JobEnd, ev(42, "", at(20*time.Second), func(e *wire.Event) { e.ExitStatus = intp(768) }), at(21 * time.Second)},
			},
			want: []*Job{{
				JobID: 42, ArrayJobID: 40, ArrayTaskID: 2, UID: 1000, GID: 1000, User: "alice",
				Node: "node1", NodeID: 0, NNodes: 2, State: Ended, Persyst: wire.On, NCPUs: 4,
				Cores: "0-3", MemMB: 4096,
				Cgroups: map[string]string{
					"freezer": "/sys/fs/cgroup/freezer/slurm/uid_1000/job_42",
					"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42",
				},
				Started: at(0), Ended: tp(at(20 * time.Second)), JobStartSeen: true, JobEndSeen: true,
				Steps: []*Step{
					{ID: "batch", State: Ended, Started: at(time.Second), Ended: tp(at(10 * time.Second)), LocalTasks: 1, TotalTasks: 1,
						Cores: "0-1", MemMB: 1024, ExitStatus: intp(768), Exit: "3:0"},
					{ID: "0", State: Ended, Started: at(11 * time.Second), Ended: tp(at(12 * time.Second)), LocalTasks: 2, TotalTasks: 4,
						ExitStatus: intp(9), Exit: "0:9"},
				},
				Updated: at(21 * time.Second),
			}},
		},
		{
			name: "running step",
			seq: []applied{
				{wire.StepStart, ev(7, "extern", at(0)), at(0)},
			},
			want: []*Job{{
				JobID: 7, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(0),
				Steps:   []*Step{{ID: "extern", State: Running, Started: at(0)}},
				Updated: at(0),
			}},
		},
		{
			name: "opted out stays opted out after job_end",
			seq: []applied{
				{wire.JobStart, ev(5, "", at(0)), at(0)},
				{wire.StepStart, ev(5, "batch", at(time.Second), func(e *wire.Event) { e.Persyst = wire.Off }), at(time.Second)},
				{wire.StepEnd, ev(5, "batch", at(2*time.Second)), at(2 * time.Second)},
				{wire.JobEnd, ev(5, "", at(3*time.Second)), at(3 * time.Second)},
			},
			want: []*Job{{
				JobID: 5, UID: 1000, GID: 1000, Node: "node1", State: OptedOut, Persyst: wire.Off,
				Started: at(0), Ended: tp(at(3 * time.Second)), JobStartSeen: true, JobEndSeen: true,
				Steps:   []*Step{{ID: "batch", State: Ended, Started: at(time.Second), Ended: tp(at(2 * time.Second))}},
				Updated: at(3 * time.Second),
			}},
		},
		{
			name: "opted out from the first event",
			seq: []applied{
				{wire.JobStart, ev(6, "", at(0), func(e *wire.Event) { e.Persyst = wire.Off }), at(0)},
				{wire.JobEnd, ev(6, "", at(time.Minute)), at(time.Minute)},
			},
			want: []*Job{{
				JobID: 6, UID: 1000, GID: 1000, Node: "node1", State: OptedOut, Persyst: wire.Off,
				Started: at(0), Ended: tp(at(time.Minute)), JobStartSeen: true, JobEndSeen: true,
				Steps: []*Step{}, Updated: at(time.Minute),
			}},
		},
		{
			name: "step_end without step_start",
			seq: []applied{
				{wire.StepEnd, ev(8, "3", at(time.Hour), func(e *wire.Event) {
					e.ExitStatus, e.LocalTasks, e.TotalTasks = intp(139), 2, 2 // SIGSEGV, core dumped
				}), at(time.Hour)},
			},
			want: []*Job{{
				JobID: 8, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(time.Hour),
				Steps: []*Step{{ID: "3", State: Ended, Started: at(time.Hour), Ended: tp(at(time.Hour)),
					LocalTasks: 2, TotalTasks: 2, ExitStatus: intp(139), Exit: "0:11"}},
				Updated: at(time.Hour),
			}},
		},
		{
			name: "step_end without exit status",
			seq: []applied{
				{wire.StepStart, ev(9, "0", at(0), func(e *wire.Event) { e.LocalTasks = 3 }), at(0)},
				{wire.StepEnd, ev(9, "0", at(time.Second), func(e *wire.Event) { e.LocalTasks = 5 }), at(time.Second)},
			},
			want: []*Job{{
				JobID: 9, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(0),
				Steps:   []*Step{{ID: "0", State: Ended, Started: at(0), Ended: tp(at(time.Second)), LocalTasks: 3}},
				Updated: at(time.Second),
			}},
		},
		{
			name: "node is the registry's",
			seq: []applied{
				{wire.JobStart, ev(10, "", at(0), func(e *wire.Event) { e.Node = "evilnode" }), at(0)},
				{wire.StepStart, ev(10, "0", at(time.Second), func(e *wire.Event) { e.Node = "node7" }), at(time.Second)},
			},
			want: []*Job{{
				JobID: 10, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true,
				Steps:   []*Step{{ID: "0", State: Running, Started: at(time.Second)}},
				Updated: at(time.Second),
			}},
		},
		{
			name: "late job_start moves started back; node id from a multi-node event",
			seq: []applied{
				{wire.StepStart, ev(11, "0", at(time.Minute), func(e *wire.Event) { e.NodeID, e.NNodes = 1, 3 }), at(time.Minute)},
				{wire.JobStart, ev(11, "", at(0)), at(2 * time.Minute)},
				{wire.JobStart, ev(11, "", at(time.Hour)), at(3 * time.Minute)},
			},
			want: []*Job{{
				JobID: 11, UID: 1000, GID: 1000, Node: "node1", NodeID: 1, NNodes: 3, State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true,
				Steps:   []*Step{{ID: "0", State: Running, Started: at(time.Minute)}},
				Updated: at(3 * time.Minute),
			}},
		},
		{
			name:  "user resolved from uid when the event has none",
			users: func(uid uint32) string { return map[uint32]string{1000: "alice"}[uid] },
			seq: []applied{
				{wire.JobStart, ev(12, "", at(0)), at(0)},
				{wire.JobStart, ev(13, "", at(0), func(e *wire.Event) { e.User = "bob" }), at(0)},
				{wire.JobStart, ev(14, "", at(0), func(e *wire.Event) { e.UID = 2000 }), at(0)},
			},
			want: []*Job{
				{JobID: 12, UID: 1000, GID: 1000, User: "alice", Node: "node1", State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true, Steps: []*Step{}, Updated: at(0)},
				{JobID: 13, UID: 1000, GID: 1000, User: "bob", Node: "node1", State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true, Steps: []*Step{}, Updated: at(0)},
				{JobID: 14, UID: 2000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true, Steps: []*Step{}, Updated: at(0)},
			},
		},
		{
			name: "jobs sorted by id",
			seq: []applied{
				{wire.JobStart, ev(300, "", at(0)), at(0)},
				{wire.JobStart, ev(2, "", at(0)), at(0)},
				{wire.JobStart, ev(10000, "", at(0)), at(0)},
			},
			want: []*Job{
				{JobID: 2, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true, Steps: []*Step{}, Updated: at(0)},
				{JobID: 300, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true, Steps: []*Step{}, Updated: at(0)},
				{JobID: 10000, UID: 1000, GID: 1000, Node: "node1", State: Running, Persyst: wire.On, Started: at(0), JobStartSeen: true, Steps: []*Step{}, Updated: at(0)},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReg(t, RegistryConfig{UserName: tc.users})
			applyAll(t, r, tc.seq)
			got := r.Jobs()
			for _, j := range got {
				// When the record was made: the receipt of its first event.
				if j.Recorded.IsZero() || j.Recorded.After(j.Updated) {
					t.Errorf("job %d recorded %v, updated %v", j.JobID, j.Recorded, j.Updated)
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Job{}, "Recorded")); diff != "" {
				t.Errorf("Jobs mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExitString(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{0, "0:0"},
		{1 << 8, "1:0"},
		{768, "3:0"},
		{255 << 8, "255:0"},
		{9, "0:9"},
		{15, "0:15"},
		{0x80 | 11, "0:11"}, // core dumped
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, exitString(tc.status)); diff != "" {
			t.Errorf("exitString(%d) mismatch (-want +got):\n%s", tc.status, diff)
		}
	}
}

// Jobs and Apply hand out copies: changing them must not change the registry.
func TestRegistryCopies(t *testing.T) {
	r := newReg(t, RegistryConfig{})
	e := ev(1, "0", at(0), func(e *wire.Event) { e.Cgroups = map[string]string{"unified": "/a"} })
	j, err := r.Apply(wire.StepStart, &e, at(0))
	if err != nil {
		t.Fatal(err)
	}
	want := r.Jobs()
	j.State, j.Steps[0].ID, j.Cgroups["unified"] = Ended, "x", "/b"
	got := r.Jobs()
	got[0].Steps[0].State, got[0].Cgroups["x"] = Ended, "/c"
	e.Cgroups["unified"] = "/d"
	if diff := cmp.Diff(want, r.Jobs()); diff != "" {
		t.Errorf("registry changed through a copy (-want +got):\n%s", diff)
	}
}

func TestRegistryRetention(t *testing.T) {
	tests := []struct {
		name      string
		retention time.Duration
		now       time.Time // of the Apply that may prune
		wantIDs   []uint32
	}{
		{"just within", time.Hour, at(time.Hour + 30*time.Second), []uint32{1, 2, 3}},
		{"exactly at retention", time.Hour, at(time.Hour + time.Minute), []uint32{1, 2, 3}},
		{"beyond retention", time.Hour, at(time.Hour + time.Minute + time.Second), []uint32{2, 3}},
		{"default 24h kept", 0, at(23 * time.Hour), []uint32{1, 2, 3}},
		{"default 24h pruned", 0, at(25 * time.Hour), []uint32{2, 3}},
		{"running jobs never pruned", time.Hour, at(1000 * time.Hour), []uint32{2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReg(t, RegistryConfig{Dir: t.TempDir(), Retention: tc.retention})
			applyAll(t, r, []applied{
				{wire.JobStart, ev(1, "", at(0)), at(0)},
				{wire.JobEnd, ev(1, "", at(time.Minute)), at(time.Minute)}, // job 1 ended at 0:01
				{wire.JobStart, ev(2, "", at(0)), at(0)},                   // job 2 still running
			})
			// Nothing is pruned before the next Apply.
			if diff := cmp.Diff([]uint32{1, 2}, ids(r.Jobs())); diff != "" {
				t.Fatalf("jobs before the pruning Apply mismatch (-want +got):\n%s", diff)
			}
			applyAll(t, r, []applied{{wire.JobStart, ev(3, "", tc.now), tc.now}})
			if diff := cmp.Diff(tc.wantIDs, ids(r.Jobs())); diff != "" {
				t.Errorf("jobs after pruning mismatch (-want +got):\n%s", diff)
			}
			// The pruned registry is what was saved.
			r2 := newReg(t, RegistryConfig{Dir: r.dir})
			if diff := cmp.Diff(tc.wantIDs, ids(r2.Jobs())); diff != "" {
				t.Errorf("saved jobs after pruning mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func ids(jobs []*Job) []uint32 {
	out := []uint32{}
	for _, j := range jobs {
		out = append(out, j.JobID)
	}
	return out
}

func TestRegistryPersistence(t *testing.T) {
	seq := []applied{
		{wire.JobStart, ev(42, "", at(0), func(e *wire.Event) {
			e.User, e.NNodes, e.NCPUs = "alice", 2, 4
			e.Cgroups = map[string]string{"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"}
		}), at(0)},
		{wire.StepStart, ev(42, "batch", at(time.Second), func(e *wire.Event) { e.StepCores, e.LocalTasks = "0-1", 1 }), at(time.Second)},
		{wire.StepEnd, ev(42, "batch", at(2*time.Second), func(e *wire.Event) { e.ExitStatus = intp(256) }), at(2 * time.Second)},
		{wire.JobEnd, ev(42, "", at(3*time.Second)), at(3 * time.Second)},
		{wire.JobStart, ev(43, "", at(4*time.Second), func(e *wire.Event) { e.Persyst = wire.Off }), at(4 * time.Second)},
		{wire.StepStart, ev(44, "0", at(5*time.Second)), at(5 * time.Second)},
	}
	dir := t.TempDir()
	r := newReg(t, RegistryConfig{Dir: dir})
	if diff := cmp.Diff([]*Job{}, r.Jobs()); diff != "" {
		t.Errorf("fresh registry mismatch (-want +got):\n%s", diff)
	}
	applyAll(t, r, seq)
	want := r.Jobs()
	if len(want) != 3 {
		t.Fatalf("registry has %d jobs, want 3", len(want))
	}

	r2 := newReg(t, RegistryConfig{Dir: dir})
	if diff := cmp.Diff(want, r2.Jobs()); diff != "" {
		t.Errorf("reopened registry mismatch (-want +got):\n%s", diff)
	}

	// One private file per job, and no temporary file is left behind.
	for _, name := range []string{"42.json", "43.json", "44.json"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(os.FileMode(0o600), st.Mode().Perm()); diff != "" {
			t.Errorf("%s mode mismatch (-want +got):\n%s", name, diff)
		}
	}
	if diff := cmp.Diff([]string{"42.json", "43.json", "44.json"}, dirNames(t, dir)); diff != "" {
		t.Errorf("state dir mismatch (-want +got):\n%s", diff)
	}

	// The reopened registry goes on from where the first stopped.
	applyAll(t, r2, []applied{{wire.StepEnd, ev(44, "0", at(6*time.Second), func(e *wire.Event) { e.ExitStatus = intp(0) }), at(6 * time.Second)}})
	r3 := newReg(t, RegistryConfig{Dir: dir})
	if diff := cmp.Diff(r2.Jobs(), r3.Jobs()); diff != "" {
		t.Errorf("second reopen mismatch (-want +got):\n%s", diff)
	}
	if got := r3.Jobs()[2].Steps[0].Exit; got != "0:0" {
		t.Errorf("job 44 step 0 exit = %q, want 0:0", got)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestRegistryUnreadableState(t *testing.T) {
	tests := []struct {
		name    string
		content string
	}{
		{"not json", "{not json"},
		{"empty file", ""},
		{"truncated", `{"version":1,"node":"node1","job":{"job_id":1,`},
		{"wrong version", `{"version":2,"node":"node1","job":{"job_id":1}}`},
		{"no version", `{"node":"node1","job":{"job_id":1}}`},
		{"wrong type", `{"version":1,"node":"node1","job":[1]}`},
		{"no job", `{"version":1,"node":"node1"}`},
		{"job id 0", `{"version":1,"node":"node1","job":{"job_id":0}}`},
		{"id does not match the file name", `{"version":1,"node":"node1","job":{"job_id":2}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "1.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			// A good file beside the bad one still loads.
			testenv.Write(t, filepath.Join(dir, "5.json"), `{"version":1,"node":"node1","job":{"job_id":5}}`)
			r := newReg(t, RegistryConfig{Dir: dir})
			if diff := cmp.Diff([]uint32{5}, ids(r.Jobs())); diff != "" {
				t.Errorf("registry over an unreadable state mismatch (-want +got):\n%s", diff)
			}
			aside, err := filepath.Glob(path + ".unreadable-*")
			if err != nil {
				t.Fatal(err)
			}
			if len(aside) != 1 {
				t.Fatalf("files moved aside = %q, want exactly one 1.json.unreadable-*", aside)
			}
			b, err := os.ReadFile(aside[0])
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.content, string(b)); diff != "" {
				t.Errorf("moved-aside content mismatch (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("state file still in place after being moved aside (stat: %v)", err)
			}
			// The registry works and writes a fresh state file.
			applyAll(t, r, []applied{{wire.JobStart, ev(1, "", at(0)), at(0)}})
			r2 := newReg(t, RegistryConfig{Dir: dir})
			if diff := cmp.Diff([]uint32{1, 5}, ids(r2.Jobs())); diff != "" {
				t.Errorf("jobs after restart mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// An unreadable state file is "moved aside (never deleted)": a second unreadable file
// must not replace the first one moved aside.
func TestRegistryUnreadableStateTwiceKeepsBoth(t *testing.T) {
	for attempt := 0; attempt < 5; attempt++ {
		dir := t.TempDir()
		path := filepath.Join(dir, "7.json")
		start := time.Now().Unix()
		for _, content := range []string{"first garbage", "second garbage"} {
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			newReg(t, RegistryConfig{Dir: dir})
		}
		if time.Now().Unix() != start {
			continue // crossed a second boundary: try again so both land in one second
		}
		var got []string
		aside, _ := filepath.Glob(path + ".unreadable-*")
		for _, p := range aside {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(b))
		}
		if diff := cmp.Diff([]string{"first garbage", "second garbage"}, got); diff != "" {
			t.Errorf("moved-aside state files mismatch (-want +got):\n%s", diff)
		}
		return
	}
	t.Fatal("could not open the registry twice within one second")
}

func TestOpenRegistryErrors(t *testing.T) {
	state := func(node string) string {
		b, err := json.Marshal(jobFile{Version: stateVersion, Node: node, Job: &Job{JobID: 1, Node: node}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, path string)
		node    string
		wantErr []string
		wantIDs []uint32
	}{
		{
			name:    "other node's state",
			setup:   func(t *testing.T, path string) { testenv.Write(t, path, state("node2")) },
			node:    "node1",
			wantErr: []string{path0, `"node2"`, `"node1"`},
		},
		{
			name:    "state without a node is adopted",
			setup:   func(t *testing.T, path string) { testenv.Write(t, path, state("")) },
			node:    "node1",
			wantIDs: []uint32{1},
		},
		{
			name:    "own state",
			setup:   func(t *testing.T, path string) { testenv.Write(t, path, state("node1")) },
			node:    "node1",
			wantIDs: []uint32{1},
		},
		{
			name: "state dir is a file",
			setup: func(t *testing.T, path string) {
				if err := os.Remove(filepath.Dir(path)); err != nil {
					t.Fatal(err)
				}
				testenv.Write(t, filepath.Dir(path), "not a directory")
			},
			node:    "node1",
			wantErr: []string{"state dir"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "1.json")
			tc.setup(t, path)
			r, err := OpenRegistry(RegistryConfig{Node: tc.node, Dir: dir}, zerolog.Nop())
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("OpenRegistry = %d jobs, nil; want error", len(r.Jobs()))
				}
				for _, w := range tc.wantErr {
					w = strings.ReplaceAll(w, path0, path)
					if !strings.Contains(err.Error(), w) {
						t.Errorf("OpenRegistry error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenRegistry: %v", err)
			}
			if diff := cmp.Diff(tc.wantIDs, ids(r.Jobs())); diff != "" {
				t.Errorf("jobs mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// path0 stands for the state path in expected error substrings.
const path0 = "<path>"

func TestApplySaveError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	r := newReg(t, RegistryConfig{Dir: dir})
	// The state directory vanishes and a file takes its place: saving must fail loudly.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	testenv.Write(t, dir, "x")
	path := filepath.Join(dir, "1.json")
	e := ev(1, "", at(0))
	j, err := r.Apply(wire.JobStart, &e, at(0))
	if err == nil {
		t.Fatal("Apply with an unwritable state path succeeded")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("Apply error %q does not name %s", err, path)
	}
	if j == nil || j.JobID != 1 {
		t.Errorf("Apply returned job %+v, want job 1", j)
	}
}

// job_end closes steps whose end was not (yet) seen; a late step_end still records the exit.
func TestJobEndClosesOpenSteps(t *testing.T) {
	r := newReg(t, RegistryConfig{})
	applyAll(t, r, []applied{
		{wire.StepStart, ev(7, "extern", at(0)), at(0)},
		{wire.StepStart, ev(7, "batch", at(time.Second)), at(time.Second)},
		{wire.JobEnd, ev(7, "", at(5*time.Second)), at(5 * time.Second)},
	})
	j := r.Jobs()[0]
	for _, s := range j.Steps {
		if s.State != Ended || s.Ended == nil || !s.Ended.Equal(at(5*time.Second)) || s.Exit != "" {
			t.Errorf("step %s after job_end: %+v, want ended at the job's end, exit unknown", s.ID, s)
		}
	}
	applyAll(t, r, []applied{{wire.StepEnd, ev(7, "batch", at(4*time.Second), func(e *wire.Event) { e.ExitStatus = intp(256) }), at(6 * time.Second)}})
	for _, s := range r.Jobs()[0].Steps {
		if s.ID == "batch" && (s.Exit != "1:0" || !s.Ended.Equal(at(4*time.Second))) {
			t.Errorf("late step_end: %+v, want exit 1:0 ended at 4s", s)
		}
	}
}
