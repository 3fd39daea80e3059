// Package tlstest makes a certificate authority and agents' certificates for tests of
// mutual TLS: the tree's (certificates naming agents in a URI SAN persyst://ROLE/NAME),
// the metrics' and the web view's (servers on loopback).
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Files are an agent's PEM files (convertible to treeauth.TLSFiles).
type Files struct {
	Cert, Key, CA string
}

// CA signs certificates.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

// New makes a CA of its own, valid for an hour either side of now.
func New(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Load reads a CA's certificate and its key (PKCS #8 or SEC 1, PEM), as openssl writes
// them.
func Load(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(cb)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	kblk, _ := pem.Decode(kb)
	if kblk == nil {
		return nil, fmt.Errorf("%s: no PEM key", keyFile)
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(kblk.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(kblk.Bytes); err != nil {
			return nil, fmt.Errorf("%s: %w", keyFile, err)
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New(keyFile + ": not a signing key")
	}
	return &CA{cert, signer, cb}, nil
}

// Issue writes into dir a key and a certificate for name, with the URI SANs uris, signed
// by the CA, and the CA's certificate; it returns their paths.
func (c *CA) Issue(dir, name string, uris ...string) (Files, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		// A server on loopback (a test's) is this host.
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			return Files{}, err
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return Files{}, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, name+"-ca.crt")}
	for _, w := range []struct {
		path string
		b    []byte
		mode os.FileMode
	}{
		{f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644},
		{f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600},
		{f.CA, c.pem, 0o644},
	} {
		if err := os.WriteFile(w.path, w.b, w.mode); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}
