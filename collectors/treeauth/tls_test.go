package treeauth

import (
	"crypto/x509"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/treeauth/tlstest"
	"github.com/persyst/persyst/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func newCA(t *testing.T, name string) *tlstest.CA {
	t.Helper()
	c, err := tlstest.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// issue writes an agent's certificate (with the URI SANs uris) and key signed by c.
func issue(t *testing.T, c *tlstest.CA, name string, uris ...string) TLSFiles {
	t.Helper()
	f, err := c.Issue(t.TempDir(), name, uris...)
	if err != nil {
		t.Fatal(err)
	}
	return TLSFiles(f)
}

// TestTLSIdentities: with mutual TLS an agent is who its certificate's URI SAN says, not
// merely a holder of a certificate of the site's CA: a node's certificate pushes only
// that node's records and sets no routes; a certificate without an identity, one of
// another CA and a plain client are refused.
func TestTLSIdentities(t *testing.T) {
	site := newCA(t, "site")
	log := zerolog.New(io.Discard)
	agent := func(role Role, name string, f TLSFiles) *Tree {
		return tree(t, Options{Mode: TLS, Self: Identity{role, name}, TLS: f, Log: log})
	}
	collector := agent(Collector, "col1", issue(t, site, "col1", "persyst://collector/col1"))
	addr, rec := serve(t, collector)
	node1 := agent(Node, "node1", issue(t, site, "node1", "persyst://node/node1"))
	front := agent(Frontend, "front", issue(t, site, "front", "persyst://frontend/front"))
	noSAN := agent(Node, "node1", issue(t, site, "node1"))
	twoSANs := agent(Node, "node1", issue(t, site, "node1", "persyst://node/node1", "persyst://frontend/front"))
	rogue := agent(Node, "node1", issue(t, newCA(t, "rogue"), "node1", "persyst://node/node1"))

	runCalls(t, addr, []callCase{
		{"node pushes its records", dialOf(t, node1, Collector), "Push", codes.OK, ""},
		{"node pushes another node's records", dialOf(t, node1), "PushOther", codes.PermissionDenied, `node "node2"`},
		{"node sets routes", dialOf(t, node1), "SetRoutes", codes.PermissionDenied, "may not call"},
		{"frontend sets routes", dialOf(t, front), "SetRoutes", codes.OK, ""},
		{"certificate without identity", dialOf(t, noSAN), "Summary", codes.Unavailable, ""},
		{"certificate with two identities", dialOf(t, twoSANs), "Summary", codes.Unavailable, ""},
		{"another CA", dialOf(t, rogue), "Summary", codes.Unavailable, ""},
		{"plain connection", grpc.WithTransportCredentials(insecure.NewCredentials()), "Summary", codes.Unavailable, ""},
		{"node expecting a frontend", dialOf(t, node1, Frontend), "Push", codes.Unavailable, "the server is collector/col1, not a frontend"},
	})
	if got, want := strings.Join(rec.calls(), ","), "node/node1,frontend/front"; got != want {
		t.Errorf("the server saw %s, want %s", got, want)
	}
	if _, err := (TLSFiles{Cert: "/x"}).Config(true); err == nil || !strings.Contains(err.Error(), "needed together") {
		t.Errorf("partial files: %v", err)
	}
}

func TestCertIdentity(t *testing.T) {
	u := func(s string) *url.URL { p, _ := url.Parse(s); return p }
	tests := []struct {
		uris    []*url.URL
		want    Identity
		wantErr bool
	}{
		{[]*url.URL{u("persyst://node/node17")}, Identity{Node, "node17"}, false},
		{[]*url.URL{u("https://example/x"), u("persyst://collector/col1")}, Identity{Collector, "col1"}, false},
		{[]*url.URL{u("persyst://admin/root")}, Identity{}, true},
		{[]*url.URL{u("persyst://node/")}, Identity{}, true},
		{[]*url.URL{u("persyst://node/a/b")}, Identity{}, true},
		{nil, Identity{}, true},
	}
	for _, tc := range tests {
		got, err := CertIdentity(&x509.Certificate{URIs: tc.uris})
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("CertIdentity(%v) = %v, %v; want %v (error %v)", tc.uris, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestFromConfig(t *testing.T) {
	files := func(c *config.Config) { c.TLSCert, c.TLSKey, c.TLSCA = "/c", "/k", "/a" }
	tests := []struct {
		name    string
		set     func(*config.Config)
		want    Mode
		wantErr string
	}{
		{"default", func(*config.Config) {}, Munge, ""},
		{"TLS files", files, TLS, ""},
		{"none", func(c *config.Config) { c.TreeAuth = "none" }, None, ""},
		{"tls without files", func(c *config.Config) { c.TreeAuth = "tls" }, "", "needs TLSCert"},
		{"none with files", func(c *config.Config) { files(c); c.TreeAuth = "none" }, "", "choose one"},
		{"unknown user", func(c *config.Config) { c.TreeUsers = []string{"no-such-user-persyst"} }, "", "TreeUsers"},
		{"uid", func(c *config.Config) { c.TreeUsers = []string{"1234"} }, Munge, ""},
		{"%n", func(c *config.Config) { c.TLSCert, c.TLSKey, c.TLSCA = "/tls/%n.crt", "/tls/%n.key", "/tls/ca.crt" }, TLS, ""},
	}
	for _, tc := range tests {
		c := config.Defaults()
		tc.set(&c)
		o, err := FromConfig(c, Identity{Node, "n1"}, zerolog.Nop())
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || o.Mode != tc.want {
			t.Errorf("%s: mode %q, %v; want %q", tc.name, o.Mode, err, tc.want)
		}
		if tc.name == "%n" && (o.TLS.Cert != "/tls/n1.crt" || o.TLS.Key != "/tls/n1.key") {
			t.Errorf("%%n: files %+v, want n1's", o.TLS)
		}
	}
}

// TestStormRefused: an agent that reconnects in a loop is refused after
// MaxConnsPerMinute connections in a minute, and counted as a storm; another agent
// connecting meanwhile is not, and the storming agent is taken again the next minute.
// A connection that is not TLS at all is refused at the handshake.
func TestStormRefused(t *testing.T) {
	site := newCA(t, "site")
	log := zerolog.New(io.Discard)
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	collector := tree(t, Options{Mode: TLS, Self: Identity{Collector, "col1"}, TLS: issue(t, site, "col1", "persyst://collector/col1"), Log: log, Now: clock})
	addr, _ := serve(t, collector)
	node1 := tree(t, Options{Mode: TLS, Self: Identity{Node, "node1"}, TLS: issue(t, site, "node1", "persyst://node/node1"), Log: log})
	node2 := tree(t, Options{Mode: TLS, Self: Identity{Node, "node2"}, TLS: issue(t, site, "node2", "persyst://node/node2"), Log: log})
	for i := range MaxConnsPerMinute {
		if err := call(addr, dialOf(t, node1), "Push"); err != nil {
			t.Fatalf("connection %d of node1 in its minute: %v", i+1, err)
		}
	}
	if err := call(addr, dialOf(t, node1), "Push"); status.Code(err) != codes.Unavailable {
		t.Errorf("connection %d of node1 in a minute: %v, want refused (Unavailable)", MaxConnsPerMinute+1, err)
	}
	if err := call(addr, dialOf(t, node2), "Summary"); err != nil {
		t.Errorf("node2 beside node1's storm: %v", err)
	}
	if n := collector.RefusedBy()[StageStorm]; n < 1 {
		t.Errorf("storm refusals counted: %d, want at least 1 (%v)", n, collector.RefusedBy())
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if err := call(addr, dialOf(t, node1), "Push"); err != nil {
		t.Errorf("node1 the next minute: %v", err)
	}
	before := collector.RefusedBy()[StageHandshake]
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, c) // until the server closes it
	c.Close()
	for deadline := time.Now().Add(5 * time.Second); collector.RefusedBy()[StageHandshake] == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a plain connection was not counted as refused at the handshake: %v", collector.RefusedBy())
		}
	}
}
