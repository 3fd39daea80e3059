package vmnode

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/internal/testenv"
)

// maxExposure is the most exposure `systemd-analyze security` may give each unit the
// package ships, here (offline, from the unit file) and on the virtual node (the unit
// loaded by systemd): the figures when the units were last hardened, so that hardening is
// never lost unnoticed. The node daemon's was 7.5 on the virtual node before
// RestrictNamespaces= and SystemCallFilter=; the others keep what the agents need.
var maxExposure = map[string]float64{
	"persyst-daemon.service":    5.8,
	"persyst-collector.service": 1.4,
	"persyst-sync.service":      1.4,
	"persyst-frontend.service":  1.4,
	"persyst-web.service":       1.4,
	// The monthly mails: the site's sendmail may need its set-group-id (postfix's
	// postdrop), so new privileges stay allowed, and /var writable for its spool.
	"persyst-site-mail.service": 5.4,
}

// TestUnitExposure rates each unit file of the package offline, as the virtual node rates
// the loaded units (node_test.go).
func TestUnitExposure(t *testing.T) {
	analyze := testenv.Program(t, "systemd-analyze", "systemd")
	files, err := filepath.Glob("../packaging/*.service")
	if err != nil || len(files) == 0 {
		t.Fatalf("no units in ../packaging: %v", err)
	}
	for _, f := range files {
		u := filepath.Base(f)
		out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", f).CombinedOutput()
		if err != nil && strings.Contains(string(out), "offline") {
			testenv.Unavailable(t, "systemd-analyze security has no --offline (systemd 250 and later)")
		}
		e, word, xerr := Exposure(string(out), u)
		if xerr != nil {
			t.Errorf("%v (%v):\n%s", xerr, err, out)
			continue
		}
		max, ok := maxExposure[u]
		if !ok {
			t.Errorf("%s: exposure %.1f %s, and no most it may have in maxExposure", u, e, word)
			continue
		}
		t.Logf("%s: exposure %.1f %s", u, e, word)
		if e > max {
			t.Errorf("%s: exposure %.1f, more than the %.1f it had; what it leaves open:\n%s", u, e, max, Exposed(string(out)))
		}
	}
}

func TestExposure(t *testing.T) {
	const out = `  NAME                                                        DESCRIPTION                                                             EXPOSURE
✗ PrivateNetwork=                                             Service has access to the host's network                                     0.5
✓ NoNewPrivileges=                                            Service processes cannot acquire new privileges

→ Overall exposure level for persyst-daemon.service: 5.4 MEDIUM 😐
`
	for _, tc := range []struct {
		name, out, unit string
		want            float64
		word            string
		err             bool
	}{
		{"the unit's line", out, "persyst-daemon.service", 5.4, "MEDIUM", false},
		{"another unit's line is not this one's", out, "persyst-collector.service", 0, "", true},
		{"a whole number", "→ Overall exposure level for a.service: 9 UNSAFE 😨\n", "a.service", 9, "UNSAFE", false},
		{"no verdict", "Failed to get unit\n", "a.service", 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, word, err := Exposure(tc.out, tc.unit)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want error %v", err, tc.err)
			}
			if got != tc.want || word != tc.word {
				t.Errorf("got %v %q, want %v %q", got, word, tc.want, tc.word)
			}
		})
	}
}

func TestExposed(t *testing.T) {
	out := "  NAME   DESCRIPTION   EXPOSURE\n✗ PrivateNetwork=   Service has access to the host's network   0.5\n✓ NoNewPrivileges=   Service processes cannot acquire new privileges\n"
	if got, want := Exposed(out), "✗ PrivateNetwork= Service has access to the host's network 0.5\n"; got != want {
		t.Errorf("Exposed = %q, want %q", got, want)
	}
}

func TestShow(t *testing.T) {
	got := Show("Type=notify\nNRestarts=0\nExecStart={ path=/usr/bin/persyst ; argv[]=a=b }\nbad line\nNRestarts=2\n")
	want := map[string]string{"Type": "notify", "NRestarts": "2", "ExecStart": "{ path=/usr/bin/persyst ; argv[]=a=b }"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Show (-want +got):\n%s", d)
	}
}

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30s", 30 * time.Second, false},
		{"1min 30s", 90 * time.Second, false},
		{"500ms", 500 * time.Millisecond, false},
		{"30000000", 30 * time.Second, false},
		{"infinity", 0, false},
		{"", 0, false},
		{"2 fortnights", 0, true},
	} {
		got, err := Span(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Span(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}
