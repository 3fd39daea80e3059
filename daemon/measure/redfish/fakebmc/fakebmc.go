// Package fakebmc is a FAKE BMC for tests (no machine here has one): a Redfish server
// of chassis whose power is set by the test, with an energy counter that advances at
// that power, over TLS with a certificate of its own. It can stop answering (requests
// hang until the client gives up) and serve the older Power resource instead of
// EnvironmentMetrics.
package fakebmc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// BMC is the fake's state: each chassis's power and energy.
type BMC struct {
	// User and Password, if set, are the account every request must give.
	User, Password string
	// Legacy serves Power (PowerControl's PowerConsumedWatts) instead of
	// EnvironmentMetrics; NoJoules leaves EnergyJoules out of EnvironmentMetrics.
	Legacy, NoJoules bool

	mu      sync.Mutex
	now     func() time.Time
	chassis map[string]*chassis
	hang    chan struct{} // closed: answering
}

type chassis struct {
	watts, joules float64
	at            time.Time
}

// New is a BMC with no chassis, answering.
func New(now func() time.Time) *BMC {
	if now == nil {
		now = time.Now
	}
	ans := make(chan struct{})
	close(ans)
	return &BMC{now: now, chassis: map[string]*chassis{}, hang: ans}
}

// Set sets a chassis's power from now on.
func (b *BMC) Set(name string, watts float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.advance(name)
	c.watts = watts
}

// Joules is a chassis's energy counted so far.
func (b *BMC) Joules(name string) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.advance(name).joules
}

// advance brings a chassis's counter to now. b.mu is held.
func (b *BMC) advance(name string) *chassis {
	t := b.now()
	c, ok := b.chassis[name]
	if !ok {
		c = &chassis{at: t}
		b.chassis[name] = c
	}
	c.joules += c.watts * t.Sub(c.at).Seconds()
	c.at = t
	return c
}

// Answer turns answering on or off: off, every request waits until its client gives up.
func (b *BMC) Answer(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.hang:
		if !on {
			b.hang = make(chan struct{})
		}
	default:
		if on {
			close(b.hang)
		}
	}
}

func (b *BMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	ans := b.hang
	b.mu.Unlock()
	select {
	case <-ans:
	case <-r.Context().Done():
		return
	}
	if u, p, _ := r.BasicAuth(); b.User != "" && (u != b.User || p != b.Password) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/redfish/v1/Chassis/")
	name, res, _ := strings.Cut(rest, "/")
	b.mu.Lock()
	_, known := b.chassis[name]
	var c chassis
	if known {
		c = *b.advance(name)
	}
	b.mu.Unlock()
	if !ok || !known {
		http.NotFound(w, r)
		return
	}
	self := "/redfish/v1/Chassis/" + name
	var doc any
	switch {
	case res == "" && b.Legacy:
		doc = map[string]any{"@odata.id": self, "Id": name, "Power": map[string]string{"@odata.id": self + "/Power"}}
	case res == "":
		doc = map[string]any{"@odata.id": self, "Id": name, "EnvironmentMetrics": map[string]string{"@odata.id": self + "/EnvironmentMetrics"}}
	case res == "Power" && b.Legacy:
		doc = map[string]any{"@odata.id": self + "/Power", "PowerControl": []map[string]any{{"MemberId": "0", "PowerConsumedWatts": c.watts}}}
	case res == "EnvironmentMetrics" && !b.Legacy:
		m := map[string]any{"@odata.id": self + "/EnvironmentMetrics", "PowerWatts": map[string]any{"Reading": c.watts}}
		if !b.NoJoules {
			m["EnergyJoules"] = map[string]any{"Reading": c.joules}
		}
		doc = m
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(doc)
}

// Certificate is a self-signed certificate for hosts (IP addresses or names), and its
// PEM to trust it with.
func Certificate(hosts ...string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake BMC"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Serve serves b over TLS on ln with cert until stop.
func Serve(ln net.Listener, b *BMC, cert tls.Certificate) (stop func()) {
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	tl := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(tl) }()
	return func() {
		b.Answer(true)
		srv.Close()
		<-done
	}
}
