package digest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func status(code, sig int) *int {
	s := code<<8 | sig
	return &s
}

// TestEndEvents: how a job ended, from Slurm's state when it has one, else from the
// batch script's exit status, the OOM kills and the time limit; what leads the digest.
func TestEndEvents(t *testing.T) {
	mib := float64(1 << 20)
	tests := []struct {
		name  string
		e     Ending
		want  *EndState
		keys  []string
		words []string // in the events' text and recommendations
	}{
		{"completed", Ending{Exit: status(0, 0)}, &EndState{State: "COMPLETED"}, nil, nil},
		{"nothing known yet", Ending{}, nil, nil, nil},
		{"exit 42", Ending{Exit: status(42, 0)}, &EndState{State: "FAILED", ExitCode: 42}, []string{"failed"}, []string{"exit code 42"}},
		{"segfault", Ending{Exit: status(0, 11)}, &EndState{State: "FAILED", Signal: 11}, []string{"failed"}, []string{"signal 11 (SEGV)"}},
		{"oom kill", Ending{Exit: status(0, 9), OOMKills: 1, MemPeak: 100 * mib, MemRequested: 100 * mib},
			&EndState{State: "OUT_OF_MEMORY", Signal: 9}, []string{"oom_kill"}, []string{"1 process was killed", "peak 100.0 MiB of the 100.0 MiB requested", "--mem=200M"}},
		{"oom kill under the site's default memory", Ending{Exit: status(0, 9), OOMKills: 1, MemPeak: 100 * mib, MemRequested: 100 * mib, MemDefault: true},
			&EndState{State: "OUT_OF_MEMORY", Signal: 9}, []string{"oom_kill"}, []string{"100.0 MiB given by default: the job requested no memory", "--mem=200M"}},
		{"oom kill, the script went on", Ending{Exit: status(0, 0), OOMKills: 2}, &EndState{State: "OUT_OF_MEMORY"}, []string{"oom_kill"}, []string{"2 processes"}},
		{"Slurm says OUT_OF_MEMORY", Ending{State: "OUT_OF_MEMORY", Exit: status(0, 9)}, &EndState{State: "OUT_OF_MEMORY", Signal: 9}, []string{"oom_kill"}, nil},
		{"cancelled", Ending{State: "CANCELLED", Exit: status(0, 15), Elapsed: 90 * time.Second}, &EndState{State: "CANCELLED", Signal: 15},
			[]string{"cancelled"}, []string{"cancelled after 1m 30s"}},
		{"time limit, idle", Ending{Exit: status(0, 15), TimeLimit: time.Minute, Elapsed: 61 * time.Second, LastCPUShare: 0.02},
			&EndState{State: "TIMEOUT", Signal: 15}, []string{"timeout"}, []string{"time limit (1m 00s)", "nearly idle", "look for a hang"}},
		{"Slurm says TIMEOUT, busy", Ending{State: "TIMEOUT", Exit: status(0, 15), TimeLimit: time.Minute, Elapsed: time.Minute, LastCPUShare: 0.97},
			&EndState{State: "TIMEOUT", Signal: 15}, []string{"timeout"}, []string{"busy (97% of its CPUs)", "--time"}},
		{"scancel, Slurm says COMPLETING", Ending{State: "COMPLETING", Exit: status(0, 15), TimeLimit: time.Hour, Elapsed: time.Minute},
			&EndState{State: "CANCELLED", Signal: 15}, []string{"cancelled"}, []string{"cancelled after 1m 00s"}},
		{"a script that failed as Slurm ended it", Ending{State: "COMPLETING", Exit: status(0, 0)}, &EndState{State: "COMPLETED"}, nil, nil},
		{"still running in Slurm's view", Ending{State: "RUNNING", Exit: status(3, 0)}, &EndState{State: "FAILED", ExitCode: 3}, []string{"failed"}, nil},
		{"node failure", Ending{State: "NODE_FAIL"}, &EndState{State: "NODE_FAIL"}, []string{"node_fail"}, nil},
		{"boot failure", Ending{State: "BOOT_FAIL"}, &EndState{State: "BOOT_FAIL"}, []string{"boot_fail"}, []string{"failed to boot"}},
		// A requeue is Slurm's: never a cancellation, whatever signal ended the script.
		{"requeued", Ending{State: "COMPLETING", Requeued: true, Exit: status(0, 15), Elapsed: 11 * time.Second},
			&EndState{State: "REQUEUED", Signal: 15}, []string{"requeued"}, []string{"Requeued after 11 s", "start the job again"}},
		{"preempted and requeued", Ending{State: "COMPLETING", Requeued: true, Preempted: true, Exit: status(0, 15), Elapsed: 90 * time.Second},
			&EndState{State: "REQUEUED", Signal: 15}, []string{"requeued"}, []string{"Preempted after 1m 30s", "requeued"}},
		{"requeued and held", Ending{State: "REQUEUE_HOLD", Requeued: true, Held: true, Exit: status(0, 9), Elapsed: time.Minute},
			&EndState{State: "REQUEUE_HOLD", Signal: 9}, []string{"requeued"}, []string{"held until released"}},
		{"requeued after an OOM kill", Ending{Requeued: true, OOMKills: 1, Exit: status(0, 9), Elapsed: time.Minute},
			&EndState{State: "REQUEUED", Signal: 9}, []string{"oom_kill", "requeued"}, nil},
		{"preempted (cancelled)", Ending{State: "COMPLETING", Preempted: true, Exit: status(0, 15), Elapsed: 30 * time.Second},
			&EndState{State: "PREEMPTED", Signal: 15}, []string{"preempted"}, []string{"Preempted after 30 s", "higher priority"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, ev := EndEvents(tc.e)
			if diff := cmp.Diff(tc.want, st); diff != "" {
				t.Errorf("end state (-want +got):\n%s", diff)
			}
			var keys []string
			var text strings.Builder
			for _, e := range ev {
				keys = append(keys, e.Key)
				text.WriteString(e.Text + " " + e.Recommendation + " ")
			}
			if diff := cmp.Diff(tc.keys, keys); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for _, w := range tc.words {
				if !strings.Contains(text.String(), w) {
					t.Errorf("events lack %q: %s", w, text.String())
				}
			}
		})
	}
}

// TestEndNotes: a job whose own memory came within 10 % of what Slurm enforces, without a
// kill, gets a note that says by how much and what to request; the page cache (MemPeak
// without AnonPeak) never makes one.
func TestEndNotes(t *testing.T) {
	mib := float64(1 << 20)
	tests := []struct {
		name  string
		e     Ending
		words []string // nil: no note
	}{
		{"91 % of the request", Ending{AnonPeak: 182 * mib, MemPeak: 190 * mib, MemRequested: 200 * mib},
			[]string{"used 182.0 MiB, 91% of the 200.0 MiB requested", "--mem=228M"}},
		{"exactly 90 %, on one node of several", Ending{AnonPeak: 180 * mib, MemRequested: 200 * mib, Node: "node2"}, []string{"used 180.0 MiB on node2, 90% of the 200.0 MiB"}},
		{"the site's default", Ending{AnonPeak: 1900 * mib, MemRequested: 2000 * mib, MemDefault: true},
			[]string{"given by default (the job requested none)"}},
		{"89 %", Ending{AnonPeak: 178 * mib, MemRequested: 200 * mib}, nil},
		{"the page cache at the limit", Ending{AnonPeak: 20 * mib, MemPeak: 200 * mib, MemRequested: 200 * mib}, nil},
		{"killed: the kill says it", Ending{AnonPeak: 199 * mib, MemRequested: 200 * mib, OOMKills: 1}, nil},
		{"no request known", Ending{AnonPeak: 199 * mib}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := EndNotes(tc.e)
			if tc.words == nil {
				if len(ns) != 0 {
					t.Fatalf("notes %+v, want none", ns)
				}
				return
			}
			if len(ns) != 1 || ns[0].Key != "memory_near_limit" {
				t.Fatalf("notes %+v, want one memory_near_limit", ns)
			}
			for _, w := range tc.words {
				if text := ns[0].Text + " " + ns[0].Recommendation; !strings.Contains(text, w) {
					t.Errorf("note lacks %q: %s", w, text)
				}
			}
		})
	}
}
