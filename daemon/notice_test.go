package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/sample"
)

// noticeSink records what the notices wrote, mailed and ran.
type noticeSink struct {
	mu              sync.Mutex
	lines, mails    []string
	commandLog, dir string
}

func (s *noticeSink) appendText(_ context.Context, t digest.Target, text []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, t.Path+": "+string(text))
	return nil
}

func (s *noticeSink) mail(_ context.Context, to, subject, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mails = append(s.mails, to+": "+subject)
	return nil
}

func (s *noticeSink) commands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(s.commandLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// newSinkNoticer is a noticer with GPUs told after 3 min, CPUs after 5, into a sink; the
// site's command a script that logs its arguments.
func newSinkNoticer(t *testing.T, s *noticeSink) *noticer {
	t.Helper()
	if s.dir == "" {
		s.dir = t.TempDir()
		s.commandLog = filepath.Join(s.dir, "commands.log")
	}
	script := filepath.Join(s.dir, "notice.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" >> "+s.commandLog+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return newNoticer(NoticeConfig{IdleGPUAfter: 3 * time.Minute, IdleCPUAfter: 5 * time.Minute, Command: script, Mail: s.mail,
		Dir: filepath.Join(s.dir, "notices")}, s.appendText, nil, zerolog.Nop(), time.Now)
}

// minute is an interval of a minute ending at nt0 + i minutes of a job with 2 GPUs on 4
// CPUs: gpusIdle of them ran nothing, cpus were busy.
func minute(i int, gpusIdle, cpus float64, shared bool) sample.Sample {
	s := sample.Sample{Time: nt0.Add(time.Duration(i) * time.Minute), Seconds: 60,
		Job: map[string]float64{sample.GPUs: 2, sample.CPUUserSeconds: 60 * cpus}}
	if !shared {
		s.Job[sample.GPUUnusedSeconds] = 60 * gpusIdle
	}
	return s
}

var nt0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// TestNotices: a job whose GPUs all idle for 3 minutes is told once (its output, a mail,
// the site's command), whatever comes after and across a daemon's restart; a busy
// interval starts the stretch again; a shared GPU or one GPU busy is no idle; CPUs under a
// tenth busy for 5 minutes are told as well.
func TestNotices(t *testing.T) {
	j := &Job{JobID: 42, UID: 1000, GID: 1000, User: "alice", Node: "n1", State: Running, Recorded: nt0.Add(-time.Hour)}
	facts := &jobmap.Job{Stdout: "slurm-42.out", WorkDir: "/home/alice/run"}
	for _, tc := range []struct {
		name     string
		samples  []sample.Sample
		commands []string
	}{
		{"GPUs idle 3 minutes", []sample.Sample{minute(1, 2, 4, false), minute(2, 2, 4, false), minute(3, 2, 4, false), minute(4, 2, 4, false)},
			[]string{"42 alice gpu_idle 180"}},
		{"a busy minute starts again", []sample.Sample{minute(1, 2, 4, false), minute(2, 2, 4, false), minute(3, 1, 4, false), minute(4, 2, 4, false), minute(5, 2, 4, false)},
			nil},
		{"shared GPUs are not judged", []sample.Sample{minute(1, 0, 4, true), minute(2, 0, 4, true), minute(3, 0, 4, true), minute(4, 0, 4, true)},
			nil},
		{"CPUs idle too", []sample.Sample{minute(1, 2, 0.2, false), minute(2, 2, 0.2, false), minute(3, 2, 0.2, false), minute(4, 2, 0.2, false), minute(5, 2, 0.2, false), minute(6, 2, 0.2, false)},
			[]string{"42 alice gpu_idle 180", "42 alice cpu_idle 300"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &noticeSink{}
			n := newSinkNoticer(t, s)
			for _, smp := range tc.samples {
				n.judge(j, smp, 4, facts)
				n.judge(j, smp, 4, facts) // the same interval again: judged once
				n.wait()
			}
			if d := cmp.Diff(tc.commands, s.commands(t)); d != "" {
				t.Errorf("commands (-want +got):\n%s", d)
			}
			if len(s.lines) != len(tc.commands) || len(s.mails) != len(tc.commands) {
				t.Fatalf("%d lines, %d mails; want %d each", len(s.lines), len(s.mails), len(tc.commands))
			}
			if len(s.lines) > 0 {
				if want := "/home/alice/run/slurm-42.out: persyst: job 42 (holds GPUs that run nothing): its 2 GPUs ran nothing for 3m 00s, since 10:00 UTC, on n1."; !strings.HasPrefix(s.lines[0], want) {
					t.Errorf("the line in the output:\n%s\nwant it to begin\n%s", s.lines[0], want)
				}
				if s.mails[0] != "alice: persyst: job 42 holds GPUs that run nothing" {
					t.Errorf("mail %q", s.mails[0])
				}
			}
		})
	}

	// A daemon restarted after the notice: the stretch goes on, no second notice.
	s := &noticeSink{}
	n := newSinkNoticer(t, s)
	for i := 1; i <= 4; i++ {
		n.judge(j, minute(i, 2, 4, false), 4, facts)
		n.wait()
	}
	again := newSinkNoticer(t, s)
	for i := 5; i <= 9; i++ {
		again.judge(j, minute(i, 2, 4, false), 4, facts)
		again.wait()
	}
	if got := s.commands(t); len(got) != 1 || len(s.lines) != 1 {
		t.Errorf("after a restart: commands %q, %d lines; want one notice", got, len(s.lines))
	}
	if idle := again.idleFor(42); idle[noticeGPUIdle] != 300 {
		t.Errorf("idle for %v, want gpu_idle 300 s (since the restarted daemon's first interval)", idle)
	}
	// An opted-out or ended job, or notices off: nothing.
	off := newNoticer(NoticeConfig{}, s.appendText, nil, zerolog.Nop(), time.Now)
	off.judge(j, minute(20, 2, 4, false), 4, facts)
	if off.on() || len(off.idleFor(42)) != 0 {
		t.Error("notices off judged a job")
	}
}

// TestNoticesUp: what a job was told goes up the tree (to the site's view) when it is
// told, again every digest.NoticeRefresh while the reason holds, once when it stops
// holding, and again once it held as long as the notice asks; never for a reason not told.
func TestNoticesUp(t *testing.T) {
	j := &Job{JobID: 42, UID: 1000, GID: 1000, User: "alice", Node: "n1", State: Running, Recorded: nt0.Add(-time.Hour)}
	s := &noticeSink{}
	n := newSinkNoticer(t, s)
	var ups []string
	n.cfg.Up = func(x digest.Notice) {
		ups = append(ups, fmt.Sprintf("%d %s %s since %s told %s seen %s until %s", x.JobID, x.Node, x.Reason,
			x.Since.Format("15:04"), x.Told.Format("15:04"), x.Seen.Format("15:04"), x.Until.Format("15:04")))
	}
	// GPUs idle minutes 1-10, busy in 11, idle 12-16; CPUs busy throughout (never told).
	for i := 1; i <= 16; i++ {
		idle := 2.0
		if i == 11 {
			idle = 0
		}
		n.judge(j, minute(i, idle, 4, false), 4, nil)
		n.wait()
	}
	want := []string{
		"42 n1 gpu_idle since 10:00 told 10:03 seen 10:03 until 00:00", // told after 3 minutes idle
		"42 n1 gpu_idle since 10:00 told 10:03 seen 10:08 until 00:00", // still holds 5 minutes on
		"42 n1 gpu_idle since 10:00 told 10:03 seen 10:10 until 10:10", // the busy minute
		"42 n1 gpu_idle since 10:11 told 10:03 seen 10:14 until 00:00", // idle as long again
	}
	if d := cmp.Diff(want, ups); d != "" {
		t.Errorf("notices up the tree (-want +got):\n%s", d)
	}
	if got := s.commands(t); len(got) != 1 {
		t.Errorf("the user told %d times (%q), want once", len(got), got)
	}
}
