package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/daemon/wire"
	"github.com/persyst/persyst/exporter"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/unixsock"
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
	return unixsock.Listen(path, 0o666, "daemon")
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
			s.handle(ctx, c, cred, r)
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

// exchange is one request on the socket: who sent it, in which role, and where to answer.
type exchange struct {
	c    *net.UnixConn
	cred *unix.Ucred
	role role
	log  zerolog.Logger
}

// handle answers one request: a read of the node's jobs (list, samples, report), which
// everyone may ask for their own jobs, or a job's lifecycle event, which only a sender
// (slurmstepd) may send.
func (s *Server) handle(ctx context.Context, c *net.UnixConn, cred *unix.Ucred, r role) {
	defer c.Close()
	// Network deadlines use the real time; the injected clock only stamps records.
	_ = c.SetReadDeadline(time.Now().Add(s.timeout))
	x := exchange{c: c, cred: cred, role: r, log: s.log.With().Int32("peer_pid", cred.Pid).Uint32("peer_uid", cred.Uid).Logger()}
	line, err := wire.ReadLine(bufio.NewReader(c))
	if err != nil {
		s.badRequest(x, "read request: "+err.Error())
		return
	}
	req, err := wire.DecodeRequest(line)
	if err != nil {
		s.badRequest(x, err.Error())
		return
	}
	var rep *wire.Reply
	after := func() {}
	switch req.Kind {
	case wire.List:
		rep = s.list(x)
	case wire.Report:
		rep = s.report(x, req.JobID)
	case wire.Samples:
		rep = s.samples(x, req.JobID)
	default:
		rep, after = s.event(ctx, x, req)
	}
	s.reply(c, rep, x.log)
	after()
}

// list answers with the node's jobs the peer may see, with their measurement so far.
func (s *Server) list(x exchange) *wire.Reply {
	views := make([]JobStatus, 0)
	for _, j := range s.reg.Jobs() {
		if x.role == guest && j.UID != x.cred.Uid {
			continue
		}
		v := JobStatus{Job: j}
		if s.meas != nil {
			v.Measurement = s.meas.Summary(j.JobID)
		}
		views = append(views, v)
	}
	b, err := json.Marshal(views)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	rep := &wire.Reply{OK: true, Node: s.reg.node, Jobs: b}
	if s.meas != nil && x.role != guest {
		// Other users' job ids: for those who read every job.
		if rep.Unannounced, err = json.Marshal(s.meas.Unannounced()); err != nil {
			return &wire.Reply{Error: err.Error()}
		}
	}
	return rep
}

// report answers with a job's report, if the peer may read it.
func (s *Server) report(x exchange, id uint32) *wire.Reply {
	b, err := s.give(x, id, s.reportJSON)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	return &wire.Reply{OK: true, Node: s.reg.node, Report: b}
}

// samples answers with this node's samples of a job, if the peer may read them.
func (s *Server) samples(x exchange, id uint32) *wire.Reply {
	b, err := s.give(x, id, s.samplesJSON)
	if err != nil {
		return &wire.Reply{Error: err.Error()}
	}
	return &wire.Reply{OK: true, Node: s.reg.node, Samples: b}
}

// give returns what json gives of job id, if the peer may read the job's data.
func (s *Server) give(x exchange, id uint32, json func(uint32) ([]byte, error)) ([]byte, error) {
	if err := s.readable(x.role, x.cred.Uid, id); err != nil {
		return nil, err
	}
	return json(id)
}

// reportJSON is job id's report, as JSON.
func (s *Server) reportJSON(id uint32) ([]byte, error) {
	if s.meas == nil {
		return nil, errors.New("this daemon does not measure jobs")
	}
	rep, err := s.meas.Report(id)
	if err != nil {
		return nil, err
	}
	return json.Marshal(rep)
}

// samplesJSON is this node's samples of job id, as JSON.
func (s *Server) samplesJSON(id uint32) ([]byte, error) {
	var samples []sample.Sample
	if s.meas != nil {
		samples = s.meas.Samples(id)
	}
	if samples == nil {
		return nil, fmt.Errorf("job %d: no samples on this node", id)
	}
	return json.Marshal(samples)
}

// event applies a job's lifecycle event from a sender to the registry, and the
// measurement follows it; after, once the sender has its answer, logs the event and
// counts it with the time it took.
func (s *Server) event(ctx context.Context, x exchange, req *wire.Request) (rep *wire.Reply, after func()) {
	after = func() {}
	if x.role != sender {
		s.refused.add(x.cred.Uid, x.cred.Pid, "job event from an ordinary user")
		s.metrics.Event(string(req.Kind), "refused", 0)
		return &wire.Reply{Error: fmt.Sprintf("permission denied: uid %d may not send job events to the persyst daemon", x.cred.Uid)}, after
	}
	e := req.Event
	if req.Kind == wire.StepStart && len(e.Cgroups) == 0 && s.host != nil {
		// The plugin sends no cgroups: slurmstepd, at the other end, is in the job's.
		// The kernel names the sender (SO_PEERCRED); its pid is in the daemon's namespace.
		cg, err := jobcgroup.OfProcess(*s.host, int(x.cred.Pid), e.JobID)
		if err != nil {
			x.log.Info().Err(err).Uint32("job", e.JobID).Msg("cgroups of the step's sender not read")
		} else if len(cg) > 0 && len(cg) <= 32 {
			e.Cgroups = cg
		}
	}
	j, err := s.reg.Apply(req.Kind, e, s.clock())
	ev := x.log.Info()
	if err != nil {
		ev = x.log.Error().Err(err)
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
		return &wire.Reply{Error: err.Error()}, after
	}
	handled := time.Now()
	rep = &wire.Reply{OK: err == nil}
	if err != nil {
		rep.Error = err.Error()
	}
	// Measurement follows the registry even when saving the job failed: the event was
	// applied in memory.
	if s.meas != nil {
		rep.Cgroup = s.measure(ctx, x.log, req.Kind, e.StepID, j)
	}
	return rep, func() {
		took := time.Since(handled)
		s.metrics.Event(string(req.Kind), map[bool]string{true: "ok", false: "error"}[err == nil], took)
		ev.Dur("took", took).Msg("lifecycle event")
	}
}

// measure has the measurer follow a job's event (of kind, for step), and returns the
// cgroup the step's tasks are to join ("": none). A batch job's digest and an
// interactive job's report are made here: the plugin waits (bounded) for the answer at
// the batch step's end, so the digest is in the output file before the job is complete.
// They are made to the end even while the daemon stops (each has its own deadline).
func (s *Server) measure(ctx context.Context, log zerolog.Logger, kind wire.Kind, step string, j *Job) string {
	ctx = context.WithoutCancel(ctx)
	var err error
	switch kind {
	case wire.JobStart:
		s.meas.Prepare(j)
	case wire.StepStart:
		return s.meas.Prepare(j)
	case wire.StepEnd:
		err = s.meas.StepEnded(ctx, j, step)
	case wire.JobEnd:
		err = s.meas.End(ctx, j)
		s.meas.Forget(func(id uint32) bool { return s.reg.Job(id) != nil })
	}
	if err != nil {
		log.Info().Err(err).Uint32("job", j.JobID).Msg("report of an interactive job not made")
	}
	return ""
}

// badRequest answers a request that could not be read: logged for senders, counted (and
// logged rate-limited) for everyone else.
func (s *Server) badRequest(x exchange, why string) {
	if x.role == sender {
		x.log.Warn().Str("why", why).Msg("bad request rejected")
	} else {
		s.refused.add(x.cred.Uid, x.cred.Pid, "bad request: "+why)
	}
	s.reply(x.c, &wire.Reply{Error: why}, x.log)
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
