package daemon

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/internal/tick"
	"github.com/persyst/persyst/sample"
)

// suspendEvery is how often the measured jobs' cgroups are looked at for Slurm's
// suspension: a suspended stretch is measured to within it.
const suspendEvery = time.Second

// suspendWatch reads a measured job as soon as Slurm froze its cgroups (suspended it:
// scontrol suspend, gang scheduling, PreemptMode=SUSPEND) or thawed them, so that its
// intervals begin and end with the suspension, which is not judged (measure's suspend
// source). It costs an fstat of each job's cgroup directories and a pread of one small
// file per step every period (measure.Freezer keeps them open).
type suspendWatch struct {
	meters *meterSet
	log    zerolog.Logger
}

// run looks every period until ctx is done.
func (w suspendWatch) run(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, w.look)
}

// look reads each measured job whose frozen state changed since the last look.
func (w suspendWatch) look() {
	for _, jm := range w.meters.sorted() {
		st, job := jm.now()
		if st != measuring {
			continue
		}
		frozen, _ := job.Meter().Frozen()
		if !jm.setFrozen(frozen) {
			continue
		}
		reason := sample.Resume
		if frozen {
			reason = sample.Suspend
		}
		w.log.Info().Uint32("job", jm.id).Bool("suspended", frozen).Msg("Slurm suspended or resumed the job")
		if _, err := job.Read(reason); err != nil {
			w.log.Debug().Err(err).Uint32("job", jm.id).Msg("read at a suspension's start or end incomplete")
		}
	}
}
