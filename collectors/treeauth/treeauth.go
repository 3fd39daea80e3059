// Package treeauth authenticates and authorizes the calls between the agents of the tree
// (node daemons, collectors, sync agents, the frontend).
//
// By default every connection starts with a MUNGE handshake (every Slurm site runs
// munged, with one key across the cluster): the client sends a credential made by its
// node's munged, whose payload says who it is (role and name), whom it talks to (the
// address it dialed) and a random nonce; the server decodes it with its own munged
// (which checks the key, the time to live and that the credential was never decoded
// before), checks that it was made by an agent's uid (root, or the uid the agents run
// as) and that it was meant for this server, and answers with a credential of its own
// naming the client and echoing the nonce, which the client checks the same way. Each
// side then knows the other's role and name for as long as the connection lasts; a
// process of an ordinary user cannot make a credential of root's, and a credential seen
// on the network cannot be used again or elsewhere.
//
// With TLSCert/TLSKey/TLSCA in persyst.conf, mutual TLS encrypts the connections and
// the identities come from the certificates instead: each agent's certificate carries a
// URI SAN persyst://ROLE/NAME (persyst://node/node17, persyst://collector/col1).
//
// TreeAuth=none turns authentication off: anyone who reaches an agent's port can then
// send it records for any job and read any job's results. Only for a network that
// nothing else can reach.
//
// Authorization (Authorize, on every call of every server) binds roles to calls: only the frontend
// sets a node's routes; only node daemons push records, each only its own node's; only
// collectors push cycle summaries to aggregation points; results are read by the agents
// and by node daemons; a node daemon asks another for its part of a job (the batch host
// of a multi-node job without a collector tree).
package treeauth

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Role is what an agent is in the tree.
type Role string

// Roles.
const (
	Node      Role = "node"
	Collector Role = "collector"
	Sync      Role = "sync"
	Frontend  Role = "frontend"
	// User is a person's process (persyst report from a login node), named by its uid:
	// MUNGE only, accepted only by servers that take users (Options.AcceptUsers), and
	// allowed only to read reports, whose owners the server checks.
	User Role = "user"
)

var uidRE = regexp.MustCompile(`^[0-9]{1,10}$`)

// Identity is an agent: its role and its name (a node's Slurm name, an agent's name in
// the tree).
type Identity struct {
	Role Role   `json:"role"`
	Name string `json:"name"`
}

func (i Identity) String() string { return string(i.Role) + "/" + i.Name }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Valid reports whether the identity is well-formed.
func (i Identity) Valid() bool {
	switch i.Role {
	case Node, Collector, Sync, Frontend:
		return nameRE.MatchString(i.Name)
	case User:
		return uidRE.MatchString(i.Name)
	}
	return false
}

// AuthInfo is the authenticated peer of a connection.
type AuthInfo struct {
	credentials.CommonAuthInfo
	Identity Identity
	UID      uint32 // from its MUNGE credential (0 with TLS)
	Method   string // "munge" or "tls"
}

// AuthType implements credentials.AuthInfo.
func (a AuthInfo) AuthType() string { return "persyst-" + a.Method }

// Peer is an RPC's caller: who it is (ok is false when the tree runs without
// authentication) and where it called from.
type Peer struct {
	Identity Identity
	UID      uint32 // from its MUNGE credential
	Addr     net.IP
	OK       bool
}

// PeerOf returns the caller of the RPC whose context is ctx.
func PeerOf(ctx context.Context) Peer {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Peer{}
	}
	var out Peer
	if ta, ok := p.Addr.(*net.TCPAddr); ok {
		out.Addr = ta.IP
	}
	if ai, ok := p.AuthInfo.(AuthInfo); ok {
		out.Identity, out.UID, out.OK = ai.Identity, ai.UID, true
	}
	return out
}

// The tree's methods and who may call them.
var allowed = map[string][]Role{
	"/persyst.v1.Node/SetRoutes":        {Frontend},
	"/persyst.v1.Node/Ping":             {Frontend},
	"/persyst.v1.Node/Part":             {Node},
	"/persyst.v1.Node/Report":           {User},
	"/persyst.v1.Node/Samples":          {User},
	"/persyst.v1.Collector/Push":        {Node},
	"/persyst.v1.Collector/KeepReport":  {Node},
	"/persyst.v1.Collector/KeepNotice":  {Node},
	"/persyst.v1.Collector/PushPartial": {Collector},
	"/persyst.v1.Collector/Summary":     {Node, Collector, Sync, Frontend},
	"/persyst.v1.Collector/Partial":     {Collector, Sync, Frontend},
	"/persyst.v1.Collector/Ping":        {Frontend},
}

// Authorize says whether the caller of ctx may call method (a full gRPC method name)
// with req: the caller's role must be allowed the method, and a node pushes only its own
// records. Without authentication (TreeAuth=none) everything is allowed.
func Authorize(ctx context.Context, method string, req any, auth bool) error {
	if !auth {
		return nil
	}
	p := PeerOf(ctx)
	if !p.OK {
		return status.Error(codes.Unauthenticated, "not an authenticated agent of the tree")
	}
	roles, ok := allowed[method]
	if !ok || !slices.Contains(roles, p.Identity.Role) {
		return status.Errorf(codes.PermissionDenied, "%s may not call %s", p.Identity, method)
	}
	if r, ok := req.(interface{ GetNode() string }); ok && p.Identity.Role == Node && r.GetNode() != p.Identity.Name {
		return status.Errorf(codes.PermissionDenied, "%s may not push records of node %q", p.Identity, clean(r.GetNode()))
	}
	return nil
}

// Mode is how the tree authenticates (persyst.conf TreeAuth=).
type Mode string

// Modes.
const (
	Munge Mode = "munge" // the default
	TLS   Mode = "tls"   // the default with TLSCert/TLSKey/TLSCA
	None  Mode = "none"
)

// ParseMode reads TreeAuth's value.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Munge, TLS, None:
		return Mode(s), nil
	case "":
		return Munge, nil
	}
	return "", fmt.Errorf("want munge, tls or none, got %q", s)
}
