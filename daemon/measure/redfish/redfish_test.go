package redfish

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/daemon/measure/redfish/fakebmc"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Document
		err  string
	}{
		{file: "chassis.json", want: Document{EnvironmentMetrics: "/redfish/v1/Chassis/1/EnvironmentMetrics", Power: "/redfish/v1/Chassis/1/Power"}},
		// EnergyJoules is the counter; EnergykWh (too coarse for a cycle) is not read.
		{file: "environmentmetrics.json", want: Document{Reading: Reading{Watts: 374.2, Joules: 130199040000, HasJoules: true}, HasReading: true}},
		{file: "environmentmetrics-power-only.json", want: Document{Reading: Reading{Watts: 512}, HasReading: true}},
		// The chassis's control, not its parts added to it.
		{file: "power.json", want: Document{Reading: Reading{Watts: 344}, HasReading: true}},
		{file: "power-no-reading.json", want: Document{}},
		{file: "negative.json", err: "want numbers of 0 or more"},
		{file: "truncated.json", err: "unexpected EOF"},
	} {
		f, err := os.Open(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(f)
		f.Close()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %+v, %v; want an error with %q", tc.file, got, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.file, diff)
		}
	}
}

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fake serves a FAKE BMC over TLS on loopback for a test, on the test's clock, with
// a chassis "1" at 200 W; the Meter's options trust it.
func fake(t *testing.T, b func(*fakebmc.BMC)) (*fakebmc.BMC, Options, *clock) {
	t.Helper()
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	bmc := fakebmc.New(c.now)
	if b != nil {
		b(bmc)
	}
	bmc.Set("1", 200)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert, ca, err := fakebmc.Certificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fakebmc.Serve(ln, bmc, cert))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	return bmc, Options{URL: "https://" + ln.Addr().String() + "/redfish/v1/Chassis/1", CAFile: caFile,
		Timeout: 200 * time.Millisecond, Interval: 10 * time.Second, Now: c.now}, c
}

func newMeter(t *testing.T, o Options) *Meter {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMeterCounts: the node's energy from the BMC's counter, from its power readings
// (EnvironmentMetrics without EnergyJoules, and the older Power resource) integrated,
// and between readings at the last power read.
func TestMeterCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*fakebmc.BMC)
	}{
		{"EnvironmentMetrics, EnergyJoules", nil},
		{"EnvironmentMetrics, power only", func(b *fakebmc.BMC) { b.NoJoules = true }},
		{"Power", func(b *fakebmc.BMC) { b.Legacy = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bmc, o, c := fake(t, tc.set)
			m := newMeter(t, o)
			ctx := context.Background()
			t0 := c.now()
			m.Poll(ctx)
			c.add(10 * time.Second)
			bmc.Set("1", 300) // from here on: 300 W
			m.Poll(ctx)
			// 10 s at 200 W: the counter's 2000 J; integrated, the trapezoid between
			// 200 W and 300 W read at either end, 2500 J.
			want := 2000.0
			if tc.set != nil {
				want = 2500
			}
			if got, resets, err := m.Read(t0.Add(10 * time.Second)); err != nil || resets != 0 || !near(got, want) {
				t.Errorf("after 10 s: %v J, %d resets, %v; want %v J", got, resets, err, want)
			}
			if got, _, err := m.Read(t0.Add(15 * time.Second)); err != nil || !near(got, want+5*300) {
				t.Errorf("5 s after the last reading: %v J, %v; want %v J at 300 W", got, err, want+1500)
			}
		})
	}
}

func near(a, b float64) bool { return a > b-1e-6 && a < b+1e-6 }

// TestMeterBMCGone: a BMC that stops answering holds up no reading for longer than the
// timeout; from two intervals on, Read says since when it has not answered; the stretch
// without readings is not counted (a reset), and counting goes on once it answers.
func TestMeterBMCGone(t *testing.T) {
	bmc, o, c := fake(t, func(b *fakebmc.BMC) { b.NoJoules = true })
	m := newMeter(t, o)
	ctx := context.Background()
	t0 := c.now()
	m.Poll(ctx)
	bmc.Answer(false)
	start := time.Now()
	for range 4 {
		c.add(10 * time.Second)
		m.Poll(ctx)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("4 polls of a BMC that does not answer took %v, want each within its 200 ms timeout", d)
	}
	if _, _, err := m.Read(t0.Add(15 * time.Second)); err != nil {
		t.Errorf("15 s after the last reading (under 2 intervals): %v", err)
	}
	_, _, err := m.Read(c.now())
	if err == nil || !strings.Contains(err.Error(), "has not answered since") {
		t.Errorf("40 s after the last reading: %v, want it said since when", err)
	}
	bmc.Answer(true)
	c.add(10 * time.Second)
	m.Poll(ctx)
	j1, resets, err := m.Read(c.now())
	if err != nil || resets != 1 || j1 != 0 {
		t.Errorf("answering again after 50 s: %v J, %d resets, %v; want 0 J (the stretch not counted), 1 reset", j1, resets, err)
	}
	c.add(10 * time.Second)
	m.Poll(ctx)
	if j2, _, err := m.Read(c.now()); err != nil || !near(j2-j1, 2000) {
		t.Errorf("10 s later at 200 W: %v J more, %v; want 2000", j2-j1, err)
	}
}

// TestMeterCounterBackwards: the BMC's counter going back is a reset, never a negative.
func TestMeterCounterBackwards(t *testing.T) {
	m := newMeter(t, Options{URL: "https://bmc.invalid/redfish/v1/Chassis/1"})
	t0 := time.Unix(1_800_000_000, 0)
	m.count(Reading{Watts: 100, Joules: 5000, HasJoules: true}, t0)
	m.count(Reading{Watts: 100, Joules: 6000, HasJoules: true}, t0.Add(10*time.Second))
	m.count(Reading{Watts: 100, Joules: 10, HasJoules: true}, t0.Add(20*time.Second))
	m.count(Reading{Watts: 100, Joules: 1010, HasJoules: true}, t0.Add(30*time.Second))
	if got, resets, err := m.Read(t0.Add(30 * time.Second)); err != nil || got != 2000 || resets != 1 {
		t.Errorf("%v J, %d resets, %v; want 2000 J, 1 reset", got, resets, err)
	}
}

func TestMeterRefuses(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o644)
	for _, tc := range []struct {
		o   Options
		err string
	}{
		{Options{URL: "http://bmc/redfish/v1/Chassis/1", User: "u", PasswordFile: pw}, "in clear"},
		{Options{URL: "https://u:p@bmc/redfish/v1/Chassis/1"}, "not in the URL"},
		{Options{URL: "ftp://bmc/x"}, "want https://"},
		{Options{URL: "https://bmc/redfish/v1/Chassis/1", User: "u", PasswordFile: open}, "mode 0644"},
		{Options{URL: "https://bmc/redfish/v1/Chassis/1", CAFile: pw}, "no PEM certificate"},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want an error with %q", tc.o, err, tc.err)
		}
	}
}

// TestMeterAccount: the account is sent; a wrong one is said, and no reading taken.
func TestMeterAccount(t *testing.T) {
	_, o, c := fake(t, func(b *fakebmc.BMC) { b.User, b.Password = "persyst", "secret" })
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.User, o.PasswordFile = "persyst", pw
	m := newMeter(t, o)
	m.Poll(context.Background())
	if _, _, err := m.Read(c.now()); err != nil {
		t.Errorf("with the account: %v", err)
	}
	o.User = "someone"
	m = newMeter(t, o)
	m.Poll(context.Background())
	if _, _, err := m.Read(c.now()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("with another account: %v, want 401", err)
	}
}

func TestResolveStaysOnTheBMC(t *testing.T) {
	m := newMeter(t, Options{URL: "https://bmc.invalid/redfish/v1/Chassis/1"})
	if u, err := m.resolve("/redfish/v1/Chassis/1/Power"); err != nil || u != "https://bmc.invalid/redfish/v1/Chassis/1/Power" {
		t.Errorf("a path: %q, %v", u, err)
	}
	for _, l := range []string{"https://elsewhere.invalid/redfish/v1/Chassis/1/Power", "http://bmc.invalid/x", "//elsewhere.invalid/x"} {
		if u, err := m.resolve(l); err == nil {
			t.Errorf("%s: %q, want refused", l, u)
		}
	}
}
