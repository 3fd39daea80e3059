package nvml

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// DefaultInterval is how often the helper samples each GPU. NVML's calls cost the CPU:
// on an H200 (driver 580) the utilization samples 2.5 ms, GPM 1.8 ms, energy 4 ms a call
// (bench/gpu_check.sh part 3): sampled every 5 s a GPU costs 0.1 % of a core, every
// second 0.5 %. The driver keeps at least 14 s of utilization samples, and GPM's
// activities are exact between any two samples, so 5 s loses nothing but the resolution
// of the memory peak.
const DefaultInterval = 5 * time.Second

// Options configure Start.
type Options struct {
	// Path is the helper program (persyst-nvml); "" finds it (HelperPath).
	Path string
	// Library, if set, is the NVML library to load instead of libnvidia-ml.so.1 (the
	// tests' fake).
	Library string
	// Env is added to the helper's environment (the fake's scenario).
	Env []string
	// Interval is how often the helper samples each GPU between reads (default
	// DefaultInterval).
	Interval time.Duration
	// StartTimeout bounds NVML's start (it can take seconds without persistence mode;
	// default 30 s); Timeout bounds each read (default 5 s).
	StartTimeout, Timeout time.Duration
	// Retry is how long after a failed or stopped helper the next one is started (default
	// 5 minutes): a driver that hangs is not hammered.
	Retry time.Duration
	Log   zerolog.Logger
	Now   func() time.Time
}

// HelperPath finds persyst-nvml: beside the running executable (a build tree), else in
// the package's directory.
func HelperPath() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "persyst-nvml")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return "/usr/lib/persyst/persyst-nvml"
}

// Helper owns one persyst-nvml process and the lock its requests take. Its methods are
// safe for concurrent use; reads that overlap in time share one answer.
type Helper struct {
	o Options

	mu      sync.Mutex
	proc    *exec.Cmd
	in      io.WriteCloser
	lines   chan lineOrErr
	exited  chan error // why the helper ended
	hello   Hello
	err     error     // why there are no readings now (nil: the helper answers)
	retryAt time.Time // when a stopped helper may be started again
	last    []Reading
	lastAt  time.Time
	closed  bool
}

type lineOrErr struct {
	readings []Reading
	err      error
}

// New returns a helper that starts persyst-nvml on first use (Start).
func New(o Options) *Helper {
	if o.Path == "" {
		o.Path = HelperPath()
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Retry <= 0 {
		o.Retry = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Helper{o: o}
}

// Start starts the helper if it is not running (and may be started again now) and
// returns its greeting, or why there are no GPUs to measure.
func (h *Helper) Start(ctx context.Context) (Hello, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.startLocked(ctx)
}

// startLocked is Start with the helper's lock held: it starts persyst-nvml, reads its
// greeting within StartTimeout, and keeps the process and its answers' channels.
func (h *Helper) startLocked(ctx context.Context) (Hello, error) {
	if h.proc != nil {
		return h.hello, nil
	}
	if h.closed {
		return Hello{}, errors.New("GPU helper closed")
	}
	if h.err != nil && h.o.Now().Before(h.retryAt) {
		return Hello{}, h.err
	}
	cmd := helperCommand(h.o)
	in, err := cmd.StdinPipe()
	if err != nil {
		return Hello{}, h.fail(fmt.Errorf("persyst-nvml: %w", err))
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Hello{}, h.fail(fmt.Errorf("persyst-nvml: %w", err))
	}
	if err := cmd.Start(); err != nil {
		return Hello{}, h.fail(fmt.Errorf("GPU helper not started: %w", err))
	}
	helloc := make(chan greeting, 1)
	lines := make(chan lineOrErr, 1)
	exited := make(chan error, 1)
	go readHelper(cmd, bufio.NewReaderSize(out, 1<<16), helloc, lines, exited)
	res := awaitHello(ctx, helloc, h.o.StartTimeout)
	if res.err != nil {
		_ = cmd.Process.Kill()
		_ = in.Close()
		return Hello{}, h.fail(res.err)
	}
	h.proc, h.in, h.lines, h.exited, h.hello, h.err = cmd, in, lines, exited, res.hello, nil
	h.o.Log.Info().Str("driver", h.hello.Driver).Int("gpus", len(h.hello.Devices)).
		Strs("absent", h.hello.Absent).Msg("NVIDIA GPUs measured through NVML")
	return h.hello, nil
}

// helperCommand is the persyst-nvml command of o, not started: its sampling interval,
// the library it loads, its environment, and its standard error to the log.
func helperCommand(o Options) *exec.Cmd {
	args := []string{"-i", strconv.FormatInt(o.Interval.Milliseconds(), 10)}
	if o.Library != "" {
		args = append(args, "-l", o.Library)
	}
	cmd := exec.Command(o.Path, args...)
	cmd.Env = append(os.Environ(), o.Env...)
	// No Pdeathsig: it fires when the OS thread that started the helper ends, and Go ends
	// threads (a goroutine that locked its thread, as the digest's writer does); the
	// helper ends when its input closes with the daemon. Its own group: a terminal's
	// signals to the daemon are not its.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = &stderrLog{log: o.Log}
	return cmd
}

// greeting is the helper's first answer: its greeting, or why there is none.
type greeting struct {
	hello Hello
	err   error
}

// readHelper reads the helper's output, r, for as long as it runs: its greeting into
// helloc, then each answer into lines, unless nobody waits for it (the helper was
// stopped). When the output ends or breaks the protocol, it waits for the process and
// sends why it ended into exited.
func readHelper(cmd *exec.Cmd, r *bufio.Reader, helloc chan<- greeting, lines chan<- lineOrErr, exited chan<- error) {
	// Wait closes the pipe: only once everything is read.
	defer func() {
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exited")
		}
		exited <- fmt.Errorf("persyst-nvml %w", err)
	}()
	hello, err := parseHello(r)
	helloc <- greeting{hello, err}
	if err != nil {
		return
	}
	for {
		rs, err := parseRead(r)
		select {
		case lines <- lineOrErr{readings: rs, err: err}:
		default: // nobody waits: the helper was stopped
		}
		if err != nil {
			return
		}
	}
}

// awaitHello waits for the helper's greeting, at most timeout (NVML's start can take
// seconds) and no longer than ctx lasts.
func awaitHello(ctx context.Context, helloc <-chan greeting, timeout time.Duration) greeting {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case res := <-helloc:
		return res
	case <-timer.C:
		return greeting{err: fmt.Errorf("NVML did not start within %s", timeout)}
	case <-ctx.Done():
		return greeting{err: ctx.Err()}
	}
}

// fail records err as why GPUs are not measured, until Retry has passed.
func (h *Helper) fail(err error) error {
	var u *Unavailable
	if !errors.As(err, &u) || h.err == nil || h.err.Error() != err.Error() {
		lvl := h.o.Log.Warn()
		if errors.As(err, &u) && u.What == "library" {
			lvl = h.o.Log.Debug() // a node without NVIDIA's driver: nothing to say
		}
		lvl.Err(err).Dur("retry_in", h.o.Retry).Msg("GPUs not measured")
	}
	h.err = err
	h.retryAt = h.o.Now().Add(h.o.Retry)
	return err
}

// stop kills the helper (a request outlived its deadline, or it broke the protocol).
func (h *Helper) stop(err error) error {
	if h.proc != nil {
		_ = h.proc.Process.Kill()
		_ = h.in.Close()
		h.proc, h.in, h.lines, h.exited = nil, nil, nil, nil
	}
	return h.fail(err)
}

// stderrLog logs what the helper writes to its standard error, a line at a time, at
// most 4 KiB of it in all (it writes nothing normally).
type stderrLog struct {
	log  zerolog.Logger
	n    int
	part []byte
}

func (s *stderrLog) Write(p []byte) (int, error) {
	for _, c := range p {
		if s.n >= 4096 {
			break
		}
		s.n++
		if c == '\n' {
			s.log.Warn().Str("stderr", string(s.part)).Msg("persyst-nvml")
			s.part = s.part[:0]
			continue
		}
		s.part = append(s.part, c)
	}
	return len(p), nil
}

// Read returns every GPU's reading now. Reads within fresh of the last answer share it
// (the jobs of one cycle boundary ask one after another).
func (h *Helper) Read(ctx context.Context, fresh time.Duration) ([]Reading, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fresh > 0 && h.last != nil && h.o.Now().Sub(h.lastAt) <= fresh {
		return h.last, nil
	}
	if _, err := h.startLocked(ctx); err != nil {
		return nil, err
	}
	select {
	case err := <-h.exited:
		return nil, h.stop(err)
	default:
	}
	if _, err := io.WriteString(h.in, "read\n"); err != nil {
		return nil, h.stop(fmt.Errorf("GPU helper gone: %w", err))
	}
	timer := time.NewTimer(h.o.Timeout)
	defer timer.Stop()
	select {
	case res := <-h.lines:
		if res.err != nil {
			select {
			case err := <-h.exited: // the reason is the exit, not the cut answer
				return nil, h.stop(err)
			case <-time.After(100 * time.Millisecond):
			}
			return nil, h.stop(fmt.Errorf("GPU helper: %w", res.err))
		}
		h.last, h.lastAt = res.readings, h.o.Now()
		return res.readings, nil
	case <-timer.C:
		return nil, h.stop(fmt.Errorf("NVML did not answer within %s (a hung driver?); its helper was stopped", h.o.Timeout))
	case <-ctx.Done():
		return nil, h.stop(ctx.Err())
	}
}

// Close stops the helper.
func (h *Helper) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.proc != nil {
		_, _ = io.WriteString(h.in, "quit\n")
		_ = h.in.Close()
		p := h.proc
		h.proc, h.in, h.lines, h.exited = nil, nil, nil, nil
		// A helper stuck in the driver does not read "quit".
		go func() {
			time.Sleep(2 * time.Second)
			_ = p.Process.Kill()
		}()
	}
	return nil
}
