package procio

import (
	"os"
	"path/filepath"
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

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestParseIO(t *testing.T) {
	tests := []struct {
		file string
		want IO
		err  string
	}{
		{"io/self.txt", IO{RChar: 6976, SyscR: 10}, ""},
		{"io/shell.txt", IO{RChar: 69696, WChar: 41052, SyscR: 51, SyscW: 13, ReadBytes: 77824, WriteBytes: 45056, CancelledWriteBytes: 40960}, ""},
		{"io/zombie.txt", IO{WChar: 1000, SyscW: 1}, ""},
		{"io/future-key.txt", IO{1, 2, 3, 4, 5, 6, 7}, ""},
		{"io/missing-keys.txt", IO{}, "missing keys: syscw, cancelled_write_bytes"},
		{"io/bad-number.txt", IO{}, `line 2: wchar: want a number, got "2x"`},
		{"io/no-colon.txt", IO{}, `line 2: want "key: value", got "wchar 2"`},
		{"io/duplicate.txt", IO{}, "line 2: duplicate key rchar"},
		{"io/overflow.txt", IO{}, `line 2: wchar: want a number, got "18446744073709551616"`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := parseIO(open(t, tt.file))
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseIOEmpty(t *testing.T) {
	_, err := parseIO(strings.NewReader(""))
	want := "missing keys: rchar, wchar, syscr, syscw, read_bytes, write_bytes, cancelled_write_bytes"
	if diff := cmp.Diff(want, errString(err)); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		file string
		want procStat
		err  string
	}{
		{"stat/self.txt", procStat{PPID: 24075, StartTime: 568040, State: 'R'}, ""},
		{"stat/paren-comm.txt", procStat{PPID: 24075, StartTime: 568040, State: 'R'}, ""},
		{"stat/zombie.txt", procStat{PPID: 24144, StartTime: 568258, State: 'Z'}, ""},
		{"stat/short.txt", procStat{}, "line 1: 4 fields after comm, want at least 20"},
		{"stat/no-paren.txt", procStat{}, `line 1: want "pid (comm) state ...", got "sh) S 1"`},
		{"stat/bad-starttime.txt", procStat{}, `line 1: starttime: want a number, got "5680x0"`},
		{"stat/bad-ppid.txt", procStat{}, `line 1: ppid: want a number, got "-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := parseStat(open(t, tt.file))
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseStatComm covers comm values the kernel prints raw (PR_SET_NAME allows any
// bytes): parentheses, spaces, a newline, digits that look like fields.
func TestParseStatComm(t *testing.T) {
	const tail = " S 7 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0\n"
	for _, comm := range []string{"x", "(a) b (c)", ")", "a\nb", "1 2 3) R 4", ""} {
		got, err := parseStat(strings.NewReader("42 (" + comm + ")" + tail))
		if err != nil {
			t.Errorf("comm %q: %v", comm, err)
			continue
		}
		if diff := cmp.Diff(procStat{PPID: 7, StartTime: 99, State: 'S'}, got); diff != "" {
			t.Errorf("comm %q (-want +got):\n%s", comm, diff)
		}
	}
}

func TestParseProcs(t *testing.T) {
	tests := []struct {
		name, in string
		want     []int
		err      string
	}{
		{"two", "12\n7\n", []int{12, 7}, ""},
		{"empty", "", nil, ""},
		{"junk", "12\nx\n", []int{12}, `line 2: want a pid, got "x"`},
		{"zero", "0\n", nil, `line 1: want a pid, got "0"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcs([]byte(tt.in), nil)
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestIOAddSub(t *testing.T) {
	a := IO{10, 20, 30, 40, 50, 60, 70}
	b := IO{1, 25, 3, 40, 60, 6, 7}
	if diff := cmp.Diff(IO{11, 45, 33, 80, 110, 66, 77}, a.Add(b)); diff != "" {
		t.Errorf("Add (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(IO{9, 0, 27, 0, 0, 54, 63}, a.Sub(b)); diff != "" {
		t.Errorf("Sub (-want +got):\n%s", diff)
	}
}

// TestParseNoAlloc checks that the Tracker's parsers allocate nothing on valid input.
func TestParseNoAlloc(t *testing.T) {
	io, err := os.ReadFile("testdata/io/shell.txt")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile("testdata/stat/paren-comm.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() {
		if _, err := parseIOBytes(io); err != nil {
			t.Fatal(err)
		}
		if _, err := parseStatBytes(st); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("parsers allocate %v times per run, want 0", n)
	}
}
