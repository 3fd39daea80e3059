package sample

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPUList(t *testing.T) {
	seq := func(lo, hi int) []int {
		var s []int
		for i := lo; i <= hi; i++ {
			s = append(s, i)
		}
		return s
	}
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{in: "0", want: []int{0}},
		{in: "7", want: []int{7}},
		{in: "0-3,8,10-11", want: []int{0, 1, 2, 3, 8, 10, 11}},
		{in: "5-5", want: []int{5}},
		{in: "8,0-1", want: []int{0, 1, 8}},
		{in: "4,0-1,1", want: []int{0, 1, 4}},
		{in: "1048576", want: []int{1 << 20}},
		{in: "0-65535", want: seq(0, 65535)},
		{in: "1048000-1048576", want: seq(1048000, 1048576)},
		{in: "3-1", wantErr: "backwards"},
		{in: "", wantErr: `bad cpu id ""`},
		{in: "\n", wantErr: `bad cpu id "\n"`},
		{in: "a", wantErr: `bad cpu id "a"`},
		{in: "1-", wantErr: `bad cpu id ""`},
		{in: "-1", wantErr: `bad cpu id ""`},
		{in: ",", wantErr: `bad cpu id ""`},
		{in: "0,", wantErr: `bad cpu id ""`},
		{in: ",0", wantErr: `bad cpu id ""`},
		{in: "1-2-3", wantErr: `bad cpu id "2-3"`},
		{in: "0x1", wantErr: "bad cpu id"},
		{in: " 1", wantErr: "bad cpu id"},
		{in: "0-1\n", wantErr: "bad cpu id"},
		{in: "1048577", wantErr: `bad cpu id "1048577"`},
		{in: "0-1048577", wantErr: `bad cpu id "1048577"`},
		{in: "99999999", wantErr: `bad cpu id "99999999"`},
		{in: "99999999999999999999", wantErr: "bad cpu id"},
		{in: "0-65536", wantErr: "more than 65536 CPUs"},
		{in: "0-1048576", wantErr: "more than 65536 CPUs"},
		{in: "0-40000,0-40000", wantErr: "more than 65536 CPUs"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCPUList(tc.in)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseCPUList(%q) = %d ids, want error containing %q", tc.in, len(got), tc.wantErr)
				}
				for _, w := range []string{tc.wantErr, fmt.Sprintf("cpu list %q", tc.in)} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("ParseCPUList(%q) error %q, want it to contain %q", tc.in, err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCPUList(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseCPUList(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestFormatCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{1, 2, 5}, "1-2,5"},
		{[]int{0, 2, 4}, "0,2,4"},
	} {
		if got := FormatCPUList(tc.in); got != tc.want {
			t.Errorf("FormatCPUList(%v) = %q, want %q", tc.in, got, tc.want)
		}
		if len(tc.in) > 0 {
			back, err := ParseCPUList(FormatCPUList(tc.in))
			if err != nil || !cmp.Equal(back, tc.in) {
				t.Errorf("ParseCPUList(FormatCPUList(%v)) = %v, %v", tc.in, back, err)
			}
		}
	}
}
