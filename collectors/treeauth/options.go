package treeauth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/internal/ratelog"
)

// Options are one agent's side of the tree's authentication.
type Options struct {
	Mode Mode
	// Self is this agent.
	Self Identity
	// Munge reaches the node's munged (Mode Munge).
	Munge Munger
	// AgentUIDs are the uids, besides root, whose MUNGE credentials are agents' (the
	// users the tree's agents run as: TreeUsers=).
	AgentUIDs []uint32
	// AcceptUsers makes this agent's servers take users' MUNGE credentials too (role
	// User, named by the credential's uid): a node daemon's, for remote reports.
	AcceptUsers bool
	// TLS are the agent's certificate, key and the site's CA (Mode TLS).
	TLS TLSFiles
	Log zerolog.Logger
	// Now is the clock of the refusal log (nil: time.Now).
	Now func() time.Time
}

// FromConfig returns the options persyst.conf gives an agent: TreeAuth=, MungeSocket=,
// TreeUsers= and the TLS files (TLSCert and TLSKey may hold "%n", the agent's name).
func FromConfig(c config.Config, self Identity, log zerolog.Logger) (Options, error) {
	// "%n" in the certificate's and key's paths is the agent's name: one persyst.conf
	// shared by every agent names each one's own files.
	own := func(p string) string { return strings.ReplaceAll(p, "%n", self.Name) }
	// Node daemons give users their reports (Node/Report): their servers take users.
	o := Options{Self: self, Munge: Munger{Socket: c.MungeSocket}, TLS: TLSFiles{Cert: own(c.TLSCert), Key: own(c.TLSKey), CA: c.TLSCA},
		AcceptUsers: self.Role == Node, Log: log}
	var err error
	if o.Mode, err = ParseMode(c.TreeAuth); err != nil {
		return Options{}, fmt.Errorf("TreeAuth: %w", err)
	}
	switch {
	case c.TreeAuth == "" && o.TLS.Enabled():
		o.Mode = TLS
	case o.Mode == TLS && !o.TLS.Enabled():
		return Options{}, errors.New("TreeAuth=tls needs TLSCert, TLSKey and TLSCA")
	case o.Mode != TLS && o.TLS.Enabled():
		return Options{}, fmt.Errorf("TreeAuth=%s and TLSCert/TLSKey/TLSCA: choose one (TreeAuth=tls, or no TLS files)", o.Mode)
	}
	for _, u := range c.TreeUsers {
		uid, err := config.LookupUID(u)
		if err != nil {
			return Options{}, fmt.Errorf("TreeUsers: %w", err)
		}
		o.AgentUIDs = append(o.AgentUIDs, uid)
	}
	return o, nil
}

// Load makes an agent's authentication from persyst.conf (path names it in errors).
func Load(path string, c config.Config, self Identity, log zerolog.Logger) (*Tree, error) {
	o, err := FromConfig(c, self, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := New(o)
	if err != nil {
		return nil, err
	}
	if t.Mode() == None {
		log.Warn().Msg("TreeAuth=none: anyone who reaches the agents' ports can send records and read every job's results")
	}
	return t, nil
}

// auth is what an agent's connections share: its identity, munge, and the refusal log.
type auth struct {
	self       Identity
	munge      Munger
	uids       []uint32
	users      bool // a server's: users' credentials are taken too (role User)
	sem        chan struct{}
	handshakes atomic.Int64
	refusals   *refusalLog
	rate       *connRate
}

// Tree is an agent's authentication, made once and used for all its servers and
// connections.
type Tree struct {
	o Options
	a *auth
}

// New checks the options and makes the agent's authentication.
func New(o Options) (*Tree, error) {
	if o.Mode == "" {
		o.Mode = Munge
	}
	if o.Mode != None && !o.Self.Valid() {
		return nil, fmt.Errorf("treeauth: this agent's identity %q is not ROLE/NAME with a name of letters, digits, '.', '_', '-'", o.Self)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Self.Role == User && o.Mode != Munge {
		return nil, fmt.Errorf("treeauth: users authenticate with MUNGE only (TreeAuth=%s)", o.Mode)
	}
	return &Tree{o: o, a: &auth{self: o.Self, munge: o.Munge, uids: o.AgentUIDs, users: o.AcceptUsers, sem: make(chan struct{}, maxMunge),
		refusals: newRefusalLog(o.Log, o.Now), rate: &connRate{now: o.Now}}}, nil
}

// Mode returns how the tree authenticates.
func (t *Tree) Mode() Mode { return t.o.Mode }

// ServerOptions are the options of an agent's gRPC server: the transport and the
// authorization of every call.
func (t *Tree) ServerOptions() ([]grpc.ServerOption, error) {
	var creds credentials.TransportCredentials
	switch t.o.Mode {
	case None:
		return nil, nil
	case Munge:
		c, err := newMungeCreds(t.a, true, nil)
		if err != nil {
			return nil, err
		}
		creds = c
	case TLS:
		opt, err := t.o.TLS.Config(true)
		if err != nil {
			return nil, err
		}
		creds = &tlsCreds{inner: credentials.NewTLS(opt), a: t.a}
	}
	return []grpc.ServerOption{grpc.Creds(creds), grpc.ChainUnaryInterceptor(t.interceptor())}, nil
}

// DialOption is the option of an agent's connections to servers whose role is one of
// expect (none: any agent).
func (t *Tree) DialOption(expect ...Role) (grpc.DialOption, error) {
	switch t.o.Mode {
	case Munge:
		c, err := newMungeCreds(t.a, false, expect)
		if err != nil {
			return nil, err
		}
		return grpc.WithTransportCredentials(c), nil
	case TLS:
		opt, err := t.o.TLS.Config(false)
		if err != nil {
			return nil, err
		}
		return grpc.WithTransportCredentials(&tlsCreds{inner: credentials.NewTLS(opt), a: t.a, expect: expect}), nil
	}
	return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
}

func (t *Tree) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := Authorize(ctx, info.FullMethod, req, t.o.Mode != None); err != nil {
			p := PeerOf(ctx)
			t.a.refusals.add(StageCall, p.Addr.String(), p.Identity.String()+": "+err.Error())
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Refused returns how many connections and calls were refused since the start.
func (t *Tree) Refused() uint64 { return t.a.refusals.total() }

// RefusedBy returns how many connections and calls were refused since the start, by
// stage (StageHandshake, StageStorm, StageCall).
func (t *Tree) RefusedBy() map[string]uint64 { return t.a.refusals.byStageMap() }

// tlsCreds is mutual TLS whose peers' identities come from their certificates: a URI
// SAN persyst://ROLE/NAME.
type tlsCreds struct {
	inner  credentials.TransportCredentials
	a      *auth
	expect []Role
}

func (c *tlsCreds) Info() credentials.ProtocolInfo { return c.inner.Info() }
func (c *tlsCreds) Clone() credentials.TransportCredentials {
	return &tlsCreds{inner: c.inner.Clone(), a: c.a, expect: c.expect}
}
func (c *tlsCreds) OverrideServerName(string) error { return nil }

func (c *tlsCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.inner.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	info, err := tlsIdentity(ai)
	if err == nil && len(c.expect) > 0 && !slices.Contains(c.expect, info.Identity.Role) {
		err = fmt.Errorf("the server is %s, not a %s", info.Identity, rolesText(c.expect))
	}
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("%s: %w", authority, err)
	}
	return conn, info, nil
}

func (c *tlsCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if err := c.a.enter(raw); err != nil {
		return nil, nil, err
	}
	defer c.a.handshakes.Add(-1)
	raw.SetDeadline(time.Now().Add(handshakeTime))
	conn, ai, err := c.inner.ServerHandshake(raw)
	if err != nil {
		c.a.refused(StageHandshake, raw.RemoteAddr(), "TLS: "+err.Error())
		return nil, nil, err
	}
	info, err := tlsIdentity(ai)
	if err == nil {
		err = c.a.admit(info.Identity)
	}
	if err != nil {
		c.a.refused(stageOf(err), raw.RemoteAddr(), err.Error())
		conn.Close()
		return nil, nil, err
	}
	raw.SetDeadline(time.Time{})
	return conn, info, nil
}

// tlsIdentity reads the peer's identity from its verified certificate.
func tlsIdentity(ai credentials.AuthInfo) (AuthInfo, error) {
	ti, ok := ai.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return AuthInfo{}, errors.New("no peer certificate")
	}
	id, err := CertIdentity(ti.State.PeerCertificates[0])
	if err != nil {
		return AuthInfo{}, err
	}
	return AuthInfo{CommonAuthInfo: ti.CommonAuthInfo, Identity: id, Method: "tls"}, nil
}

// CertIdentity returns the identity a certificate names: exactly one URI SAN
// persyst://ROLE/NAME.
func CertIdentity(c *x509.Certificate) (Identity, error) {
	var ids []Identity
	for _, u := range c.URIs {
		if u.Scheme != "persyst" {
			continue
		}
		ids = append(ids, Identity{Role: Role(u.Host), Name: strings.TrimPrefix(u.Path, "/")})
	}
	if len(ids) != 1 || !ids[0].Valid() {
		return Identity{}, fmt.Errorf("certificate %q: want one URI SAN persyst://ROLE/NAME (role node, collector, sync or frontend), got %d", clean(c.Subject.CommonName), len(ids))
	}
	return ids[0], nil
}

// The stages at which the tree refuses a peer: its connection's authentication (the
// TLS or MUNGE handshake), too many connections of one agent in a minute (a storm), or
// a call its identity may not make (Authorize).
const (
	StageHandshake = "handshake"
	StageStorm     = "storm"
	StageCall      = "call"
)

// refusalLog counts refused connections and calls, by stage, and logs them without
// letting a flood fill the log (ratelog: at most one line in ten seconds, which says how
// many were refused since the last line).
type refusalLog struct {
	lines *ratelog.Log

	mu      sync.Mutex
	totalN  uint64
	byStage [3]uint64 // handshake, storm, call
}

const refusalEvery = 10 * time.Second

var stages = [...]string{StageHandshake, StageStorm, StageCall}

func newRefusalLog(log zerolog.Logger, now func() time.Time) *refusalLog {
	return &refusalLog{lines: ratelog.New(log, refusalEvery, now)}
}

func (r *refusalLog) add(stage, from, why string) {
	r.mu.Lock()
	r.totalN++
	if i := slices.Index(stages[:], stage); i >= 0 {
		r.byStage[i]++
	}
	r.mu.Unlock()
	r.lines.Warn().Str("peer", clean(from)).Str("stage", stage).Str("why", clean(why)).
		Msg("refused a connection or call of the agent tree (at most one line in 10 s)")
}

func (r *refusalLog) total() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.totalN
}

func (r *refusalLog) byStageMap() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(stages))
	for i, s := range stages {
		out[s] = r.byStage[i]
	}
	return out
}

// MaxConnsPerMinute bounds how many connections one agent opens to a server in a
// minute: an agent reconnecting in a loop (a bug, or an intruder holding one node's key)
// is refused beyond it, and counted, so that its handshakes cannot crowd out the rest of
// the tree. The tree's own agents reconnect with gRPC's backoff (1 s, then longer), far
// below it; users (persyst report) are bounded by the MUNGE decodes a server runs at
// once instead.
const MaxConnsPerMinute = 60

// maxTracked bounds the agents a server counts connections of in one minute; beyond,
// connections are admitted uncounted (the handshakes at once stay bounded).
const maxTracked = 1 << 16

// connRate counts each agent's connections in the current minute.
type connRate struct {
	now func() time.Time

	mu     sync.Mutex
	minute int64
	n      map[Identity]int
}

var errStorm = errors.New("connections in a storm")

// admit counts one connection of id and refuses it beyond MaxConnsPerMinute.
func (r *connRate) admit(id Identity) error {
	if id.Role == User {
		return nil
	}
	m := r.now().Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	if m != r.minute || r.n == nil {
		r.minute, r.n = m, map[Identity]int{}
	}
	k := r.n[id]
	switch {
	case k >= MaxConnsPerMinute:
		return fmt.Errorf("%w: %s opened more than %d connections in a minute", errStorm, id, MaxConnsPerMinute)
	case k == 0 && len(r.n) >= maxTracked:
		return nil
	}
	r.n[id] = k + 1
	return nil
}

func addrHost(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func (a *auth) refused(stage string, from net.Addr, why string) {
	a.refusals.add(stage, addrHost(from), why)
}

// enter counts a handshake begun (a server runs at most maxHandshakes at once; beyond,
// the connection is closed and counted); the caller ends it with handshakes.Add(-1).
func (a *auth) enter(raw net.Conn) error {
	if a.handshakes.Add(1) > maxHandshakes {
		a.handshakes.Add(-1)
		raw.Close()
		a.refused(StageHandshake, raw.RemoteAddr(), "too many handshakes at once")
		return errors.New("too many handshakes at once")
	}
	return nil
}

// admit counts a connection of an authenticated peer (connRate).
func (a *auth) admit(id Identity) error { return a.rate.admit(id) }

// stageOf is the stage of a refusal after the handshake: a storm, else the handshake's.
func stageOf(err error) string {
	if errors.Is(err, errStorm) {
		return StageStorm
	}
	return StageHandshake
}
