package hostfs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestField(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" \t\n", nil},
		{"rchar 1234\n", []string{"rchar", "1234"}},
		{"  a\tb\v c\fd\r\n", []string{"a", "b", "c", "d"}},
	} {
		var got []string
		for f, rest := Field([]byte(tc.in)); f != nil; f, rest = Field(rest) {
			got = append(got, string(f))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("fields of %q (-want +got):\n%s", tc.in, diff)
		}
	}
	if got := string(TrimSpace([]byte(" \t 42 \n"))); got != "42" {
		t.Errorf("TrimSpace = %q, want 42", got)
	}
}

func TestParseUint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false}, // overflows
		{"123456789012345678901", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"12a", 0, false},
		{" 1", 0, false},
	} {
		if got, ok := ParseUint([]byte(tc.in)); got != tc.want || ok != tc.ok {
			t.Errorf("ParseUint(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
