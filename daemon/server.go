package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/sample"
)

// Clock returns the current time; tests inject a fixed one.
type Clock func() time.Time

// Server answers requests on the daemon's unix socket (who may do what: access.go).
type Server struct {
	reg     *Registry
	meas    *Measurer // nil: events are recorded, jobs not measured
	log     zerolog.Logger
	clock   Clock
	access  access
	guests  *guests
	refused *refusals
	timeout time.Duration
	metrics *exporter.Daemon
	host    *hostfs.FS // where senders' /proc is read; nil: not read
	wg      sync.WaitGroup
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// AllowedUIDs may send events and read every job; root (0) always may.
	AllowedUIDs []uint32
	// AdminGID, if not negative, is a group whose members read every job (persyst.conf
	// AdminGroup=). Other users read their own jobs only.
	AdminGID int
	// ConnTimeout bounds one exchange (default 10 s).
	ConnTimeout time.Duration
	// Metrics counts the events for Prometheus (nil: not counted).
	Metrics *exporter.Daemon
	// Host is the root the sender's /proc/PID is read under: a step's start that names no
	// cgroups gets those of its sender (slurmstepd, in the job's cgroups by then). Nil:
	// only the cgroups the event names are used.
	Host *hostfs.FS
}

// NewServer returns a server over reg.
func NewServer(cfg ServerConfig, reg *Registry, meas *Measurer, log zerolog.Logger, clock Clock) *Server {
	allowed := map[uint32]bool{0: true}
	for _, u := range cfg.AllowedUIDs {
		allowed[u] = true
	}
	if cfg.ConnTimeout <= 0 {
		cfg.ConnTimeout = 10 * time.Second
	}
	return &Server{reg: reg, meas: meas, log: log, clock: clock, access: access{privileged: allowed, adminGID: cfg.AdminGID},
		guests: newGuests(time.Now), refused: &refusals{log: log, byUID: map[uint32]int{}}, timeout: cfg.ConnTimeout, metrics: cfg.Metrics, host: cfg.Host}
}

// Listen binds the unix socket at path. A stale socket left by a dead daemon is replaced;
// a live one (another daemon answers) is an error. The socket is world-connectable on
// purpose: the peer credential check in Serve is the gate, and refusals are logged.
func Listen(path string) (*net.UnixListener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: another daemon is answering there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	// Bound with the process umask (connecting needs write permission, so at worst only
	// root can connect until the chmod below).
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// Serve accepts connections until ctx is cancelled, then waits for open exchanges. The
// accept loop never waits for a client or for the log: a peer's credentials are checked
// as it is accepted, and an ordinary user beyond the limits is refused there and then.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer s.wg.Wait()
	minute := time.NewTicker(time.Minute)
	defer minute.Stop()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-minute.C:
				s.refused.flush()
				s.guests.forget()
			}
		}
	}()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				s.refused.add(0, 0, "out of file descriptors: "+err.Error())
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		cred, groups, err := peer(c)
		if err != nil {
			s.log.Error().Err(err).Msg("cannot read peer credentials; connection refused")
			c.Close()
			continue
		}
		r := s.access.roleOf(cred, groups)
		release := func() {}
		if r == guest {
			var why string
			if release, why = s.guests.admit(cred.Uid); release == nil {
				s.refuse(c, cred, "busy: "+why)
				continue
			}
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer release()
			s.handle(c, cred, r)
		}()
	}
}

// refuse answers a refused peer in one short write (never waiting for it) and closes.
func (s *Server) refuse(c *net.UnixConn, cred *unix.Ucred, why string) {
	s.refused.add(cred.Uid, cred.Pid, why)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_ = wire.WriteReply(c, &wire.Reply{V: wire.Version, Error: why})
	c.Close()
}

// peer returns the credentials of the process at the other end of c, and its
// supplementary groups (none when the kernel cannot say).
func peer(c *net.UnixConn) (*unix.Ucred, []uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var cred *unix.Ucred
	var groups []uint32
	var serr error
	if err := raw.Control(func(fd uintptr) {
		if cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); serr == nil {
			groups, _ = peerGroups(int(fd))
		}
	}); err != nil {
		return nil, nil, err
	}
	return cred, groups, serr
}

// readable says whether a peer of role r and uid may read job id's data; the error says
// why not.
func (s *Server) readable(r role, uid, id uint32) error {
	if r != guest {
		return nil
	}
	j := s.reg.Job(id)
	if j == nil {
		return fmt.Errorf("job %d: not known on this node", id)
	}
	if j.UID != uid {
		return fmt.Errorf("permission denied: job %d belongs to another user", id)
	}
	return nil
}

func (s *Server) handle(c *net.UnixConn, cred *unix.Ucred, r role) {
	defer c.Close()
	// Network deadlines use the real time; the injected clock only stamps records.
	_ = c.SetReadDeadline(time.Now().Add(s.timeout))
	log := s.log.With().Int32("peer_pid", cred.Pid).Uint32("peer_uid", cred.Uid).Logger()
	line, err := wire.ReadLine(bufio.NewReader(c))
	if err != nil {
		s.badRequest(c, cred, r, log, "read request: "+err.Error())
		return
	}
	req, err := wire.DecodeRequest(line)
	if err != nil {
		s.badRequest(c, cred, r, log, err.Error())
		return
	}
	if r != sender && req.Kind != wire.List && req.Kind != wire.Samples && req.Kind != wire.Report {
		s.refused.add(cred.Uid, cred.Pid, "job event from an ordinary user")
		s.metrics.Event(string(req.Kind), "refused", 0)
		s.reply(c, &wire.Reply{Error: fmt.Sprintf("permission denied: uid %d may not send job events to the persyst daemon", cred.Uid)}, log)
		return
	}
	if req.Kind == wire.List {
		views := make([]JobStatus, 0)
		for _, j := range s.reg.Jobs() {
			if r == guest && j.UID != cred.Uid {
				continue
			}
			v := JobStatus{Job: j}
			if s.meas != nil {
				v.Measurement = s.meas.Summary(j.JobID)
			}
			views = append(views, v)
		}
		jobs, err := json.Marshal(views)
		if err != nil {
			s.reply(c, &wire.Reply{Error: err.Error()}, log)
			return
		}
		s.reply(c, &wire.Reply{OK: true, Node: s.reg.node, Jobs: jobs}, log)
		return
	}
	if req.Kind == wire.Report || req.Kind == wire.Samples {
		if err := s.readable(r, cred.Uid, req.JobID); err != nil {
			s.reply(c, &wire.Reply{Error: err.Error()}, log)
			return
		}
	}
	if req.Kind == wire.Report {
		if s.meas == nil {
			s.reply(c, &wire.Reply{Error: "this daemon does not measure jobs"}, log)
			return
		}
		r, err := s.meas.Report(req.JobID)
		if err != nil {
			s.reply(c, &wire.Reply{Error: err.Error()}, log)
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			s.reply(c, &wire.Reply{Error: err.Error()}, log)
			return
		}
		s.reply(c, &wire.Reply{OK: true, Node: s.reg.node, Report: b}, log)
		return
	}
	if req.Kind == wire.Samples {
		var samples []sample.Sample
		if s.meas != nil {
			samples = s.meas.Samples(req.JobID)
		}
		if samples == nil {
			s.reply(c, &wire.Reply{Error: fmt.Sprintf("job %d: no samples on this node", req.JobID)}, log)
			return
		}
		b, err := json.Marshal(samples)
		if err != nil {
			s.reply(c, &wire.Reply{Error: err.Error()}, log)
			return
		}
		s.reply(c, &wire.Reply{OK: true, Node: s.reg.node, Samples: b}, log)
		return
	}
	e := req.Event
	if req.Kind == wire.StepStart && len(e.Cgroups) == 0 && s.host != nil {
		// The plugin sends no cgroups: slurmstepd, at the other end, is in the job's.
		// The kernel names the sender (SO_PEERCRED); its pid is in the daemon's namespace.
		cg, cerr := jobcgroup.OfProcess(*s.host, int(cred.Pid), e.JobID)
		if cerr != nil {
			log.Info().Err(cerr).Uint32("job", e.JobID).Msg("cgroups of the step's sender not read")
		} else if len(cg) > 0 && len(cg) <= 32 {
			e.Cgroups = cg
		}
	}
	j, err := s.reg.Apply(req.Kind, e, s.clock())
	ev := log.Info()
	if err != nil {
		ev = log.Error().Err(err)
	}
	ev = ev.Str("event", string(req.Kind)).Uint32("job", e.JobID).Str("persyst", e.Persyst)
	if e.StepID != "" {
		ev = ev.Str("step", e.StepID)
	}
	if j != nil {
		ev = ev.Str("state", string(j.State))
	}
	if err != nil && j == nil {
		ev.Msg("lifecycle event")
		s.metrics.Event(string(req.Kind), "refused", 0)
		s.reply(c, &wire.Reply{Error: err.Error()}, log)
		return
	}
	handled := time.Now()
	defer func() {
		took := time.Since(handled)
		s.metrics.Event(string(req.Kind), map[bool]string{true: "ok", false: "error"}[err == nil], took)
		ev.Dur("took", took).Msg("lifecycle event")
	}()
	rep := &wire.Reply{OK: err == nil}
	if err != nil {
		rep.Error = err.Error()
	}
	// Measurement follows the registry even when saving the job failed: the event was
	// applied in memory.
	if s.meas != nil {
		switch req.Kind {
		case wire.JobStart:
			s.meas.Prepare(j)
		case wire.StepStart:
			rep.Cgroup = s.meas.Prepare(j)
		case wire.StepEnd:
			s.meas.StepEnded(j.JobID)
			if e.StepID != "batch" && e.StepID != "extern" {
				if err := s.meas.InteractiveDigest(context.Background(), j); err != nil {
					log.Info().Err(err).Uint32("job", j.JobID).Msg("report of an interactive job not made")
				}
			}
			if e.StepID == "batch" {
				// The plugin waits (bounded) for this reply at the batch step's end, so
				// the digest is in the output file before the job is complete. A digest
				// that could not be written is the daemon's to log, not an error of the
				// event: the plugin must not take it for a daemon that is down.
				_ = s.meas.Digest(context.Background(), j)
			}
		case wire.JobEnd:
			s.meas.End(j.JobID)
			if err := s.meas.InteractiveDigest(context.Background(), j); err != nil {
				log.Info().Err(err).Uint32("job", j.JobID).Msg("report of an interactive job not made")
			}
			s.meas.Forget(func(id uint32) bool { return s.reg.Job(id) != nil })
		}
	}
	s.reply(c, rep, log)
}

// badRequest answers a request that could not be read: logged for senders, counted (and
// logged rate-limited) for everyone else.
func (s *Server) badRequest(c *net.UnixConn, cred *unix.Ucred, r role, log zerolog.Logger, why string) {
	if r == sender {
		log.Warn().Str("why", why).Msg("bad request rejected")
	} else {
		s.refused.add(cred.Uid, cred.Pid, "bad request: "+why)
	}
	s.reply(c, &wire.Reply{Error: why}, log)
}

// JobStatus is a job as `persyst jobs` shows it: the registry's record and the
// measurement so far.
type JobStatus struct {
	*Job
	Measurement *sample.Summary `json:"measurement,omitempty"`
}

func (s *Server) reply(c *net.UnixConn, r *wire.Reply, log zerolog.Logger) {
	r.V = wire.Version
	// A fresh write deadline: a read that timed out still gets its error reply.
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	if err := wire.WriteReply(c, r); err != nil {
		log.Debug().Err(err).Msg("reply not delivered")
	}
}
