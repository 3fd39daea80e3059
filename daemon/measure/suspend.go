package measure

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// Whether Slurm held the job suspended (scontrol suspend, gang scheduling, PreemptMode=
// SUSPEND): slurmstepd stops the tasks and freezes the step's cgroup (cgroup v1: the
// freezer controller's freezer.state, FROZEN; cgroup v2: cgroup.freeze in the step's
// user cgroup, whose cgroup.events says "frozen 1"). An interval is counted suspended
// when the job was frozen at its start: the node daemon reads the job again as soon as
// it sees it frozen or thawed (SuspendWatch), so that intervals begin and end with the
// suspension, to within that watch's period. Slurm stops the tasks with SIGTSTP
// suspendGrace before it freezes them (slurmstepd's suspend_grace_time): the interval
// that ends at a freeze counts suspendGrace as suspended, which may be longer than the
// interval (the stretch then begins before it; sample.AddSuspended).
var suspendRegistration = Registration{Name: "suspend", Default: true, New: newSuspend,
	Metrics: vocabulary(sample.SuspendedSeconds)}

// suspendGrace is the time between Slurm's SIGTSTP to a job's tasks and the freeze of
// their cgroups: slurmstepd's default suspend_grace_time (PreemptParameters=
// suspend_grace_time=N sets another; the stretch stated is then off by the difference).
const suspendGrace = 2 * time.Second

type suspendSource struct {
	host   hostfs.FS
	frozen bool // at the previous read
}

func newSuspend(env *Env, _ *Spec) (Source, error) { return &suspendSource{host: env.Host}, nil }

func (s *suspendSource) Read(r *Read) error {
	frozen, known := Frozen(s.host, r.Spec.StatCgroups)
	if r.Reason != sample.Start {
		switch {
		case s.frozen:
			r.Sample.Job[sample.SuspendedSeconds] = r.Sample.Seconds
		case known && frozen:
			// The suspension began suspendGrace ago, maybe before this interval did
			// (intervals already taken were counted running): as a counter, the
			// suspended time not yet counted.
			r.Sample.Job[sample.SuspendedSeconds] = suspendGrace.Seconds()
		case known:
			r.Sample.Job[sample.SuspendedSeconds] = 0
		default:
			r.NotMeasured(sample.SuspendedSeconds, "no freezer cgroup of the job (cgroup v1 without the freezer controller)")
		}
	}
	s.frozen = frozen
	return nil
}

func (s *suspendSource) Close() error { return nil }

// maxFreezerSteps bounds how many step cgroups of one job are looked at.
const maxFreezerSteps = 64

// Frozen says whether Slurm has frozen one of the job's steps, from the job's cgroup
// directories by hierarchy key (Spec.StatCgroups); known is false when the job has no
// cgroup that could say (cgroup v1 without a freezer hierarchy).
func Frozen(h hostfs.FS, cgroups map[string]string) (frozen, known bool) {
	for key, dir := range cgroups {
		switch {
		case key == "unified":
			known = true
			if anyStep(h, dir, func(step string) bool {
				return eventsFrozen(h, filepath.Join(step, "user", "cgroup.events")) || eventsFrozen(h, filepath.Join(step, "cgroup.events"))
			}) || eventsFrozen(h, filepath.Join(dir, "cgroup.events")) {
				return true, true
			}
		case strings.Contains(","+key+",", ",freezer,"):
			known = true
			if anyStep(h, dir, func(step string) bool { return freezerFrozen(h, step) }) || freezerFrozen(h, dir) {
				return true, true
			}
		}
	}
	return false, known
}

// anyStep says whether f holds for one of the step cgroups (step_*) under a job's dir.
func anyStep(h hostfs.FS, dir string, f func(step string) bool) bool {
	ents, err := os.ReadDir(h.Path(dir))
	if err != nil {
		return false
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "step_") {
			continue
		}
		if n++; n > maxFreezerSteps {
			return false
		}
		if f(filepath.Join(dir, e.Name())) {
			return true
		}
	}
	return false
}

// freezerFrozen says whether a v1 freezer cgroup is frozen or being frozen.
func freezerFrozen(h hostfs.FS, dir string) bool {
	b, err := readSmall(h, filepath.Join(dir, "freezer.state"))
	if err != nil {
		return false
	}
	st := string(bytes.TrimSpace(b))
	return st == "FROZEN" || st == "FREEZING"
}

// eventsFrozen says whether a v2 cgroup.events file says "frozen 1".
func eventsFrozen(h hostfs.FS, file string) bool {
	b, err := readSmall(h, file)
	if err != nil {
		return false
	}
	return parseFrozen(bytes.NewReader(b))
}

// parseFrozen reads cgroup.events' "frozen" field.
func parseFrozen(r io.Reader) bool {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "frozen" {
			return strings.TrimSpace(v) == "1"
		}
	}
	return false
}

// readSmall reads a small control file (at most 4 KiB).
func readSmall(h hostfs.FS, file string) ([]byte, error) {
	f, err := os.Open(h.Path(file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4096))
}
