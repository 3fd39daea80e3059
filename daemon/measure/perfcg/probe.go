package perfcg

import (
	"errors"
	"fmt"

	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/perfevents"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Status is the probe result for one event.
type Status struct {
	Event     perfevents.Event // tracepoints resolved when possible
	Available bool
	// Err says why the event is not available; it wraps ErrNotAvailable and, when
	// perf_event_open failed, the errno (errors.Is(Err, unix.ENOENT): no PMU).
	Err error
}

// Probed is the result of Probe, in catalog order.
type Probed []Status

// Available returns the events that exist, ready for Open.
func (p Probed) Available() []perfevents.Event {
	var out []perfevents.Event
	for _, s := range p {
		if s.Available {
			out = append(out, s.Event)
		}
	}
	return out
}

// Lookup returns the status of the event called name.
func (p Probed) Lookup(name string) (Status, bool) {
	for _, s := range p {
		if s.Event.Name == name {
			return s, true
		}
	}
	return Status{}, false
}

// Probe tries every event of the node's catalog (Catalog plus the raw events of its
// processor, NodeCatalog) once: tracepoint ids are resolved from tracefs under
// the root, then each event is opened in cgroup mode on CPU 0 against cgroupDir and
// closed again. Unavailable events are logged (Info) and reported with the reason;
// an error is returned only if cgroupDir cannot be opened.
func Probe(h hostfs.FS, cgroupDir string, log zerolog.Logger) (Probed, error) {
	events, arch := NodeCatalog(h)
	if arch != "" {
		log.Info().Str("arch", arch).Msg("raw hardware events of this processor added to the probe")
	}
	return probe(h, cgroupDir, events, log)
}

func probe(h hostfs.FS, cgroupDir string, events []perfevents.Event, log zerolog.Logger) (Probed, error) {
	cg, err := unix.Open(cgroupDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("perf probe: cgroup %s: %w", cgroupDir, err)
	}
	defer unix.Close(cg)
	out := make(Probed, 0, len(events))
	for _, e := range events {
		st := Status{Event: e}
		re, err := Resolve(h, e)
		switch {
		case err != nil:
			st.Err = fmt.Errorf("%s (%s): %w: %w", e.Name, e.Kind, ErrNotAvailable, err)
		default:
			st.Event = re
			fd, err := openEvent(re, target{name: cgroupDir, pid: cg, flags: unix.PERF_FLAG_PID_CGROUP}, 0, -1, singleFormat, false)
			if err != nil {
				st.Err = notAvailable(re, 0, err)
			} else {
				unix.Close(fd)
				st.Available = true
			}
		}
		if st.Available {
			log.Debug().Str("event", e.Name).Str("kind", e.Kind.String()).Msg("perf event available")
		} else {
			ev := log.Info().Str("event", e.Name).Str("kind", e.Kind.String()).Err(st.Err)
			var errno unix.Errno
			if errors.As(st.Err, &errno) {
				ev = ev.Str("errno", unix.ErrnoName(errno))
			}
			ev.Msg("perf event not available")
		}
		out = append(out, st)
	}
	return out, nil
}

// Reason says in a few words why event e is not available, given the error Probe or Open
// reported for it: the errno's meaning ("no PMU for this event (typical in VMs)"), or that
// tracefs is not mounted.
func Reason(e perfevents.Event, err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, ErrTracefsDenied) {
		return "no permission to read tracefs (it is for root; run persyst run as root, or let the daemon measure the job)"
	}
	if errors.Is(err, ErrNoTracefs) {
		return "tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return reason(e, errno)
	}
	return err.Error()
}
