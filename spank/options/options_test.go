package options

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaults(t *testing.T) {
	want := Config{DefaultOn: true, Socket: "/run/persyst/persyst.sock", Timeout: 5 * time.Second, Report: "/usr/bin/persyst"}
	if diff := cmp.Diff(want, Defaults()); diff != "" {
		t.Errorf("Defaults mismatch (-want +got):\n%s", diff)
	}
}

func TestParseArgs(t *testing.T) {
	def := Defaults()
	with := func(f func(c *Config)) Config {
		c := Defaults()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		args []string
		want Config
		// wantErrs has one entry per expected error: substrings that error must contain
		// (the first is always the quoted argument).
		wantErrs [][]string
	}{
		{name: "no args", args: nil, want: def},
		{name: "empty slice", args: []string{}, want: def},
		{name: "default=off", args: []string{"default=off"}, want: with(func(c *Config) { c.DefaultOn = false })},
		{name: "default=on", args: []string{"default=on"}, want: def},
		{name: "socket", args: []string{"socket=/x/y.sock"}, want: with(func(c *Config) { c.Socket = "/x/y.sock" })},
		{name: "timeout fraction", args: []string{"timeout=2.5"}, want: with(func(c *Config) { c.Timeout = 2500 * time.Millisecond })},
		{name: "timeout integer", args: []string{"timeout=10"}, want: with(func(c *Config) { c.Timeout = 10 * time.Second })},
		{name: "timeout smallest", args: []string{"timeout=0.001"}, want: with(func(c *Config) { c.Timeout = time.Millisecond })},
		{name: "timeout largest", args: []string{"timeout=300"}, want: with(func(c *Config) { c.Timeout = MaxTimeout })},
		{
			name: "all three",
			args: []string{"default=off", "socket=/run/p/p.sock", "timeout=1"},
			want: Config{DefaultOn: false, Socket: "/run/p/p.sock", Timeout: time.Second, Report: DefaultReport},
		},
		{name: "report", args: []string{"report=/opt/persyst/bin/persyst"}, want: with(func(c *Config) { c.Report = "/opt/persyst/bin/persyst" })},
		{name: "report off", args: []string{"report=off"}, want: with(func(c *Config) { c.Report = "" })},
		{name: "relative report", args: []string{"report=persyst"}, want: def, wantErrs: [][]string{{`"report=persyst"`, "clean absolute path"}}},
		{name: "report newline", args: []string{"report=/a\nb"}, want: def, wantErrs: [][]string{{`"report=/a\nb"`, "clean absolute path"}}},
		{name: "unknown key", args: []string{"color=blue"}, want: def, wantErrs: [][]string{{`"color=blue"`, `unknown key "color"`}}},
		{name: "key case matters", args: []string{"Default=off"}, want: def, wantErrs: [][]string{{`"Default=off"`, "unknown key"}}},
		{name: "missing =", args: []string{"default"}, want: def, wantErrs: [][]string{{`"default"`, "want key=value"}}},
		{name: "empty key", args: []string{"=on"}, want: def, wantErrs: [][]string{{`"=on"`, "want key=value"}}},
		{name: "empty arg", args: []string{""}, want: def, wantErrs: [][]string{{`""`, "want key=value"}}},
		{
			name: "duplicate key", args: []string{"default=off", "default=on"},
			want:     with(func(c *Config) { c.DefaultOn = false }),
			wantErrs: [][]string{{`"default=on"`, "default given twice"}},
		},
		{
			name: "duplicate socket", args: []string{"socket=/a.sock", "socket=/b.sock"},
			want:     with(func(c *Config) { c.Socket = "/a.sock" }),
			wantErrs: [][]string{{`"socket=/b.sock"`, "given twice"}},
		},
		{name: "bad default", args: []string{"default=yes"}, want: def, wantErrs: [][]string{{`"default=yes"`, `invalid value "yes"`}}},
		{name: "default upper case", args: []string{"default=OFF"}, want: def, wantErrs: [][]string{{`"default=OFF"`, `"OFF"`}}},
		{name: "empty default", args: []string{"default="}, want: def, wantErrs: [][]string{{`"default="`, "on or off"}}},
		{name: "relative socket", args: []string{"socket=run/p.sock"}, want: def, wantErrs: [][]string{{`"socket=run/p.sock"`, "clean absolute path"}}},
		{name: "empty socket", args: []string{"socket="}, want: def, wantErrs: [][]string{{`"socket="`, "clean absolute path"}}},
		{name: "unclean socket", args: []string{"socket=/a/../b"}, want: def, wantErrs: [][]string{{`"socket=/a/../b"`, "clean absolute path"}}},
		{name: "socket double slash", args: []string{"socket=/a//b"}, want: def, wantErrs: [][]string{{`"socket=/a//b"`, "clean absolute path"}}},
		{name: "socket trailing slash", args: []string{"socket=/a/b/"}, want: def, wantErrs: [][]string{{`"socket=/a/b/"`, "clean absolute path"}}},
		{name: "socket newline", args: []string{"socket=/a\nb"}, want: def, wantErrs: [][]string{{`"socket=/a\nb"`, "clean absolute path"}}},
		{name: "socket NUL", args: []string{"socket=/a\x00b"}, want: def, wantErrs: [][]string{{`"socket=/a\x00b"`, "clean absolute path"}}},
		{name: "timeout 0", args: []string{"timeout=0"}, want: def, wantErrs: [][]string{{`"timeout=0"`, "between 0.001 and 300 seconds"}}},
		{name: "timeout below 1ms", args: []string{"timeout=0.0001"}, want: def, wantErrs: [][]string{{`"timeout=0.0001"`, "between"}}},
		{name: "timeout negative", args: []string{"timeout=-1"}, want: def, wantErrs: [][]string{{`"timeout=-1"`, "number of seconds"}}},
		{name: "timeout exponent", args: []string{"timeout=5e0"}, want: def, wantErrs: [][]string{{`"timeout=5e0"`, "number of seconds"}}},
		{name: "timeout hex", args: []string{"timeout=0x5"}, want: def, wantErrs: [][]string{{`"timeout=0x5"`, "number of seconds"}}},
		{name: "timeout space", args: []string{"timeout= 5"}, want: def, wantErrs: [][]string{{`"timeout= 5"`, "number of seconds"}}},
		{name: "timeout two points", args: []string{"timeout=1.2.3"}, want: def, wantErrs: [][]string{{`"timeout=1.2.3"`, "number of seconds"}}},
		{name: "timeout point only", args: []string{"timeout=."}, want: def, wantErrs: [][]string{{`"timeout=."`, "number of seconds"}}},
		{name: "timeout leading point", args: []string{"timeout=.5"}, want: with(func(c *Config) { c.Timeout = 500 * time.Millisecond })},
		{name: "timeout trailing point", args: []string{"timeout=5."}, want: with(func(c *Config) { c.Timeout = 5 * time.Second })},
		{name: "timeout below a millisecond", args: []string{"timeout=0.0009999"}, want: def, wantErrs: [][]string{{`"timeout=0.0009999"`, "between"}}},
		{name: "timeout above the limit", args: []string{"timeout=300.000001"}, want: def, wantErrs: [][]string{{`"timeout=300.000001"`, "between"}}},
		{name: "timeout NaN", args: []string{"timeout=NaN"}, want: def, wantErrs: [][]string{{`"timeout=NaN"`, "number of seconds"}}},
		{name: "timeout Inf", args: []string{"timeout=Inf"}, want: def, wantErrs: [][]string{{`"timeout=Inf"`, "timeout must be"}}},
		{name: "timeout huge", args: []string{"timeout=1e300"}, want: def, wantErrs: [][]string{{`"timeout=1e300"`, "timeout must be"}}},
		{name: "timeout many digits", args: []string{"timeout=" + strings.Repeat("9", 60)}, want: def, wantErrs: [][]string{{`"timeout=999999`, "between"}}},
		{name: "timeout abc", args: []string{"timeout=abc"}, want: def, wantErrs: [][]string{{`"timeout=abc"`, `got "abc"`}}},
		{name: "timeout with unit", args: []string{"timeout=5s"}, want: def, wantErrs: [][]string{{`"timeout=5s"`, "number of seconds"}}},
		{name: "timeout empty", args: []string{"timeout="}, want: def, wantErrs: [][]string{{`"timeout="`, "number of seconds"}}},
		{name: "timeout above max", args: []string{"timeout=300.5"}, want: def, wantErrs: [][]string{{`"timeout=300.5"`, "between 0.001 and 300"}}},
		{name: "timeout far above max", args: []string{"timeout=3600"}, want: def, wantErrs: [][]string{{`"timeout=3600"`, "between"}}},
		{
			name: "several errors",
			args: []string{"bogus", "default=maybe", "socket=relative", "timeout=0", "color=red", "timeout=1"},
			want: def,
			wantErrs: [][]string{
				{`"bogus"`, "key=value"},
				{`"default=maybe"`, `"maybe"`},
				{`"socket=relative"`, "clean absolute path"},
				{`"timeout=0"`, "between"},
				{`"color=red"`, "unknown key"},
				{`"timeout=1"`, "given twice"},
			},
		},
		{
			name:     "good args survive bad ones",
			args:     []string{"default=off", "timeout=x", "socket=/s.sock"},
			want:     Config{DefaultOn: false, Socket: "/s.sock", Timeout: DefaultTimeout, Report: DefaultReport},
			wantErrs: [][]string{{`"timeout=x"`, "number of seconds"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := ParseArgs(tc.args)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseArgs(%q) config mismatch (-want +got):\n%s", tc.args, diff)
			}
			msgs := make([]string, len(errs))
			for i, e := range errs {
				msgs[i] = e.Error()
			}
			if len(errs) != len(tc.wantErrs) {
				t.Fatalf("ParseArgs(%q) returned %d errors %q, want %d", tc.args, len(errs), msgs, len(tc.wantErrs))
			}
			for i, want := range tc.wantErrs {
				var missing []string
				for _, w := range want {
					if !strings.Contains(msgs[i], w) {
						missing = append(missing, w)
					}
				}
				if diff := cmp.Diff([]string(nil), missing); diff != "" {
					t.Errorf("error %d %q lacks substrings (-want +got):\n%s", i, msgs[i], diff)
				}
				if !strings.HasPrefix(msgs[i], "argument "+want[0]) {
					t.Errorf("error %d %q does not start by naming its argument %s", i, msgs[i], want[0])
				}
			}
		})
	}
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in      string
		want    bool
		wantErr bool
	}{
		{"on", true, false},
		{"off", false, false},
		{"ON", false, true},
		{"Off", false, true},
		{"", false, true},
		{"bogus", false, true},
		{"on ", false, true},
		{"1", false, true},
		{"true", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseValue(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseValue(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				for _, w := range []string{strings.ReplaceAll(`"`+tc.in+`"`, "\n", `\n`), "on or off"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("ParseValue(%q) error %q lacks %q", tc.in, err, w)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseValue(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
