package hostfs

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPUBusy(t *testing.T) {
	f, err := os.Open("testdata/stat-4cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseCPUBusy(f)
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq+steal, in seconds; cpu2 is offline.
	want := []float64{6.23, 6.1, -1, 8.9}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseCPUBusy (-want +got):\n%s", diff)
	}
}

func TestParseCPUTimes(t *testing.T) {
	f, err := os.Open("testdata/stat-4cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseCPUTimes(f)
	if err != nil {
		t.Fatal(err)
	}
	// The eighth field is steal; cpu2 is offline.
	want := []CPUTimes{{6.23, 0.02}, {6.1, 0}, {-1, -1}, {8.9, 0.05}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseCPUTimes (-want +got):\n%s", diff)
	}
}

func TestParseCPUBusyErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no cpuN line"},
		{"not /proc/stat", "MemTotal: 1 kB\n", "line 1: want the cpu line"},
		{"short line", "cpu 1 2 3 4 5 6 7\ncpu0 1 2 3\n", "line 2: cpu0 has 3 fields"},
		{"bad number", "cpu 1 2 3 4 5 6 7\ncpu0 1 2 x 4 5 6 7\n", `line 2: cpu0 field 3 "x"`},
		{"huge CPU", "cpu 1 2 3 4 5 6 7\ncpu99999999 1 2 3 4 5 6 7\n", "line 2: CPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCPUBusy(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
