// Package tick runs a function at a fixed interval in the background loops of persyst's
// services (reconciling jobs with Slurm, watching suspensions, retrying a listener,
// systemd's watchdog): the first call one interval after the start, none after the
// context is done.
package tick

import (
	"context"
	"time"
)

// Every calls f every interval until ctx is done.
func Every(ctx context.Context, interval time.Duration, f func()) {
	Until(ctx, interval, func() bool { f(); return false })
}

// Until calls f every interval until f returns true or ctx is done.
func Until(ctx context.Context, interval time.Duration, f func() (done bool)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if f() {
			return
		}
	}
}
