package nvml

import (
	"bufio"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRead(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []Reading
		err      string
	}{
		{"values, not measured, processes",
			"gpu 0 t=12.5 busy=1.5 util_s=2 dram=!Not_Supported mem=100 reasons=4c procs=7:10,8:0\ndone\n",
			[]Reading{{Index: 0, Time: 12.5, Values: map[string]float64{"busy": 1.5, "util_s": 2, "mem": 100, "reasons": 0x4c},
				NotMeasured: map[string]string{"dram": "Not Supported"}, Procs: []Proc{{7, 10}, {8, 0}}}}, ""},
		{"a NaN is not measured", "gpu 1 t=1 dram=nan\ndone\n",
			[]Reading{{Index: 1, Time: 1, Values: map[string]float64{}, NotMeasured: map[string]string{"dram": "NVML gave no number"}}}, ""},
		{"processes not listed", "gpu 0 t=1 procs=!more_than_64_processes\ndone\n",
			[]Reading{{Index: 0, Time: 1, Values: map[string]float64{}, NotMeasured: map[string]string{}, ProcsWhy: "more than 64 processes"}}, ""},
		{"no done", "gpu 0 t=1\n", nil, "line 2: unexpected EOF"},
		{"not a number", "gpu 0 busy=x\ndone\n", nil, `line 1: gpu 0: busy "x" is not a number`},
		{"bad process", "gpu 0 procs=0:1\ndone\n", nil, `line 1: gpu 0: process "0:1"`},
		{"unknown line", "gpus 0\ndone\n", nil, `line 1: want gpu or done, got "gpus"`},
		{"line too long", "gpu 0 " + strings.Repeat("x", maxLine) + "\ndone\n", nil, "line 1: line too long"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseRead(bufio.NewReaderSize(strings.NewReader(c.in), 64))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want …%s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestParseHello(t *testing.T) {
	for _, c := range []struct{ name, in, err string }{
		{"other protocol", "persyst-nvml 2\n", `want protocol "persyst-nvml 1"`},
		{"count differs", "persyst-nvml 1\ndevice 0 uuid=a\nready 2\n", `line 3: "ready 2" after 1 devices`},
		{"bad minor", "persyst-nvml 1\ndevice 0 minor=x\n", `line 2: device 0: minor "x"`},
		{"fail", "persyst-nvml 1\nabsent nvmlInit_v2\nfail library lib.so lacks nvmlInit\n", "no NVIDIA driver: lib.so lacks nvmlInit"},
		{"silence", "", "persyst-nvml said nothing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseHello(bufio.NewReader(strings.NewReader(c.in)))
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want …%s", err, c.err)
			}
		})
	}
}
