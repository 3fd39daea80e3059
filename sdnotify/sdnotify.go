// Package sdnotify tells systemd about a persyst service (Type=notify units): READY once
// its listeners are bound, the watchdog fed at half its interval, STOPPING when it stops.
// Outside systemd (no NOTIFY_SOCKET) every call does nothing.
package sdnotify

import (
	"context"
	"sync"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"

	"github.com/persyst/persyst/internal/tick"
)

// Ready says the service is ready: call it only after its listeners are bound.
func Ready(log zerolog.Logger) {
	if _, err := sddaemon.SdNotify(false, sddaemon.SdNotifyReady); err != nil {
		log.Warn().Err(err).Msg("sd_notify READY failed")
	}
}

// Stopping says the service is stopping.
func Stopping() { _, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyStopping) }

// Watchdog feeds systemd's watchdog at half its interval until ctx is done, when the
// unit asks for one (WatchdogSec=).
func Watchdog(ctx context.Context, log zerolog.Logger) {
	iv, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil || iv <= 0 {
		return
	}
	tick.Every(ctx, iv/2, func() {
		if _, err := sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog); err != nil {
			log.Warn().Err(err).Msg("sd_notify WATCHDOG failed")
		}
	})
}

// Serving runs Ready, then Watchdog until ctx is done, and Stopping when it is: for a
// service whose listeners are bound. The function it returns sends Stopping if that has
// not been sent yet; the service defers it, since its process may exit before the
// goroutine that watches ctx runs (systemd, and a test, would then never hear it).
func Serving(ctx context.Context, log zerolog.Logger) (stopping func()) {
	Ready(log)
	var once sync.Once
	stop := func() { once.Do(Stopping) }
	go func() {
		Watchdog(ctx, log) // returns at once when the unit asks for no watchdog
		<-ctx.Done()
		stop()
	}()
	return stop
}
