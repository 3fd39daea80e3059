package redfish

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/persyst/persyst/internal/secret"
)

// Options configure a Meter.
type Options struct {
	// URL is the node's chassis on its BMC (https://bmc/redfish/v1/Chassis/1), or one
	// of its power resources.
	URL string
	// User and PasswordFile are the BMC account's (basic authentication; the password
	// in a file only its owner reads). None: the BMC is asked without.
	User, PasswordFile string
	// CAFile holds the certificates (PEM) the BMC's is checked against ("": the
	// system's).
	CAFile string
	// Timeout bounds each request (default 2 s); Interval is the time between readings
	// (default 10 s; the daemon: its cycle).
	Timeout, Interval time.Duration
	Now               func() time.Time
	Log               zerolog.Logger
}

// Meter reads a node's power from its BMC in the background and counts its energy.
type Meter struct {
	o      Options
	base   *url.URL
	client *http.Client
	pass   string

	mu       sync.Mutex
	resource string // the power resource's URL, once found from the chassis
	have     bool
	last     Reading
	lastAt   time.Time
	joules   float64 // counted since the first reading
	reported float64 // the most Read has given: it never goes back
	resets   int
	err      error     // the last request's, nil once one succeeds
	errSince time.Time // when the BMC stopped answering
}

// New checks the options and reads the password and certificates; it asks the BMC
// nothing (Run does).
func New(o Options) (*Meter, error) {
	o.Timeout = cmp.Or(o.Timeout, 2*time.Second)
	o.Interval = cmp.Or(o.Interval, 10*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	u, err := url.Parse(o.URL)
	switch {
	case err != nil:
		return nil, errors.New("redfish: the BMC's URL does not parse (not repeated here: it may hold a password)")
	case u.User != nil:
		return nil, errors.New("redfish: the account goes in its own settings, not in the URL (not repeated here)")
	case u.Scheme != "https" && u.Scheme != "http", u.Host == "":
		return nil, fmt.Errorf("redfish: %q: want https://HOST/redfish/v1/Chassis/ID", o.URL)
	case u.Scheme == "http" && o.PasswordFile != "":
		return nil, fmt.Errorf("redfish: %q: http would send the BMC's password in clear; use https", o.URL)
	}
	m := &Meter{o: o, base: u}
	if o.PasswordFile != "" {
		if m.pass, err = secret.Read(o.PasswordFile); err != nil {
			return nil, fmt.Errorf("redfish: %w", err)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxConnsPerHost = 1, 1
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redfish: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redfish: %s: no PEM certificate in it", o.CAFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	m.client = &http.Client{Transport: tr, Timeout: o.Timeout,
		// A BMC that sends the request elsewhere would be sent the password there too.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return m, nil
}

// Run reads the BMC at once and then every Interval until ctx ends.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.o.Interval)
	defer t.Stop()
	defer m.client.CloseIdleConnections()
	for {
		m.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads the BMC once and counts the energy since its last reading.
func (m *Meter) Poll(ctx context.Context) {
	m.mu.Lock()
	res := m.resource
	m.mu.Unlock()
	t0 := m.o.Now()
	r, res, err := m.fetch(ctx, res)
	at := t0.Add(m.o.Now().Sub(t0) / 2)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resource = res
	if err != nil {
		if m.err == nil {
			m.errSince = at
			m.o.Log.Warn().Err(err).Str("bmc", m.o.URL).Msg("the node's power meter (BMC) did not answer: jobs' energy from RAPL alone until it does")
		}
		m.err = err
		return
	}
	if m.err != nil {
		m.o.Log.Info().Str("bmc", m.o.URL).Time("since", m.errSince).Msg("the node's power meter (BMC) answers again")
	}
	m.err = nil
	m.count(r, at)
}

// count adds the energy between the last reading and r, read at at. m.mu is held.
func (m *Meter) count(r Reading, at time.Time) {
	defer func() { m.last, m.lastAt, m.have = r, at, true }()
	if !m.have {
		return
	}
	dt := at.Sub(m.lastAt)
	switch {
	case r.HasJoules && m.last.HasJoules && r.Joules >= m.last.Joules:
		m.joules += r.Joules - m.last.Joules
		return
	case r.HasJoules && m.last.HasJoules:
		// The BMC's counter went backwards (reset): the interval is not known.
	case dt > 0 && dt <= m.maxGap():
		m.joules += (m.last.Watts + r.Watts) / 2 * dt.Seconds()
		return
	}
	m.resets++
	m.reported = m.joules
}

// maxGap is the longest time between two power readings whose energy is counted.
func (m *Meter) maxGap() time.Duration { return 3*m.o.Interval + m.o.Timeout }

// Read returns the node's energy counted from the first reading to t (at the last power
// read since the last reading), how many times it could not be counted across a stretch
// (resets: an interval over one is not measured), and why there is no value: the BMC
// has not answered yet, or not for longer than two intervals.
func (m *Meter) Read(t time.Time) (joules float64, resets int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stale := 2*m.o.Interval + m.o.Timeout
	switch {
	case !m.have && m.err != nil:
		return 0, m.resets, fmt.Errorf("the node's power meter (BMC) does not answer: %w", m.err)
	case !m.have:
		return 0, m.resets, errors.New("the node's power meter (BMC) has not been read yet")
	case t.Sub(m.lastAt) > stale:
		why := "no reading"
		if m.err != nil {
			why = m.err.Error()
		}
		return 0, m.resets, fmt.Errorf("the node's power meter (BMC) has not answered since %s: %s", m.lastAt.Format(time.TimeOnly), why)
	}
	v := m.joules + m.last.Watts*min(max(t.Sub(m.lastAt), 0), stale).Seconds()
	m.reported = max(m.reported, v)
	return m.reported, m.resets, nil
}

// fetch reads the power resource res, or finds it from the chassis first ("": not yet
// found), and returns its reading and the resource.
func (m *Meter) fetch(ctx context.Context, res string) (Reading, string, error) {
	if res != "" {
		d, err := m.get(ctx, res)
		if err == nil && d.HasReading {
			return d.Reading, res, nil
		}
		if err == nil {
			err = ErrNoReading
		}
		return Reading{}, "", err // found again from the chassis next time
	}
	d, err := m.get(ctx, m.base.String())
	if err != nil {
		return Reading{}, "", err
	}
	if d.HasReading { // the URL is a power resource itself
		return d.Reading, m.base.String(), nil
	}
	for _, l := range []string{d.EnvironmentMetrics, d.Power} {
		if l == "" {
			continue
		}
		u, err := m.resolve(l)
		if err != nil {
			return Reading{}, "", err
		}
		p, err := m.get(ctx, u)
		if err != nil {
			return Reading{}, "", err
		}
		if p.HasReading {
			return p.Reading, u, nil
		}
	}
	return Reading{}, "", fmt.Errorf("%s: %w (neither EnvironmentMetrics nor Power gives one)", m.o.URL, ErrNoReading)
}

// resolve turns a link of the BMC's into a URL on the same BMC.
func (m *Meter) resolve(link string) (string, error) {
	u, err := m.base.Parse(link)
	if err != nil {
		return "", fmt.Errorf("redfish: link %q: %w", link, err)
	}
	if u.Scheme != m.base.Scheme || u.Host != m.base.Host {
		return "", fmt.Errorf("redfish: link %q leads off the BMC %s", link, m.base.Host)
	}
	return u.String(), nil
}

func (m *Meter) get(ctx context.Context, u string) (Document, error) {
	ctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Document{}, fmt.Errorf("redfish: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if m.o.User != "" {
		req.SetBasicAuth(m.o.User, m.pass)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return Document{}, fmt.Errorf("redfish: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Document{}, fmt.Errorf("redfish: GET %s: %s", u, resp.Status)
	}
	return Parse(resp.Body)
}

// Last is the last reading, or why there is none.
func (m *Meter) Last() (Reading, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil || !m.have {
		return Reading{}, cmp.Or(m.err, errors.New("the node's power meter (BMC) has not been read yet"))
	}
	return m.last, nil
}

// Name is how digests name the meter.
func (m *Meter) Name() string { return "the node's meter (BMC, Redfish)" }
