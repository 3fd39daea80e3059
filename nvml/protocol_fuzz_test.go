package nvml

import (
	"bufio"
	"math"
	"strings"
	"testing"
)

// FuzzParse feeds the protocol's reader what a broken helper could write: it must
// return an error or readings whose indices, values and processes make sense.
func FuzzParse(f *testing.F) {
	f.Add("persyst-nvml 1\ndriver 580\ndevice 0 uuid=GPU-1 bus=00000000:3B:00.0 minor=0 memory=1024 gpm=1\nready 1\n",
		"gpu 0 t=1.5 busy=2 util_s=5 sm=!Not_Supported procs=12:1024,13:0 reasons=4\ndone\n")
	f.Add("persyst-nvml 1\nfail library libnvidia-ml.so.1_not_found\n", "gpu 0 mem=NaN procs=!Insufficient\ndone\n")
	f.Fuzz(func(t *testing.T, hello, read string) {
		if h, err := parseHello(bufio.NewReader(strings.NewReader(hello))); err == nil {
			for _, d := range h.Devices {
				if d.Index < 0 || d.Minor < -1 || d.Parent < -1 {
					t.Errorf("accepted device %+v from %q", d, hello)
				}
			}
		}
		rs, err := parseRead(bufio.NewReader(strings.NewReader(read)))
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.Index < 0 {
				t.Errorf("accepted index %d from %q", r.Index, read)
			}
			for k, v := range r.Values {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("accepted %s=%v from %q", k, v, read)
				}
			}
			for _, p := range r.Procs {
				if p.PID <= 0 {
					t.Errorf("accepted process %+v from %q", p, read)
				}
			}
		}
	})
}
