package digest

import (
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"
)

// Ending is what is known of how a job ended, when its digest is made.
type Ending struct {
	// State is Slurm's state of the job ("" or an active state: not known yet, the
	// digest is made while the batch script's end is being reported).
	State string
	// Exit is the batch script's wait(2) status (nil: unknown).
	Exit *int
	// OOMKills counts the processes the kernel killed for lack of memory (in the job's
	// cgroups and its steps' and tasks').
	OOMKills int
	// MemPeak and MemRequested are the job's memory peak and request on this node, in
	// bytes (0: unknown, none); MemDefault: the job asked for none, the request is the
	// site's default.
	MemPeak, MemRequested float64
	MemDefault            bool
	// Node names the node MemPeak, AnonPeak and MemRequested are of, for a job of several
	// nodes ("": the job's one node).
	Node string
	// AnonPeak is the highest memory in use without the page cache seen at a read (a
	// lower bound of the true peak: the cache is given back before a kill, this memory
	// is not); 0: not known.
	AnonPeak float64
	// Requeued: Slurm requeued the job as this run ended (scontrol requeue, preemption
	// with PreemptMode=REQUEUE, a node failure with requeue): it runs again. Held: it
	// waits for a release. Preempted: Slurm preempted this run for another job.
	Requeued, Held, Preempted bool
	// TimeLimit is the job's limit (0: none), Elapsed how long it ran.
	TimeLimit, Elapsed time.Duration
	// LastCPUShare is the share of the job's CPUs busy in its last minutes (<0: unknown).
	LastCPUShare float64
}

// active are Slurm states of a job that has not ended (EXPEDITING: a job requeued to run
// again at once, Slurm 25.11).
var active = map[string]bool{"": true, "RUNNING": true, "COMPLETING": true, "PENDING": true, "CONFIGURING": true,
	"SUSPENDED": true, "REQUEUED": true, "RESIZING": true, "SIGNALING": true, "STAGE_OUT": true, "EXPEDITING": true}

// EndEvents says how a job ended and what of that leads its digest: an OOM kill always
// (first), then a failure, a cancellation, the time limit or a node failure. A job that
// completed with exit code 0 has no event.
func EndEvents(e Ending) (*EndState, []Event) {
	st := &EndState{State: e.State}
	signaled := false
	if e.Exit != nil {
		ws := syscall.WaitStatus(*e.Exit)
		switch {
		case ws.Signaled():
			st.Signal, signaled = int(ws.Signal()), true
		case ws.Exited():
			st.ExitCode = ws.ExitStatus()
		}
	}
	if e.Requeued {
		return requeued(e)
	}
	if e.Preempted && (st.State == "" || active[st.State] || st.State == "CANCELLED") {
		st.State = "PREEMPTED"
	}
	timedOut := e.TimeLimit > 0 && e.Elapsed >= e.TimeLimit-time.Second
	// COMPLETING while the batch script's end is still being reported: Slurm ended the
	// job itself (scancel, the time limit, a node failure, preemption).
	slurmEnded := e.State == "COMPLETING"
	if active[st.State] {
		st.State = ""
	}
	if st.State == "" {
		switch {
		case e.Exit == nil && e.OOMKills == 0:
			return nil, nil // nothing known yet
		case e.OOMKills > 0:
			// As Slurm does: a job with an OOM kill ended OUT_OF_MEMORY, even when its
			// script went on after the kill and exited 0.
			st.State = "OUT_OF_MEMORY"
		case timedOut && (signaled || st.ExitCode != 0):
			st.State = "TIMEOUT"
		case slurmEnded && (signaled || st.ExitCode != 0):
			st.State = "CANCELLED"
		case signaled || st.ExitCode != 0:
			st.State = "FAILED"
		default:
			st.State = "COMPLETED"
		}
	}
	var ev []Event
	if e.OOMKills > 0 || st.State == "OUT_OF_MEMORY" {
		ev = append(ev, oomEvent(e))
	}
	switch st.State {
	case "FAILED":
		what := fmt.Sprintf("with exit code %d", st.ExitCode)
		if st.Signal != 0 {
			what = "killed by " + signalName(st.Signal)
		}
		ev = append(ev, Event{Key: "failed", Text: "The job failed: its batch script ended " + what + ".",
			Recommendation: "See the job's error output for why."})
	case "CANCELLED":
		ev = append(ev, Event{Key: "cancelled", Text: fmt.Sprintf("The job was cancelled after %s.", Duration(e.Elapsed.Seconds()))})
	case "TIMEOUT":
		ev = append(ev, timeoutEvent(e))
	case "NODE_FAIL":
		ev = append(ev, Event{Key: "node_fail", Text: "A node of the job failed; Slurm ended the job.",
			Recommendation: "Resubmit the job; if it happens again, tell the site's admins."})
	case "BOOT_FAIL":
		ev = append(ev, Event{Key: "boot_fail", Text: "A node of the job failed to boot; Slurm ended the job before it could run.",
			Recommendation: "Resubmit the job; if it happens again, tell the site's admins."})
	case "PREEMPTED":
		ev = append(ev, Event{Key: "preempted", Text: fmt.Sprintf("Preempted after %s: Slurm ended the job to run another of higher priority.", Duration(e.Elapsed.Seconds())),
			Recommendation: "Nothing in the job caused this. Resubmit it; save work regularly (checkpoints) so that a next job can go on, or use a partition or QOS that is not preempted."})
	}
	return st, ev
}

// requeued is the end of a run that Slurm requeued: named as such (never a
// cancellation), after an OOM kill if there was one.
func requeued(e Ending) (*EndState, []Event) {
	st := &EndState{State: "REQUEUED"}
	if e.Exit != nil {
		ws := syscall.WaitStatus(*e.Exit)
		if ws.Signaled() {
			st.Signal = int(ws.Signal())
		} else if ws.Exited() {
			st.ExitCode = ws.ExitStatus()
		}
	}
	var ev []Event
	if e.OOMKills > 0 {
		ev = append(ev, oomEvent(e))
	}
	text := fmt.Sprintf("Requeued after %s: Slurm will start the job again.", Duration(e.Elapsed.Seconds()))
	if e.Preempted {
		text = fmt.Sprintf("Preempted after %s by a job of higher priority and requeued: Slurm will start the job again.", Duration(e.Elapsed.Seconds()))
	}
	if e.Held {
		st.State = "REQUEUE_HOLD"
		text = strings.Replace(text, "Slurm will start the job again.", "it is held until released (scontrol release), then runs again.", 1)
	}
	ev = append(ev, Event{Key: "requeued", Text: text,
		Recommendation: "Nothing in the job caused this. The next run starts from the beginning unless the job saves its work (checkpoints) and resumes from it."})
	return st, ev
}

// nearLimit is how close to the memory Slurm enforces a job may come before its digest
// says so: within 10 %.
const nearLimit = 0.9

// EndNotes are the notes of a job's end: its memory came within 10 % of what Slurm
// enforces (the request, or the site's default) without a kill. The memory counted is
// the job's own (anonymous) memory, not the page cache, which the kernel gives back
// before it kills anything.
func EndNotes(e Ending) []Event {
	if e.OOMKills > 0 || e.MemRequested <= 0 || e.AnonPeak < nearLimit*e.MemRequested {
		return nil
	}
	given := "requested"
	if e.MemDefault {
		given = "given by default (the job requested none)"
	}
	pct := min(100*e.AnonPeak/e.MemRequested, 100)
	where := ""
	if e.Node != "" {
		where = " on " + e.Node
	}
	text := fmt.Sprintf("Memory came close to the limit: the job used %s%s, %.0f%% of the %s %s; a little more data and it is killed.",
		humanBytes(e.AnonPeak), where, math.Floor(pct), humanBytes(e.MemRequested), given)
	// A quarter above the peak, in whole MiB.
	want := int(math.Ceil(1.25 * e.AnonPeak / (1 << 20)))
	return []Event{{Key: "memory_near_limit", Text: text,
		Recommendation: fmt.Sprintf("For runs like this one, request about a quarter more than it used (e.g. --mem=%dM).", want)}}
}

func oomEvent(e Ending) Event {
	text := "Out of memory: 1 process was killed for lack of memory"
	if n := max(e.OOMKills, 1); n != 1 {
		text = fmt.Sprintf("Out of memory: %d processes were killed for lack of memory", n)
	}
	rec := "Request more memory (--mem or --mem-per-cpu) or use less per task."
	switch {
	case e.MemPeak > 0 && e.MemRequested > 0 && e.MemDefault:
		text += fmt.Sprintf(" (peak %s of the %s given by default: the job requested no memory)", humanBytes(e.MemPeak), humanBytes(e.MemRequested))
		rec = fmt.Sprintf("Request the memory the job needs (e.g. --mem=%dM, twice the default) or use less per task.", int(math.Ceil(2*e.MemRequested/(1<<20))))
	case e.MemPeak > 0 && e.MemRequested > 0:
		text += fmt.Sprintf(" (peak %s of the %s requested)", humanBytes(e.MemPeak), humanBytes(e.MemRequested))
		rec = fmt.Sprintf("Request more memory (e.g. --mem=%dM, twice the request) or use less per task.", int(math.Ceil(2*e.MemRequested/(1<<20))))
	case e.MemPeak > 0:
		text += fmt.Sprintf(" (peak %s)", humanBytes(e.MemPeak))
	}
	return Event{Key: "oom_kill", Text: text + ".", Recommendation: rec}
}

func timeoutEvent(e Ending) Event {
	text := fmt.Sprintf("The job reached its time limit (%s) and was stopped", Duration(e.TimeLimit.Seconds()))
	rec := "Request more time (--time), or save the work regularly (checkpoints) so that a next job can go on."
	switch s := e.LastCPUShare; {
	case s < 0:
	case s < 0.1:
		text += fmt.Sprintf("; in its last minutes it was nearly idle (%.0f%% of its CPUs busy)", 100*s)
		rec = "The job did almost nothing before its time ran out: look for a hang (a deadlock, a wait on input or on a file) before asking for more time."
	case s >= 0.5:
		text += fmt.Sprintf("; in its last minutes it was busy (%.0f%% of its CPUs)", 100*s)
	default:
		text += fmt.Sprintf("; in its last minutes %.0f%% of its CPUs were busy", 100*s)
	}
	return Event{Key: "timeout", Text: text + ".", Recommendation: rec}
}

// signalName names a signal as shells do: "signal 9 (KILL)".
func signalName(sig int) string {
	names := map[int]string{1: "HUP", 2: "INT", 3: "QUIT", 4: "ILL", 6: "ABRT", 7: "BUS", 8: "FPE", 9: "KILL", 11: "SEGV", 13: "PIPE", 15: "TERM"}
	if n, ok := names[sig]; ok {
		return fmt.Sprintf("signal %d (%s)", sig, n)
	}
	return fmt.Sprintf("signal %d", sig)
}
