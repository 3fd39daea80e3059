package mtls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/persyst/persyst/collectors/pb"
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

// issue writes an agent's certificate (valid for 127.0.0.1) and key signed by c, and
// returns its Files.
func (c ca) issue(t *testing.T, dir, name string) Files {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, name+"-ca.crt")}
	os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	os.WriteFile(f.CA, c.pem, 0o644)
	return f
}

type pinger struct {
	pb.UnimplementedCollectorServer
}

func (pinger) Ping(ctx context.Context, in *pb.Heartbeat) (*pb.Heartbeat, error) {
	return &pb.Heartbeat{Name: "c1", Role: "collector"}, nil
}

// TestMutualTLS: a server with the tree's certificates answers a client with a
// certificate from the same CA, and refuses a plain client and one from another CA.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	site := newCA(t, "site")
	server := site.issue(t, dir, "collector")
	sopt, err := server.ServerOption()
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopt)
	pb.RegisterCollectorServer(srv, pinger{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Stop()

	ping := func(dial grpc.DialOption) error {
		conn, err := grpc.NewClient(ln.Addr().String(), dial)
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = pb.NewCollectorClient(conn).Ping(ctx, &pb.Heartbeat{})
		return err
	}
	good, _ := site.issue(t, dir, "node1").DialOption()
	if err := ping(good); err != nil {
		t.Errorf("an agent of the same CA is refused: %v", err)
	}
	if err := ping(grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Errorf("a plain client is answered")
	}
	rogue, _ := newCA(t, "rogue").issue(t, dir, "intruder").DialOption()
	if err := ping(rogue); err == nil {
		t.Errorf("a client of another CA is answered")
	}
	if _, err := (Files{Cert: server.Cert}).ServerOption(); err == nil || !strings.Contains(err.Error(), "needed together") {
		t.Errorf("partial files: %v", err)
	}
	if o, err := (Files{}).ServerOption(); err != nil || o == nil {
		t.Errorf("no files: %v", err)
	}
}
