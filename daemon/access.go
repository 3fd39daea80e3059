package daemon

import (
	"fmt"
	"os/user"
	"sort"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// Who may do what on the daemon's socket, and how much an ordinary user may ask.
//
// Root and the Slurm user send lifecycle events and read every job. Members of the admin
// group read every job. Any other user may only read: the list of their own jobs, and
// their own jobs' reports and samples (a job's owner is the uid its events carry). An
// ordinary user's connections are limited in number and rate, and refused cheaply beyond
// that, so that no user can slow down the plugin's events or root's commands.

// Guest limits: connections of ordinary users open at once, and requests per second per
// user (with a burst).
const (
	maxGuestConns = 8
	guestRate     = 10
	guestBurst    = 20
	// maxLimiters bounds the per-user rate limiters; beyond, the other users share one.
	maxLimiters = 1024
)

// access decides who a peer is.
type access struct {
	privileged map[uint32]bool // root and the Slurm user
	adminGID   int             // -1: no admin group
}

// role is what a peer may do.
type role int

const (
	guest  role = iota // reads its own jobs
	admin              // reads every job
	sender             // sends events, reads every job
)

func (a access) roleOf(c *unix.Ucred, groups []uint32) role {
	if a.privileged[c.Uid] {
		return sender
	}
	if a.adminGID >= 0 {
		if c.Gid == uint32(a.adminGID) {
			return admin
		}
		for _, g := range groups {
			if g == uint32(a.adminGID) {
				return admin
			}
		}
	}
	return guest
}

// guests admits ordinary users' connections: a few at once, each user within its rate.
type guests struct {
	slots chan struct{}
	now   func() time.Time

	mu       sync.Mutex
	limiters map[uint32]*rate.Limiter
	shared   *rate.Limiter // for users beyond maxLimiters
}

func newGuests(now func() time.Time) *guests {
	return &guests{slots: make(chan struct{}, maxGuestConns), now: now, limiters: map[uint32]*rate.Limiter{},
		shared: rate.NewLimiter(guestRate, guestBurst)}
}

// admit takes a slot for uid's connection, or says why not. release gives it back.
func (g *guests) admit(uid uint32) (release func(), why string) {
	g.mu.Lock()
	l := g.limiters[uid]
	if l == nil {
		if len(g.limiters) < maxLimiters {
			l = rate.NewLimiter(guestRate, guestBurst)
			g.limiters[uid] = l
		} else {
			l = g.shared
		}
	}
	ok := l.AllowN(g.now(), 1)
	g.mu.Unlock()
	if !ok {
		return nil, fmt.Sprintf("too many requests from uid %d (at most %d a second); try again later", uid, guestRate)
	}
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, ""
	default:
		return nil, "too many requests from ordinary users at once; try again later"
	}
}

// forget drops the limiters of users who are back to a full burst (called each minute,
// so that the map holds only the users of the last minute).
func (g *guests) forget() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for uid, l := range g.limiters {
		if l.TokensAt(g.now()) >= guestBurst {
			delete(g.limiters, uid)
		}
	}
}

// refusals counts refused connections and logs them without letting a flood fill the
// log: the first refusal of each user in a minute is logged, and at the end of a minute
// with refusals one line sums them up. At most maxLimiters users are named per minute.
type refusals struct {
	log zerolog.Logger

	mu    sync.Mutex
	byUID map[uint32]int
	other int // refusals of users beyond maxLimiters
	total uint64
}

func (r *refusals) add(uid uint32, pid int32, why string) {
	r.mu.Lock()
	first := false
	switch n, ok := r.byUID[uid]; {
	case ok:
		r.byUID[uid] = n + 1
	case len(r.byUID) < maxLimiters:
		r.byUID[uid], first = 1, true
	default:
		r.other++
	}
	r.total++
	r.mu.Unlock()
	if first {
		r.log.Warn().Uint32("peer_uid", uid).Int32("peer_pid", pid).Str("why", why).
			Msg("refused connection (further refusals of this user are summed up each minute)")
	}
}

// flush logs the last minute's refusals and starts a new minute.
func (r *refusals) flush() {
	r.mu.Lock()
	by, other := r.byUID, r.other
	r.byUID, r.other = map[uint32]int{}, 0
	r.mu.Unlock()
	n := other
	uids := make([]int, 0, len(by))
	for uid, k := range by {
		n += k
		uids = append(uids, int(uid))
	}
	if n <= len(by) { // nothing beyond the lines already logged
		return
	}
	sort.Ints(uids)
	if len(uids) > 20 {
		uids = uids[:20]
	}
	r.log.Warn().Int("refused", n).Int("users", len(by)).Ints("uids", uids).Int("unnamed", other).
		Msg("refused connections in the last minute")
}

// Total returns how many connections were refused since the start.
func (r *refusals) Total() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// peerGroups returns the supplementary groups of the process at the other end of a unix
// socket, as they were when it connected (SO_PEERGROUPS, Linux 4.13).
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch e {
		case 0:
			return buf[:n/4], nil
		case unix.ERANGE:
			if len(buf) >= 1<<16 {
				return nil, e
			}
			buf = make([]uint32, max(int(n/4), 2*len(buf)))
		default:
			return nil, e
		}
	}
}

// ReportGate gives the reports of a daemon's jobs to users over the network (the node's
// gRPC service, whose callers MUNGE authenticates), by the socket's rule: the job's owner,
// root, the Slurm user and AdminGroup's members, an ordinary user within the same limits.
// It answers once the daemon serves (Run sets it up).
type ReportGate struct {
	mu  sync.Mutex
	srv *Server
}

func (g *ReportGate) set(s *Server) {
	g.mu.Lock()
	g.srv = s
	g.mu.Unlock()
}

// ReportJSON returns job's report as JSON for the user uid, or why not.
func (g *ReportGate) ReportJSON(uid, job uint32) ([]byte, error) {
	g.mu.Lock()
	s := g.srv
	g.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("the persyst daemon is starting; try again")
	}
	return s.reportFor(uid, job)
}

// SamplesJSON returns this node's samples of a job as JSON for the user uid (who may read
// its report), or why not.
func (g *ReportGate) SamplesJSON(uid, job uint32) ([]byte, error) {
	g.mu.Lock()
	s := g.srv
	g.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("the persyst daemon is starting; try again")
	}
	return s.forUser(uid, job, s.samplesJSON)
}

// reportFor is ReportJSON.
func (s *Server) reportFor(uid, job uint32) ([]byte, error) {
	return s.forUser(uid, job, s.reportJSON)
}

// forUser runs give for the user uid if they may read the job's data: the caller's role
// from its uid and its groups (the user database's: a remote caller has no socket
// credentials).
func (s *Server) forUser(uid, job uint32, give func(uint32) ([]byte, error)) ([]byte, error) {
	cred := &unix.Ucred{Uid: uid, Gid: ^uint32(0)}
	var groups []uint32
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		if gid, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			cred.Gid = uint32(gid)
		}
		if ids, err := u.GroupIds(); err == nil {
			for _, id := range ids {
				if g, err := strconv.ParseUint(id, 10, 32); err == nil {
					groups = append(groups, uint32(g))
				}
			}
		}
	}
	r := s.access.roleOf(cred, groups)
	if r == guest {
		release, why := s.guests.admit(uid)
		if release == nil {
			s.refused.add(uid, 0, "busy: "+why)
			return nil, fmt.Errorf("busy: %s", why)
		}
		defer release()
	}
	if err := s.readable(r, uid, job); err != nil {
		return nil, err
	}
	if s.meas == nil {
		return nil, fmt.Errorf("this daemon does not measure jobs")
	}
	return give(job)
}
