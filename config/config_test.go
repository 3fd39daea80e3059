package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Config
		wantErr string
	}{
		{"empty", "", Defaults(), ""},
		{"comments and blanks", "# persyst\n\n   # x\n", Defaults(), ""},
		{"unix socket", "SlurmRestd=unix:/run/slurmrestd.sock\n", Config{SlurmRestd: "unix:/run/slurmrestd.sock", SlurmRestdTimeout: 10 * time.Second, Cycle: time.Minute}, ""},
		{"keys are case-insensitive, spaces trimmed", " slurmrestd = unix:/x.sock # local\nSLURMRESTDTIMEOUT=2.5", Config{SlurmRestd: "unix:/x.sock", SlurmRestdTimeout: 2500 * time.Millisecond, Cycle: time.Minute}, ""},
		{"jwt", "SlurmRestd=https://ctl:6820\nSlurmRestdUser=persyst\nSlurmRestdTokenFile=/etc/persyst/jwt\nSlurmRestdTimeout=1m",
			Config{SlurmRestd: "https://ctl:6820", SlurmRestdUser: "persyst", SlurmRestdTokenFile: "/etc/persyst/jwt", SlurmRestdTimeout: time.Minute, Cycle: time.Minute}, ""},
		{"jwt without token", "SlurmRestd=http://ctl:6820\n", Config{}, "test.conf: SlurmRestd=http://ctl:6820 needs SlurmRestdUser and SlurmRestdTokenFile"},
		{"unknown key", "\nSlurmRest=unix:/x\n", Config{}, `test.conf:2: unknown key "SlurmRest"`},
		{"no equals", "SlurmRestd\n", Config{}, `test.conf:1: want Key=Value`},
		{"empty key", "=x\n", Config{}, `test.conf:1: want Key=Value`},
		{"bad url", "SlurmRestd=/run/x.sock", Config{}, `test.conf:1: SlurmRestd: want unix:/path or http(s)://host:port`},
		{"relative token file", "SlurmRestdTokenFile=jwt", Config{}, `test.conf:1: SlurmRestdTokenFile: want an absolute path`},
		{"cycle", "CycleSeconds=5", Config{SlurmRestdTimeout: 10 * time.Second, Cycle: 5 * time.Second}, ""},
		{"cycle below 1 s", "CycleSeconds=0.5", Config{}, `test.conf:1: CycleSeconds: want whole seconds between 1 and 3600, got "0.5"`},
		{"bad timeout", "SlurmRestdTimeout=-1", Config{}, `test.conf:1: SlurmRestdTimeout: want seconds`},
		{"timeout too long", "SlurmRestdTimeout=2h", Config{}, `test.conf:1: SlurmRestdTimeout: want seconds`},
		{"repeated key", "SlurmRestd=unix:/a\nslurmrestd=unix:/b\n", Config{}, `test.conf:2: SlurmRestd already set on line 1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in), "test.conf")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	c, err := Load(t.TempDir()+"/none.conf", true)
	if err != nil || c != Defaults() {
		t.Errorf("Load(missing, optional) = %+v, %v; want defaults", c, err)
	}
	if _, err := Load(t.TempDir()+"/none.conf", false); err == nil || !strings.Contains(err.Error(), "none.conf") {
		t.Errorf("Load(missing, required) error = %v, want one naming the file", err)
	}
}
