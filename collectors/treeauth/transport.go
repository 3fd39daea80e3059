package treeauth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
)

// The MUNGE handshake runs inside TLS 1.3 with a throwaway certificate of the process:
// TLS encrypts and protects the connection, MUNGE says who is at each end, and each
// side's credential carries the TLS session's exported key (RFC 5705, "channel binding"),
// so a credential is good for that one connection only: a man in the middle has two
// sessions with two different keys and cannot make a credential of root's for either.
const (
	greeting      = "persyst-tree/1 "
	refusedPrefix = "refused: "
	exporterLabel = "EXPORTER-persyst-tree-munge"
	// handshakeTime bounds a server's wait for a client's credential and its own
	// decoding; the client has its dial context.
	handshakeTime = 10 * time.Second
	// maxHandshakes bounds the handshakes a server runs at once (each holds a goroutine
	// and a connection); beyond, connections are closed at once. maxMunge bounds the
	// munge and unmunge processes it runs at once; further handshakes wait their turn.
	maxHandshakes = 1024
	maxMunge      = 16
)

// payload is what a credential of the handshake carries.
type payload struct {
	V    int    `json:"v"`
	Role Role   `json:"role"`
	Name string `json:"name"`
	Bind string `json:"bind"`           // the TLS session's exported key
	Peer string `json:"peer,omitempty"` // the server's answer: the client it accepted
}

// mungeCreds is gRPC's transport of the tree with MUNGE: TLS with an ephemeral
// certificate, then the MUNGE handshake.
type mungeCreds struct {
	inner  credentials.TransportCredentials
	a      *auth
	expect []Role // client side: the roles the server may have
}

func newMungeCreds(a *auth, server bool, expect []Role) (credentials.TransportCredentials, error) {
	cert, err := ephemeralCert(a.self.String())
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if !server {
		// The server's certificate is its process's throwaway one: it is not what
		// authenticates the server. Its MUNGE credential, bound to this session, is.
		cfg.InsecureSkipVerify = true
	}
	return &mungeCreds{inner: credentials.NewTLS(cfg), a: a, expect: expect}, nil
}

func (c *mungeCreds) Info() credentials.ProtocolInfo {
	i := c.inner.Info()
	i.SecurityProtocol = "persyst-munge"
	return i
}

func (c *mungeCreds) Clone() credentials.TransportCredentials {
	return &mungeCreds{inner: c.inner.Clone(), a: c.a, expect: c.expect}
}

func (c *mungeCreds) OverrideServerName(string) error { return nil }

// ClientHandshake sends this agent's credential and checks the server's answer.
func (c *mungeCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.inner.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	info, err := c.clientMunge(ctx, conn, ai)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("%s: %w", authority, err)
	}
	return conn, info, nil
}

func (c *mungeCreds) clientMunge(ctx context.Context, conn net.Conn, ai credentials.AuthInfo) (AuthInfo, error) {
	bind, common, err := binding(ai)
	if err != nil {
		return AuthInfo{}, err
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
		defer conn.SetDeadline(time.Time{})
	}
	cred, err := c.a.encode(ctx, payload{V: 1, Role: c.a.self.Role, Name: c.a.self.Name, Bind: bind})
	if err != nil {
		return AuthInfo{}, err
	}
	if _, err := io.WriteString(conn, greeting+cred+"\n"); err != nil {
		return AuthInfo{}, fmt.Errorf("sending the credential: %w", err)
	}
	line, err := readLine(conn)
	if err != nil {
		return AuthInfo{}, fmt.Errorf("the server's answer: %w", err)
	}
	if why, ok := strings.CutPrefix(line, greeting+refusedPrefix); ok {
		return AuthInfo{}, fmt.Errorf("refused by the server: %s", clean(why))
	}
	p, uid, err := c.a.decode(ctx, line, bind, false)
	if err != nil {
		return AuthInfo{}, fmt.Errorf("the server: %w", err)
	}
	id := Identity{Role: p.Role, Name: p.Name}
	if len(c.expect) > 0 && !slices.Contains(c.expect, id.Role) {
		return AuthInfo{}, fmt.Errorf("the server is %s, not a %s", id, rolesText(c.expect))
	}
	if p.Peer != c.a.self.String() {
		return AuthInfo{}, fmt.Errorf("the server's answer names %q, not this agent", clean(p.Peer))
	}
	return AuthInfo{CommonAuthInfo: common, Identity: id, UID: uid, Method: "munge"}, nil
}

// ServerHandshake checks a client's credential and answers with the server's own.
func (c *mungeCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if err := c.a.enter(raw); err != nil {
		return nil, nil, err
	}
	defer c.a.handshakes.Add(-1)
	conn, ai, err := c.inner.ServerHandshake(raw)
	if err != nil {
		c.a.refused(StageHandshake, raw.RemoteAddr(), "TLS: "+err.Error())
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(handshakeTime))
	info, err := c.serverMunge(conn, ai)
	if err != nil {
		c.a.refused(stageOf(err), raw.RemoteAddr(), err.Error())
		io.WriteString(conn, greeting+refusedPrefix+err.Error()+"\n")
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, info, nil
}

func (c *mungeCreds) serverMunge(conn net.Conn, ai credentials.AuthInfo) (AuthInfo, error) {
	bind, common, err := binding(ai)
	if err != nil {
		return AuthInfo{}, err
	}
	line, err := readLine(conn)
	if err != nil {
		return AuthInfo{}, fmt.Errorf("no credential: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTime)
	defer cancel()
	p, uid, err := c.a.decode(ctx, line, bind, c.a.users)
	if err != nil {
		return AuthInfo{}, err
	}
	id := Identity{Role: p.Role, Name: p.Name}
	if err := c.a.admit(id); err != nil {
		return AuthInfo{}, err
	}
	cred, err := c.a.encode(ctx, payload{V: 1, Role: c.a.self.Role, Name: c.a.self.Name, Bind: bind, Peer: id.String()})
	if err != nil {
		return AuthInfo{}, fmt.Errorf("this agent's own credential: %w", err)
	}
	if _, err := io.WriteString(conn, greeting+cred+"\n"); err != nil {
		return AuthInfo{}, fmt.Errorf("answering %s: %w", id, err)
	}
	return AuthInfo{CommonAuthInfo: common, Identity: id, UID: uid, Method: "munge"}, nil
}

// encode makes a credential of payload (at most maxMunge at once).
func (a *auth) encode(ctx context.Context, p payload) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	if err := a.acquire(ctx); err != nil {
		return "", err
	}
	defer a.release()
	return a.munge.Encode(ctx, b)
}

// decode checks a handshake line: a credential of an agent's uid (or, when users is
// set, of a user naming their own uid), for this session, naming a well-formed
// identity.
func (a *auth) decode(ctx context.Context, line, bind string, users bool) (payload, uint32, error) {
	cred, ok := strings.CutPrefix(line, greeting)
	if !ok {
		return payload{}, 0, errors.New("not a persyst tree handshake")
	}
	if err := a.acquire(ctx); err != nil {
		return payload{}, 0, err
	}
	d, err := a.munge.Decode(ctx, cred)
	a.release()
	if err != nil {
		return payload{}, 0, err
	}
	if !a.agentUID(d.UID) && !users {
		return payload{}, 0, fmt.Errorf("a credential of uid %d, which is not an agent of the tree (root or TreeUsers=)", d.UID)
	}
	var p payload
	dec := json.NewDecoder(bytes.NewReader(d.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || p.V != 1 {
		return payload{}, 0, errors.New("a credential without a persyst identity")
	}
	switch {
	case p.Role == User && (!users || p.Name != strconv.FormatUint(uint64(d.UID), 10)):
		// A user is who munged says made the credential, and only where users are taken.
		return payload{}, 0, fmt.Errorf("a user credential of uid %d naming %q here", d.UID, clean(p.Name))
	case p.Role != User && !a.agentUID(d.UID):
		return payload{}, 0, fmt.Errorf("a credential of uid %d, which is not an agent of the tree (root or TreeUsers=)", d.UID)
	}
	if p.Bind != bind {
		return payload{}, 0, errors.New("a credential made for another connection")
	}
	if id := (Identity{Role: p.Role, Name: p.Name}); !id.Valid() {
		return payload{}, 0, fmt.Errorf("a malformed identity %q", clean(id.String()))
	}
	return p, d.UID, nil
}

func (a *auth) acquire(ctx context.Context) error {
	select {
	case a.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for munge: %w", ctx.Err())
	}
}

func (a *auth) release() { <-a.sem }

func (a *auth) agentUID(uid uint32) bool { return uid == 0 || slices.Contains(a.uids, uid) }

// binding returns the TLS session's exported key (base64) and its security level.
func binding(ai credentials.AuthInfo) (string, credentials.CommonAuthInfo, error) {
	ti, ok := ai.(credentials.TLSInfo)
	if !ok {
		return "", credentials.CommonAuthInfo{}, errors.New("not a TLS connection")
	}
	k, err := ti.State.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return "", credentials.CommonAuthInfo{}, fmt.Errorf("TLS exporter: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k), ti.CommonAuthInfo, nil
}

// readLine reads one handshake line byte by byte (what follows it is the server's
// HTTP/2 and must stay in the connection), at most maxCred bytes and its prefix.
func readLine(r io.Reader) (string, error) {
	var b [1]byte
	line := make([]byte, 0, 512)
	for len(line) <= maxCred+len(greeting)+len(refusedPrefix) {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", err
		}
		if b[0] == '\n' {
			return string(line), nil
		}
		line = append(line, b[0])
	}
	return "", errors.New("an over-long handshake line")
}

// clean makes text from the other end fit for a log line or an error: printable ASCII,
// at most 200 bytes.
func clean(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 200 {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r > 0x7e {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func rolesText(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// ephemeralCert makes a self-signed certificate for this process's TLS sessions.
func ephemeralCert(cn string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
