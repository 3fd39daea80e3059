package treeauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) ca {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return ca{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes an agent's certificate (with the URI SANs uris) and key signed by c.
func (c ca) issue(t *testing.T, name string, uris ...string) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	f := TLSFiles{Cert: filepath.Join(dir, "agent.crt"), Key: filepath.Join(dir, "agent.key"), CA: filepath.Join(dir, "ca.crt")}
	os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	os.WriteFile(f.CA, c.pem, 0o644)
	return f
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
	collector := agent(Collector, "col1", site.issue(t, "col1", "persyst://collector/col1"))
	addr, rec := serve(t, collector)
	node1 := agent(Node, "node1", site.issue(t, "node1", "persyst://node/node1"))
	front := agent(Frontend, "front", site.issue(t, "front", "persyst://frontend/front"))
	noSAN := agent(Node, "node1", site.issue(t, "node1"))
	twoSANs := agent(Node, "node1", site.issue(t, "node1", "persyst://node/node1", "persyst://frontend/front"))
	rogue := agent(Node, "node1", newCA(t, "rogue").issue(t, "node1", "persyst://node/node1"))

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
