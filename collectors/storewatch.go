package collectors

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/store"
	"github.com/persyst/persyst/internal/tick"
)

// health is what watchStore asks a store (store.Admin).
type health interface {
	Pending() error
	Ping(ctx context.Context) error
}

var _ health = store.Admin{}

// storeCheckEvery is how often the frontend asks whether the site's store answers.
const storeCheckEvery = 10 * time.Second

// watchStore says in the log, once each time it changes, whether the site's store
// answers, and gives it to up (the metrics), until ctx is done: at start (a store the
// frontend could not open yet, store.Options.Later), then every interval. While it does
// not answer, the reports the frontend cannot keep are refused, and their batch hosts
// send them again for 15 minutes (uplink): a short outage loses nothing.
func watchStore(ctx context.Context, st health, where string, every time.Duration, up func(bool), log zerolog.Logger) {
	ok := st.Pending() == nil
	if !ok {
		log.Error().Err(st.Pending()).Str("store", where).Dur("retry", every).
			Msg("the site's store cannot be opened: the frontend runs without it, refuses the jobs' reports it cannot keep (their batch hosts send them again for 15 minutes) and tries again (said again once it answers)")
	}
	up(ok)
	tick.Every(ctx, every, func() {
		pctx, cancel := context.WithTimeout(ctx, every)
		err := st.Ping(pctx)
		cancel()
		if (err == nil) == ok {
			return
		}
		ok = err == nil
		up(ok)
		if ok {
			log.Info().Str("store", where).Msg("the site's store answers: reports are kept again")
			return
		}
		log.Error().Err(err).Str("store", where).
			Msg("the site's store does not answer: the jobs' reports are refused meanwhile (their batch hosts send them again for 15 minutes)")
	})
}
