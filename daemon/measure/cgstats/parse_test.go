package cgstats

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestParseFlatKeyed(t *testing.T) {
	tests := []struct {
		name, in string
		want     map[string]uint64
		err      string
	}{
		{"cpu.stat v2", "usage_usec 10\nuser_usec 7\nsystem_usec 3\n", map[string]uint64{"usage_usec": 10, "user_usec": 7, "system_usec": 3}, ""},
		{"blank lines", "\noom 1\n\n", map[string]uint64{"oom": 1}, ""},
		{"empty", "", map[string]uint64{}, ""},
		{"three fields", "a 1\nb 2 3\n", nil, `line 2: want "key value", got "b 2 3"`},
		{"not a number", "a 1\nb -2\n", nil, `line 2: key b: want a number, got "-2"`},
		{"a key not asked for is checked too", "a 1\nc x\n", nil, `line 2: key c: want a number, got "x"`},
		{"too large", "a 18446744073709551616\n", nil, `line 1: key a: want a number, got "18446744073709551616"`},
		{"largest", "a 18446744073709551615\n", map[string]uint64{"a": 18446744073709551615}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Asked for every key of the file and one it lacks.
			vals, err := parseFlatKeyed([]byte(tt.in), "usage_usec", "user_usec", "system_usec", "oom", "a", "b", "absent")
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			var got map[string]uint64
			if err == nil {
				got = map[string]uint64{}
				for _, k := range vals.keys {
					if v, ok := vals.get(k); ok {
						got[k] = v
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSingle(t *testing.T) {
	tests := []struct {
		name, in string
		want     uint64
		ok       bool
		err      string
	}{
		{"number", "67108864\n", 67108864, true, ""},
		{"max", "max\n", 0, false, ""},
		{"empty", "", 0, false, `line 1: want a number, got ""`},
		{"junk", "12k\n", 0, false, `line 1: want a number, got "12k"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok, err := parseSingle([]byte(tt.in))
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if v != tt.want || ok != tt.ok {
				t.Errorf("got %d,%v want %d,%v", v, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseIOStat(t *testing.T) {
	tests := []struct {
		name, in string
		want     ioTotals
		err      string
	}{
		{"two devices", "8:16 rbytes=10 wbytes=1 rios=2 wios=1 dbytes=0 dios=0\n8:0 rbytes=5 wbytes=4 rios=1 wios=3 dbytes=9 dios=9\n", ioTotals{15, 5, 3, 4}, ""},
		{"empty is zero I/O", "", ioTotals{}, ""},
		{"unknown keys skipped", "259:0 rbytes=1 cost.usage=7\n", ioTotals{rbytes: 1}, ""},
		{"no device", "rbytes=1\n", ioTotals{}, `line 1: want MAJ:MIN first, got "rbytes=1"`},
		{"no equals", "8:0 rbytes=1\n8:1 rbytes\n", ioTotals{}, `line 2: want key=value, got "rbytes"`},
		{"bad number", "8:0 wios=x\n", ioTotals{}, `line 1: key wios: want a number, got "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseIOStat(strings.NewReader(tt.in))
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(ioTotals{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseBlkio(t *testing.T) {
	type res struct {
		R, W uint64
		OK   bool
	}
	tests := []struct {
		name, in string
		want     res
		err      string
	}{
		{"devices", "8:0 Read 4\n8:0 Write 1\n8:0 Sync 5\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 5\n8:16 Read 2\n8:16 Total 2\nTotal 7\n", res{6, 1, true}, ""},
		{"only Total: measured zero", "Total 0\n", res{0, 0, true}, ""},
		{"empty: not measured", "", res{}, ""},
		{"bad value", "8:0 Read x\nTotal 0\n", res{}, `line 1: 8:0 Read: want a number, got "x"`},
		{"bad total", "Total -\n", res{}, `line 1: Total: want a number, got "-"`},
		{"bad shape", "Total 0\n8:0 Read\n", res{}, `line 2: want "MAJ:MIN Op value" or "Total value", got "8:0 Read"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w, ok, err := parseBlkio(strings.NewReader(tt.in))
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, res{r, w, ok}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePSI(t *testing.T) {
	tests := []struct {
		name, in string
		want     psi
		err      string
	}{
		{"some and full", "some avg10=2.45 avg60=5.26 avg300=15.97 total=570929274\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			psi{some: Pressure{2.45, 570929274}, hasSome: true, hasFull: true}, ""},
		{"cpu before 5.13: some only", "some avg10=0.10 avg60=0.00 avg300=0.00 total=42\n", psi{some: Pressure{0.10, 42}, hasSome: true}, ""},
		{"bad kind", "some avg10=0 total=1\npartial avg10=0 total=1\n", psi{}, `line 2: want some or full, got "partial"`},
		{"bad avg", "some avg10=x total=1\n", psi{}, `line 1: avg10: want a number, got "x"`},
		{"no total", "full avg10=1.00 avg60=0.00\n", psi{}, `line 1: want avg10= and total=, got "full avg10=1.00 avg60=0.00"`},
		{"averages as strconv reads them", "some avg10=99.99 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.07 avg60=0.00 avg300=0.00 total=2\n",
			psi{some: Pressure{99.99, 1}, full: Pressure{0.07, 2}, hasSome: true, hasFull: true}, ""},
		{"bad avg form", "some avg10=1. total=1\n", psi{}, `line 1: avg10: want a number, got "1."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePSI([]byte(tt.in))
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(psi{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFieldString(t *testing.T) {
	if got, want := (MemPeak | PSIIOFull).String(), "mem_peak|psi_io_full"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
	if got := Field(0).String(); got != "none" {
		t.Errorf("got %q", got)
	}
	if len(fieldNames) != 23 || AllFields != 1<<23-1 {
		t.Errorf("fieldNames and Field constants out of step")
	}
}
