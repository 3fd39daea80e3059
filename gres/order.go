package gres

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/hostfs"
)

// Run runs a command and returns what it printed, its standard output and error together.
type Run func(ctx context.Context, name string, args ...string) ([]byte, error)

// Options configure Start.
type Options struct {
	Node string    // this node's Slurm name (slurmd -N)
	Host hostfs.FS // where the device files lie (the node's root)
	Run  Run       // nil: ExecRun
	// Timeout bounds slurmd's run (0: 30 s; with AutoDetect it starts the GPU library).
	Timeout time.Duration
}

// Order is the node's GPUs in Slurm's order, asked of slurmd once, in the background.
type Order struct {
	done chan struct{}
	mu   sync.Mutex
	gpus []GPU
	err  error
}

// Start asks slurmd for the node's GPUs in the background; Get says what it answered.
func Start(ctx context.Context, o Options) *Order {
	if o.Run == nil {
		o.Run = ExecRun
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	ord := &Order{done: make(chan struct{})}
	go func() {
		defer close(ord.done)
		gpus, err := load(ctx, o)
		ord.mu.Lock()
		ord.gpus, ord.err = gpus, err
		ord.mu.Unlock()
	}()
	return ord
}

// Known is an Order already answered, for tests and for a node told its GPUs' order.
func Known(gpus []GPU, err error) *Order {
	ord := &Order{done: make(chan struct{}), gpus: gpus, err: err}
	close(ord.done)
	return ord
}

func load(ctx context.Context, o Options) ([]GPU, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	args := []string{"-G"}
	if o.Node != "" {
		args = append(args, "-N", o.Node)
	}
	out, err := o.Run(ctx, "slurmd", args...)
	if err != nil {
		return nil, fmt.Errorf("slurmd -G: %w", err)
	}
	gpus, err := Parse(strings.NewReader(string(out)))
	if err != nil {
		return nil, err
	}
	Resolve(gpus, func(path string) (uint32, uint32, error) {
		var st unix.Stat_t
		if err := unix.Stat(o.Host.Path(path), &st); err != nil {
			return 0, 0, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return 0, 0, ErrNotDevice
		}
		return unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), nil
	})
	return gpus, nil
}

// Get returns the GPUs slurmd gave, or why there are none; ready is false while slurmd
// has not answered.
func (ord *Order) Get() (gpus []GPU, ready bool, err error) {
	select {
	case <-ord.done:
	default:
		return nil, false, nil
	}
	ord.mu.Lock()
	defer ord.mu.Unlock()
	return ord.gpus, true, ord.err
}

// Wait waits for slurmd's answer (or ctx's end).
func (ord *Order) Wait(ctx context.Context) ([]GPU, error) {
	select {
	case <-ord.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	gpus, _, err := ord.Get()
	return gpus, err
}

// ExecRun runs a command found in PATH or in /usr/sbin (where Debian's slurmd lies, and
// which a daemon's PATH may lack), its output kept up to maxOutput bytes.
func ExecRun(ctx context.Context, name string, args ...string) ([]byte, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		if p, err2 := exec.LookPath("/usr/sbin/" + name); err2 == nil {
			path, err = p, nil
		}
	}
	if err != nil {
		return nil, err
	}
	var out capped
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.b, fmt.Errorf("%w: %s", err, lastLines(out.b))
	}
	return out.b, nil
}

// capped keeps the first maxOutput bytes written to it.
type capped struct{ b []byte }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// lastLines is the last lines of out that say what went wrong (up to 3, cut to 300
// bytes): slurmd ends with "slurmd initialization failed" after the cause.
func lastLines(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	lines = lines[max(0, len(lines)-3):]
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	l := strings.Join(lines, "; ")
	if len(l) > 300 {
		l = l[:300] + "…"
	}
	return l
}
