package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/digest"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/internal/ratelog"
	"github.com/persyst/persyst/jobmap"
	"github.com/persyst/persyst/sample"
)

// NoticeConfig says when a running job that holds resources without using them is told,
// before its end: its GPUs all idle for IdleGPUAfter, or its CPUs under a tenth busy for
// IdleCPUAfter (0: never). The job's user gets one notice per job and reason: a line in
// the job's output file and a mail; the site's Command, if set, is run with the job, its
// user and the reason.
type NoticeConfig struct {
	IdleGPUAfter, IdleCPUAfter time.Duration
	// Command is run as `Command JOBID USER REASON IDLE_SECONDS` (NoticeCommand; ""
	// none), within CommandTimeout (default 60 s).
	Command        string
	CommandTimeout time.Duration
	// Mail sends the user a mail (nil: none).
	Mail func(ctx context.Context, to, subject, body string) error
	// Dir records the notices sent (StateDir/notices), so that a restarted daemon sends
	// none twice ("": kept in memory only).
	Dir string
	// Up, if set, hands what a job was told up the tree (Uplink.KeepNotice): when it is
	// told, every digest.NoticeRefresh while the reason holds, and when it stops
	// holding. It never blocks.
	Up func(digest.Notice)
}

// The reasons a job is told.
const (
	noticeGPUIdle = digest.NoticeGPUIdle
	noticeCPUIdle = digest.NoticeCPUIdle
)

// idleCPUShare: a job whose CPUs were busy less than this share of its allocation is
// idle.
const idleCPUShare = 0.1

// noticer judges the running jobs' latest intervals for notices. It owns the jobs'
// idle stretches, the notices sent, and their lock.
type noticer struct {
	cfg     NoticeConfig
	append  func(ctx context.Context, t digest.Target, text []byte) error
	metrics *exporter.Daemon
	log     zerolog.Logger
	failed  *ratelog.Log

	mu   sync.Mutex
	jobs map[uint32]*noticeState
	// running counts the notices being sent, so that tests can wait for them.
	running sync.WaitGroup
}

// noticeState is one run of a job: since when each reason held (zero: it does not), the
// latest interval judged, the reasons told and when, and what went up the tree of each.
type noticeState struct {
	run   time.Time
	since map[string]time.Time
	last  time.Time
	sent  map[string]bool
	told  map[string]time.Time
	up    map[string]upState
}

// upState is what the tree was last told of a reason: since when it held, when that was
// said, and whether it held then.
type upState struct {
	since, at time.Time
	holds     bool
}

func newNoticer(cfg NoticeConfig, appendText func(ctx context.Context, t digest.Target, text []byte) error, metrics *exporter.Daemon, log zerolog.Logger, now func() time.Time) *noticer {
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = time.Minute
	}
	return &noticer{cfg: cfg, append: appendText, metrics: metrics, log: log, failed: ratelog.New(log, 10*time.Second, now),
		jobs: map[uint32]*noticeState{}}
}

// on says whether any notice is on.
func (n *noticer) on() bool { return n != nil && (n.cfg.IdleGPUAfter > 0 || n.cfg.IdleCPUAfter > 0) }

// idleReasons says which reasons an interval of a job with cpus CPUs holds: all its GPUs
// ran nothing (GPUs shared with processes outside the job are not judged: their values
// are missing), its CPUs were busy less than idleCPUShare of the allocation.
func idleReasons(s sample.Sample, cpus int) map[string]bool {
	out := map[string]bool{}
	if gpus := s.Job[sample.GPUs]; gpus > 0 {
		if unused, ok := s.Rate(sample.GPUUnusedSeconds); ok && unused >= gpus-0.01 {
			out[noticeGPUIdle] = true
		}
	}
	if busy, ok := s.CPUsBusy(); ok && cpus > 0 && busy < idleCPUShare*float64(cpus) {
		out[noticeCPUIdle] = true
	}
	return out
}

// judge takes a running job's latest interval on its batch host: a reason that has held
// for its duration, not told yet, is told (in the background). facts is what the job map
// said of the job at its start (nil: nothing; then no line goes into its output).
func (n *noticer) judge(j *Job, s sample.Sample, cpus int, facts *jobmap.Job) {
	if !n.on() || j.State != Running || s.Seconds <= 0 {
		return
	}
	n.mu.Lock()
	st := n.jobs[j.JobID]
	if st == nil || !st.run.Equal(j.Recorded) {
		st = &noticeState{run: j.Recorded, since: map[string]time.Time{}, sent: map[string]bool{}, told: map[string]time.Time{},
			up: map[string]upState{}}
		n.jobs[j.JobID] = st
	}
	if !s.Time.After(st.last) {
		n.mu.Unlock()
		return // judged already
	}
	st.last = s.Time
	idle := idleReasons(s, cpus)
	var due []string
	for reason, after := range n.after() {
		if !idle[reason] {
			delete(st.since, reason)
			continue
		}
		if st.since[reason].IsZero() {
			st.since[reason] = s.From()
		}
		if after > 0 && !st.sent[reason] && s.Time.Sub(st.since[reason]) >= after {
			st.sent[reason] = true
			st.told[reason] = s.Time
			due = append(due, reason)
		}
	}
	since := map[string]time.Time{}
	for _, r := range due {
		since[r] = st.since[r]
	}
	ups := n.ups(j, st, s, idle)
	n.mu.Unlock()
	for _, u := range ups {
		n.cfg.Up(u)
	}
	for _, r := range due {
		n.running.Add(1)
		go func() {
			defer n.running.Done()
			n.tell(j, r, since[r], s, facts)
		}()
	}
}

// after is how long each reason must hold before the job is told (0: never).
func (n *noticer) after() map[string]time.Duration {
	return map[string]time.Duration{noticeGPUIdle: n.cfg.IdleGPUAfter, noticeCPUIdle: n.cfg.IdleCPUAfter}
}

// ups is what goes up the tree of a job's told reasons after interval s (n.mu held): a
// reason that holds (again as long as the notice asks, after it stopped), when it was
// not said to or not for digest.NoticeRefresh; one that stopped holding, once.
func (n *noticer) ups(j *Job, st *noticeState, s sample.Sample, idle map[string]bool) []digest.Notice {
	if n.cfg.Up == nil {
		return nil
	}
	var out []digest.Notice
	after := n.after()
	for _, reason := range slices.Sorted(maps.Keys(st.told)) {
		told, u := st.told[reason], st.up[reason]
		held := idle[reason] && s.Time.Sub(st.since[reason]) >= after[reason]
		switch {
		case held && (!u.holds || s.Time.Sub(u.at) >= digest.NoticeRefresh):
			u = upState{since: st.since[reason], at: s.Time, holds: true}
			out = append(out, digest.Notice{JobID: j.JobID, Node: j.Node, Reason: reason, Since: u.since, Told: told, Seen: s.Time})
		case !idle[reason] && u.holds:
			u.holds = false
			out = append(out, digest.Notice{JobID: j.JobID, Node: j.Node, Reason: reason, Since: u.since, Told: told, Seen: s.From(), Until: s.From()})
		}
		st.up[reason] = u
	}
	return out
}

// idleFor says how long each reason has held for a running job (for the per-job gauge).
func (n *noticer) idleFor(id uint32) map[string]float64 {
	out := map[string]float64{}
	if n == nil {
		return out
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if st := n.jobs[id]; st != nil {
		for r, t := range st.since {
			out[r] = st.last.Sub(t).Seconds()
		}
	}
	return out
}

// forget drops the jobs keep says no.
func (n *noticer) forget(keep func(uint32) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id := range n.jobs {
		if !keep(id) {
			delete(n.jobs, id)
		}
	}
}

// claim records a notice before it is sent: false when a daemon sent it before (its file
// exists). Without a directory the notices are only in memory.
func (n *noticer) claim(j *Job, reason string) (bool, error) {
	if n.cfg.Dir == "" {
		return true, nil
	}
	if err := os.MkdirAll(n.cfg.Dir, 0o700); err != nil {
		return false, err
	}
	name := filepath.Join(n.cfg.Dir, fmt.Sprintf("%d-%d-%s", j.JobID, j.Recorded.Unix(), reason))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, f.Close()
}

// tell sends one notice: the line in the job's output, the mail, the site's command.
// Each part that fails is logged (one line in 10 s) and counted; none is tried again.
func (n *noticer) tell(j *Job, reason string, since time.Time, s sample.Sample, facts *jobmap.Job) {
	ok, err := n.claim(j, reason)
	if err != nil || !ok {
		if err != nil {
			n.failed.Warn().Err(err).Uint32("job", j.JobID).Msg("notice not recorded: not sent (at most one line in 10 s)")
		}
		return
	}
	idle := s.Time.Sub(since).Round(time.Second)
	text := noticeText(j, reason, since, idle, s)
	n.log.Info().Uint32("job", j.JobID).Str("reason", reason).Dur("idle", idle).Msg("job told it holds resources it does not use")
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.CommandTimeout+10*time.Second)
	defer cancel()
	if path := outputPath(facts); path != "" && n.append != nil {
		err := n.append(ctx, digest.Target{Path: path, UID: j.UID, GID: j.GID}, []byte(text))
		n.count(reason, "output", err)
	}
	if n.cfg.Mail != nil && j.User != "" {
		subject := fmt.Sprintf("persyst: job %d %s", j.JobID, digest.NoticeSubject(reason))
		err := n.cfg.Mail(ctx, j.User, subject, text)
		n.count(reason, "mail", err)
	}
	if n.cfg.Command != "" {
		n.count(reason, "command", n.command(ctx, j, reason, idle))
	}
}

// outputPath is the job's output file, as the digest finds it ("": none known).
func outputPath(facts *jobmap.Job) string {
	if facts == nil || facts.Stdout == "" {
		return ""
	}
	if filepath.IsAbs(facts.Stdout) {
		return facts.Stdout
	}
	return filepath.Join(facts.WorkDir, facts.Stdout)
}

// noticeText is the notice as the user reads it, in the job's output and the mail.
func noticeText(j *Job, reason string, since time.Time, idle time.Duration, s sample.Sample) string {
	var what, advice string
	switch reason {
	case noticeGPUIdle:
		gpus := int(s.Job[sample.GPUs])
		what = fmt.Sprintf("its %d GPU%s ran nothing", gpus, map[bool]string{true: "s", false: ""}[gpus != 1])
		advice = "If the job waits for something, let it; if not, end it (scancel " + strconv.FormatUint(uint64(j.JobID), 10) +
			") and ask for GPUs only when the program will use them."
	default:
		what = "its CPUs were busy less than a tenth of the time"
		advice = "If the job waits for something, let it; if not, end it (scancel " + strconv.FormatUint(uint64(j.JobID), 10) +
			") and hold CPUs only while the program computes."
	}
	return fmt.Sprintf("persyst: job %d (%s): %s for %s, since %s UTC, on %s. %s Others wait for them. This notice comes once.\n",
		j.JobID, digest.NoticeSubject(reason), what, digest.Duration(idle.Seconds()), since.UTC().Format("15:04"), j.Node, strings.TrimSpace(advice))
}

// command runs the site's NoticeCommand with the job, its user, the reason and the
// seconds it held, within the timeout; its output goes to the log (bounded).
func (n *noticer) command(ctx context.Context, j *Job, reason string, idle time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.CommandTimeout)
	defer cancel()
	user := j.User
	if user == "" {
		user = strconv.FormatUint(uint64(j.UID), 10)
	}
	cmd := exec.CommandContext(ctx, n.cfg.Command, strconv.FormatUint(uint64(j.JobID), 10), user, reason, strconv.FormatInt(int64(idle.Seconds()), 10))
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	if len(out) > 1024 {
		out = out[:1024]
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %s", n.cfg.Command, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// count counts a part of a notice sent or failed, and logs a failure.
func (n *noticer) count(reason, part string, err error) {
	result := "sent"
	if err != nil {
		result = "failed"
		if errors.Is(err, digest.ErrNotRegular) {
			result = "no_file"
		} else {
			n.failed.Warn().Err(err).Str("reason", reason).Str("part", part).Msg("notice not sent (at most one line in 10 s)")
		}
	}
	n.metrics.Notice(reason, part, result)
}

// wait waits for the notices being sent (tests).
func (n *noticer) wait() { n.running.Wait() }
