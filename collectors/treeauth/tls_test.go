package treeauth

import (
	"crypto/x509"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/collectors/treeauth/tlstest"
	"github.com/persyst/persyst/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
