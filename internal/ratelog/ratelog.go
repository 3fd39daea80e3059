// Package ratelog writes log lines that others can cause (refused connections, refused
// reports) without letting a flood fill the log: at most one line in an interval, which
// says how many happened since the last line.
package ratelog

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Log bounds one kind of line.
type Log struct {
	log   zerolog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	last  time.Time
	since int
}

// New returns a Log writing to log at most once every every (now: the clock; nil: the
// wall clock).
func New(log zerolog.Logger, every time.Duration, now func() time.Time) *Log {
	if now == nil {
		now = time.Now
	}
	return &Log{log: log, every: every, now: now}
}

// Warn notes one occurrence and returns the line to write, at level warn, with
// since_last_line (the occurrences since the last line, this one included); nil, on
// which zerolog's calls do nothing, within the interval.
func (l *Log) Warn() *zerolog.Event {
	l.mu.Lock()
	l.since++
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.mu.Unlock()
		return nil
	}
	n := l.since
	l.last, l.since = now, 0
	l.mu.Unlock()
	return l.log.Warn().Int("since_last_line", n)
}
