package jobmap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/persyst/persyst/config"

	"github.com/rs/zerolog"
)

// Source is where jobs come from: slurmrestd or Slurm's commands.
type Source interface {
	Name() string
	Jobs(ctx context.Context) ([]*Job, error)
	Job(ctx context.Context, id string) (*Job, error)
}

// Map reads jobs from the primary source (slurmrestd, when configured) and falls back to
// the CLI source when the primary fails. The switch, and the return, are logged once,
// not per call.
type Map struct {
	primary, fallback Source
	log               zerolog.Logger
	mu                sync.Mutex
	usingFallback     bool
	named             bool // the primary source's name was logged (with its data parser)
}

// NewMap returns a map over primary (may be nil: no slurmrestd configured) and fallback.
func NewMap(primary, fallback Source, log zerolog.Logger) *Map {
	m := &Map{primary: primary, fallback: fallback, log: log}
	if primary == nil {
		log.Info().Str("source", fallback.Name()).Msg("jobmap: no slurmrestd configured; using Slurm's commands")
	}
	return m
}

// Jobs returns every job Slurm knows.
func (m *Map) Jobs(ctx context.Context) ([]*Job, error) {
	return try(m, ctx, func(s Source) ([]*Job, error) { return s.Jobs(ctx) })
}

// Running returns the jobs that hold nodes now, with their nodes, in one call for the
// whole cluster.
func (m *Map) Running(ctx context.Context) ([]*Job, error) {
	jobs, err := m.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	out := jobs[:0]
	for _, j := range jobs {
		if j.Running() {
			out = append(out, j)
		}
	}
	return out, nil
}

// Job returns one job ("123" or "120_3"); an error wrapping ErrNoJob when Slurm does not
// know it (a vanished job is a normal result, not a failure of the source).
func (m *Map) Job(ctx context.Context, id string) (*Job, error) {
	return try(m, ctx, func(s Source) (*Job, error) { return s.Job(ctx, id) })
}

// NodeAddrs returns the nodes' addresses (Slurm's NodeAddr) by node name.
func (m *Map) NodeAddrs(ctx context.Context) (map[string]string, error) {
	return try(m, ctx, func(s Source) (map[string]string, error) {
		a, ok := s.(interface {
			NodeAddrs(context.Context) (map[string]string, error)
		})
		if !ok {
			return nil, fmt.Errorf("%s: no node addresses", s.Name())
		}
		return a.NodeAddrs(ctx)
	})
}

func try[T any](m *Map, ctx context.Context, f func(Source) (T, error)) (T, error) {
	if m.primary != nil {
		v, err := f(m.primary)
		if err == nil || errors.Is(err, ErrNoJob) {
			m.mu.Lock()
			if !m.named {
				m.named = true
				m.log.Info().Str("source", m.primary.Name()).Msg("jobmap: reading jobs from slurmrestd")
			}
			if m.usingFallback {
				m.log.Info().Str("source", m.primary.Name()).Msg("jobmap: slurmrestd answers again")
				m.usingFallback = false
			}
			m.mu.Unlock()
			return v, err
		}
		if ctx.Err() != nil {
			return v, err
		}
		m.mu.Lock()
		if !m.usingFallback {
			m.log.Warn().Err(err).Str("fallback", m.fallback.Name()).Msg("jobmap: slurmrestd failed; using Slurm's commands until it answers again")
			m.usingFallback = true
		}
		m.mu.Unlock()
	}
	v, err := f(m.fallback)
	if err != nil && !errors.Is(err, ErrNoJob) {
		var zero T
		return zero, fmt.Errorf("jobmap: %s: %w", m.fallback.Name(), err)
	}
	return v, err
}

// FromConfig builds the map persyst.conf describes: slurmrestd first when SlurmRestd is
// set, Slurm's commands always as the fallback.
func FromConfig(c config.Config, log zerolog.Logger) (*Map, error) {
	srcs, err := SourcesFromConfig(c, log)
	if err != nil {
		return nil, err
	}
	if len(srcs) == 1 {
		return NewMap(nil, srcs[0], log), nil
	}
	return NewMap(srcs[0], srcs[1], log), nil
}

// SourcesFromConfig returns the sources persyst.conf gives, the first asked first:
// slurmrestd (SlurmRestd=) if set, then Slurm's commands.
func SourcesFromConfig(c config.Config, log zerolog.Logger) ([]Source, error) {
	var out []Source
	if c.SlurmRestd != "" {
		rc := RestConfig{URL: c.SlurmRestd, User: c.SlurmRestdUser, Timeout: c.SlurmRestdTimeout}
		if c.SlurmRestdTokenFile != "" {
			b, err := os.ReadFile(c.SlurmRestdTokenFile)
			if err != nil {
				return nil, fmt.Errorf("SlurmRestdTokenFile: %w", err)
			}
			rc.Token = strings.TrimSpace(string(b))
		}
		rs, err := NewRestSource(rc)
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return append(out, NewCLISource(nil, 0, log)), nil
}
