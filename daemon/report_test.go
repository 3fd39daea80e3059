package daemon

import (
	"testing"
	"time"

	"github.com/persyst/persyst/jobmap"
)

// TestRequeueAndRun: how a run's end is told to be Slurm's requeue (flags, PENDING, or a
// restart count risen since the run's start, for sources that show COMPLETING only),
// whether this run was preempted, and which run it was.
func TestRequeueAndRun(t *testing.T) {
	started := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name                      string
		now, atStart              *jobmap.Job
		requeued, held, preempted bool
		run                       int
	}{
		{"a job never requeued", &jobmap.Job{State: "COMPLETED"}, &jobmap.Job{State: "RUNNING"}, false, false, false, 0},
		{"requeued: COMPLETING, its count risen", &jobmap.Job{State: "COMPLETING", Restarts: 1}, &jobmap.Job{State: "RUNNING"}, true, false, false, 1},
		{"requeued: the flag", &jobmap.Job{State: "REQUEUED", Requeued: true, Restarts: 1}, nil, true, false, false, 1},
		{"requeued: pending again", &jobmap.Job{State: "PENDING", Restarts: 2}, nil, true, false, false, 2},
		{"requeued and held", &jobmap.Job{State: "REQUEUE_HOLD", Requeued: true, Held: true, Restarts: 1}, nil, true, true, false, 1},
		{"the second run, completed", &jobmap.Job{State: "COMPLETED", Restarts: 1}, &jobmap.Job{State: "RUNNING", Restarts: 1}, false, false, false, 2},
		{"preempted in this run", &jobmap.Job{State: "COMPLETING", Restarts: 1, Preempted: started.Add(time.Minute)}, &jobmap.Job{}, true, false, true, 1},
		{"preempted in an earlier run", &jobmap.Job{State: "COMPLETED", Restarts: 1, Preempted: started.Add(-time.Hour)}, &jobmap.Job{Restarts: 1}, false, false, false, 2},
		{"cancelled, not looked up at its start", &jobmap.Job{State: "COMPLETING"}, nil, false, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requeued, held, preempted := requeue(tc.now, tc.atStart, started)
			if requeued != tc.requeued || held != tc.held || preempted != tc.preempted {
				t.Errorf("requeue = %v, %v, %v; want %v, %v, %v", requeued, held, preempted, tc.requeued, tc.held, tc.preempted)
			}
			if got := run(tc.now, requeued); got != tc.run {
				t.Errorf("run %d, want %d", got, tc.run)
			}
		})
	}
}
