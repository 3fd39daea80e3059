package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// opener opens a database that did not answer when its store was opened (a MariaDB
// down or refusing the frontend at its start: Options.Later): each use of the store
// tries again, at most once per every, and fails with the latest reason meanwhile. A
// nil *opener is a database open from the start.
type opener struct {
	run   func(ctx context.Context) error // reach the database and bring its schema up to date
	every time.Duration
	now   func() time.Time

	open atomic.Bool
	mu   sync.Mutex // held while run runs: one try at a time
	last time.Time  // the latest try
	err  error      // its failure
}

// ready opens the database if it is not open yet, trying at most once per o.every.
func (o *opener) ready(ctx context.Context) error {
	if o == nil || o.open.Load() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open.Load() {
		return nil
	}
	if now := o.now(); o.last.IsZero() || now.Sub(o.last) >= o.every {
		o.last = now
		if o.err = o.run(ctx); o.err == nil {
			o.open.Store(true)
		}
	}
	return o.err
}

// pending is why the database is not open yet (nil once it is).
func (o *opener) pending() error {
	if o == nil || o.open.Load() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Pending says why a store opened with Options.Later is not open yet: its database has
// not answered since (nil once it has, and always for a SQLite file).
func (a Admin) Pending() error { return a.s.w.opened.pending() }

// Ping says whether the store's database answers now; a store not open yet
// (Options.Later) is opened first, as its next use would.
func (a Admin) Ping(ctx context.Context) error {
	if err := a.s.w.opened.ready(ctx); err != nil {
		return err
	}
	return a.s.w.db.PingContext(ctx)
}
