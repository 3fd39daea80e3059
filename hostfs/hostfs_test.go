package hostfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/sample"
)

func TestPath(t *testing.T) {
	for _, tc := range []struct {
		root string
		elem []string
		want string
	}{
		{"", []string{"proc/self/cgroup"}, "/proc/self/cgroup"},
		{"/", []string{"proc", "meminfo"}, "/proc/meminfo"},
		{"/tmp/x/", []string{"/sys/fs/cgroup/memory", "job_1"}, "/tmp/x/sys/fs/cgroup/memory/job_1"},
		{"rel", []string{"sys"}, "rel/sys"},
	} {
		f := New(tc.root)
		if got := f.Path(tc.elem...); got != tc.want {
			t.Errorf("New(%q).Path(%q) = %q, want %q", tc.root, tc.elem, got, tc.want)
		}
		if got := f.Rel(f.Path(tc.elem...)); got != filepath.Join(append([]string{"/"}, tc.elem...)...) && tc.root != "rel" {
			t.Errorf("New(%q).Rel(Path(%q)) = %q", tc.root, tc.elem, got)
		}
	}
	if _, err := New(t.TempDir()).ReadFile("no/such/file"); err == nil || !strings.Contains(err.Error(), "no/such/file") {
		t.Errorf("ReadFile of a missing file: error %v, want it to name the path", err)
	}
}

func TestParseCPUInfo(t *testing.T) {
	for _, tc := range []struct {
		file      string
		want      CPUInfo
		flagsHave string // a flag the first processor has ("" : no flags line)
	}{
		{"cpuinfo-intel-spr", CPUInfo{Vendor: "GenuineIntel", Family: 6, Model: 143, Name: "Intel(R) Xeon(R) Platinum 8480+"}, "avx512f"},
		{"cpuinfo-amd-epyc-vm", CPUInfo{Vendor: "AuthenticAMD", Family: 25, Model: 1, Name: "AMD EPYC"}, "avx2"},
		{"cpuinfo-intel-skx", CPUInfo{Vendor: "GenuineIntel", Family: 6, Model: 85, Name: "Intel(R) Xeon(R) Platinum 8174 CPU @ 3.10GHz"}, "avx512f"},
		{"cpuinfo-core2", CPUInfo{Vendor: "GenuineIntel", Name: "Intel(R) Core(TM)2 Duo CPU     E8400  @ 3.00GHz"}, "sse2"},
		{"cpuinfo-arm", CPUInfo{}, "asimd"},
		{"cpuinfo-noflags", CPUInfo{Vendor: "Unknown"}, ""},
	} {
		f, err := os.Open(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseCPUInfo(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		flags := got.Flags
		got.Flags = ""
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.file, diff)
		}
		if strings.Contains(flags, "must not be read") {
			t.Errorf("%s: read the second processor's flags", tc.file)
		}
		if has := strings.Contains(" "+flags+" ", " "+tc.flagsHave+" "); tc.flagsHave != "" && !has || tc.flagsHave == "" && flags != "" {
			t.Errorf("%s: flags %q, want %q among them", tc.file, flags, tc.flagsHave)
		}
	}
	if _, err := ParseCPUInfo(strings.NewReader("vendor_id : GenuineIntel\ncpu family : six\n")); err == nil || !strings.Contains(err.Error(), "line 2: cpu family") {
		t.Errorf("bad family: error %v, want it to name line 2", err)
	}
}

func TestParseMemInfo(t *testing.T) {
	for _, tc := range []struct {
		file string
		want MemInfo
		err  bool
	}{
		{"meminfo-vm", MemInfo{Total: 24684096 << 10, Available: 24104500 << 10}, false},
		{"meminfo-old", MemInfo{Total: 2048000 << 10}, false}, // before Linux 3.14: no MemAvailable
		{"meminfo-nototal", MemInfo{}, true},
	} {
		f, err := os.Open(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseMemInfo(f)
		f.Close()
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v, error %v", tc.file, got, err, tc.want, tc.err)
		}
	}
	if _, err := ParseMemInfo(strings.NewReader("MemTotal: lots kB\n")); err == nil || !strings.Contains(err.Error(), "MemTotal") {
		t.Errorf("bad MemTotal: error %v, want it to name the field", err)
	}
}

func TestTopologyAndPackages(t *testing.T) {
	files := map[string]string{}
	for cpu, ids := range map[int][2]string{0: {"0", "0"}, 1: {"1", "0"}, 2: {"0", "0"}, 3: {"0", "1"}} {
		d := "sys/devices/system/cpu/cpu" + strconv.Itoa(cpu) + "/topology/"
		files[d+"core_id"] = ids[0] + "\n"
		files[d+"physical_package_id"] = ids[1] + "\n"
	}
	f := New(testenv.Files(t, files))
	topo := f.Topology([]int{0, 1, 2, 3, 9})
	want := []sample.CPUTopo{{CPU: 0}, {CPU: 1, Core: 1}, {CPU: 2}, {CPU: 3, Socket: 1}, {CPU: 9, Core: 9}}
	if diff := cmp.Diff(want, topo); diff != "" {
		t.Errorf("topology (-want +got):\n%s", diff)
	}
	if got := f.PackageCPUs([]int{3, 1, 2, 0}); !cmp.Equal(got, []int{0, 3}) {
		t.Errorf("PackageCPUs = %v, want [0 3]", got)
	}
}

func TestCPUs(t *testing.T) {
	f := New(testenv.Files(t, map[string]string{
		"sys/devices/system/cpu/online":     "0-3\n",
		"cg/a/cpuset.effective_cpus":        "\n",
		"cg/a/cpuset.cpus":                  "1,3\n",
		"cg/b/cpuset.cpus.effective":        "2\n",
		"cg/bad/cpuset.cpus":                "2-1\n",
		"sys/devices/system/cpu/cpu0/dummy": "",
	}))
	if got, err := f.OnlineCPUs(); err != nil || !cmp.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("OnlineCPUs = %v, %v", got, err)
	}
	for _, tc := range []struct {
		dir  string
		want []int
		ok   bool
		err  string
	}{
		{"cg/a", []int{1, 3}, true, ""},
		{"/cg/b", []int{2}, true, ""},
		{"cg/none", nil, false, ""},
		{"cg/bad", nil, false, "cg/bad/cpuset.cpus"},
	} {
		got, ok, err := f.CgroupCPUs(tc.dir)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("CgroupCPUs(%s): error %v, want it to name %s", tc.dir, err, tc.err)
			}
			continue
		}
		if err != nil || ok != tc.ok || !cmp.Equal(got, tc.want) {
			t.Errorf("CgroupCPUs(%s) = %v, %v, %v; want %v, %v", tc.dir, got, ok, err, tc.want, tc.ok)
		}
	}
	if _, err := New(t.TempDir()).OnlineCPUs(); err == nil {
		t.Error("OnlineCPUs without sysfs: no error")
	}
}
