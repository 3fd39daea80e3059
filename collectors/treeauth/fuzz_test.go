package treeauth

import (
	"strings"
	"testing"
)

// FuzzParseUnmunge: unmunge's output is parsed without panicking; a decoded credential
// always had a status line of success.
func FuzzParseUnmunge(f *testing.F) {
	f.Add([]byte("STATUS:          0\nENCODE_HOST:     10.0.0.1\nUID:             0\nGID:             0\n\n{\"v\":1}"))
	f.Add([]byte("STATUS:          Replayed credential (17)\nUID: 0\nGID: 0\n\n"))
	f.Add([]byte("UID: 4294967296\nSTATUS: 0\nGID: 0\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseUnmunge(b)
		if err == nil && !strings.Contains(string(b), "STATUS:") {
			t.Errorf("decoded %+v without a status", d)
		}
	})
}

// FuzzClean: text from the other end comes out printable and bounded.
func FuzzClean(f *testing.F) {
	f.Add("collector/col1: \x1b[31mred\x07")
	f.Fuzz(func(t *testing.T, s string) {
		c := clean(s)
		if len(c) > 210 {
			t.Errorf("clean gave %d bytes", len(c))
		}
		for _, r := range c {
			if (r < 0x20 || r > 0x7e) && r != '…' {
				t.Errorf("clean(%q) = %q holds %U", s, c, r)
			}
		}
	})
}
