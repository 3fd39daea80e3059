// Package mtls gives the agent tree's gRPC connections optional mutual TLS: every agent
// (node daemon, collector, frontend) has a certificate signed by the site's CA, presents
// it, and accepts only peers with a certificate from the same CA. Without files, the
// connections are plain (a management network the site trusts).
package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/persyst/persyst/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Files are the PEM files of one agent: its certificate and key, and the CA that signs
// every agent of the tree.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

func (f Files) load() (tls.Certificate, *x509.CertPool, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return tls.Certificate{}, nil, errors.New("mtls: TLSCert, TLSKey and TLSCA are needed together")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("mtls: %s, %s: %w", f.Cert, f.Key, err)
	}
	b, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("mtls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return tls.Certificate{}, nil, fmt.Errorf("mtls: %s: no PEM certificate", f.CA)
	}
	return cert, pool, nil
}

// ServerOption is the gRPC server option: TLS requiring a client certificate from the
// CA, or none without files.
func (f Files) ServerOption() (grpc.ServerOption, error) {
	if !f.Enabled() {
		return grpc.EmptyServerOption{}, nil
	}
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
	})), nil
}

// DialOption is the gRPC client option: TLS presenting the agent's certificate and
// verifying the server's against the CA, or plain without files.
func (f Files) DialOption() (grpc.DialOption, error) {
	if !f.Enabled() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13,
	})), nil
}

// FromConfig returns persyst.conf's TLSCert, TLSKey and TLSCA.
func FromConfig(c config.Config) Files {
	return Files{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA}
}
