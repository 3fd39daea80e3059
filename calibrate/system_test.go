package calibrate

import (
	"os"
	"strings"
	"testing"

	"github.com/persyst/persyst/sample"
)

func TestParseCacheSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"32K\n", 32 << 10, false},
		{"32768K", 32 << 20, false},
		{"1M", 1 << 20, false},
		{"2G", 2 << 30, false},
		{"512", 512, false},
		{"", 0, true},
		{"12Q", 0, true},
		{"-1K", 0, true},
	} {
		got, err := ParseCacheSize(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseCacheSize(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestVectorLanes(t *testing.T) {
	for _, c := range []struct {
		flags string
		lanes int
	}{
		{"sse sse2 avx avx2 fma avx512f avx512dq", 8},
		{"avx512dq avx2", 4}, // avx512f is what decides 512 bits
		{"avx2", 4},
		{"sse2 avx", 4},
		{"sse sse2", 2},
		{"fp asimd", 2},
		{"fp", 1},
		{"", 1},
		{"avx2x avx512fx sse2x", 1}, // whole words only
	} {
		if got, _ := VectorLanes(c.flags); got != c.lanes {
			t.Errorf("VectorLanes(%q) = %d, want %d", c.flags, got, c.lanes)
		}
	}
}

func TestLLCAndCores(t *testing.T) {
	for _, c := range []struct {
		root  string
		cpus  []int
		llc   int64
		cores int
	}{
		{"vm", []int{0, 1}, 32 << 20, 2},                        // this VM: one 32 MiB L3 shared by both CPUs
		{"vm", []int{1}, 32 << 20, 1},                           //
		{"2s-smt", []int{0, 1, 2, 3, 4, 5, 6, 7}, 120 << 20, 4}, // one L3 per socket, 2 threads per core
		{"2s-smt", []int{0, 4}, 60 << 20, 1},                    // a core's two threads
		{"2s-smt", []int{0, 2}, 120 << 20, 2},                   // a core in each socket
		{"noid", []int{0, 1, 2, 3}, 8 << 20, 4},                 // no cache ids: shared_cpu_list; no topology: a core per CPU
		{"nocache", []int{0}, 0, 1},
		{"nosuchdir", []int{0, 1}, 0, 2},
	} {
		fsys := os.DirFS("testdata/" + c.root)
		llc, err := LLCBytes(fsys, c.cpus)
		if err != nil || llc != c.llc {
			t.Errorf("%s %v: LLCBytes = %d, %v; want %d", c.root, c.cpus, llc, err, c.llc)
		}
		if got := PhysicalCores(fsys, c.cpus); got != c.cores {
			t.Errorf("%s %v: PhysicalCores = %d, want %d", c.root, c.cpus, got, c.cores)
		}
	}
	online, err := os.ReadFile("testdata/2s-smt/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	if cpus, err := sample.ParseCPUList(strings.TrimSpace(string(online))); err != nil || len(cpus) != 8 {
		t.Errorf("2s-smt online: %v, %v", cpus, err)
	}
}

func TestArraySizing(t *testing.T) {
	const (
		KiB = 1 << 10
		MiB = 1 << 20
		GiB = 1 << 30
	)
	for _, c := range []struct {
		name              string
		llc, total, avail int64
		threads           int
		arrayBytes        int64
		elemsPerThread    int
	}{
		// this VM: 32 MiB of L3, 23.5 GiB: 4 × L3 per array, 2 threads
		{"vm", 32 * MiB, 24684096 * KiB, 24104500 * KiB, 2, 128 * MiB, 128 * MiB / 8 / 2},
		// small caches: at least 64 MiB in all, a third per array (rounded up to 64 elements per thread)
		{"small LLC", 2 * MiB, 64 * GiB, 0, 4, (64*MiB + 2) / 3, 699072},
		// no cache information
		{"unknown LLC", 0, 0, 0, 1, (64*MiB + 2) / 3, 2796224},
		// two sockets of 2 × 32 MiB L3 (Sapphire Rapids): STREAM's 4 × all last-level caches
		{"2 sockets", 2 * 60 * MiB, 512 * GiB, 500 * GiB, 112, 480 * MiB, 561792},
		// little memory: the three arrays at most 1/8 of MemTotal
		{"1/8 MemTotal", 32 * MiB, 768 * MiB, 700 * MiB, 2, 32 * MiB, 2 * MiB},
		// and at most half of what is available
		{"MemAvailable", 32 * MiB, 24 * GiB, 192 * MiB, 2, 32 * MiB, 2 * MiB},
		// next to nothing: the floor per thread
		{"floor", 32 * MiB, 1 * MiB, 0, 2, 128 * KiB / 3, 4096},
	} {
		got := ArrayBytes(c.llc, c.total, c.avail)
		if got != c.arrayBytes {
			t.Errorf("%s: ArrayBytes = %d, want %d", c.name, got, c.arrayBytes)
		}
		n := ElementsPerThread(got, c.threads)
		if n != c.elemsPerThread {
			t.Errorf("%s: ElementsPerThread(%d, %d) = %d, want %d", c.name, got, c.threads, n, c.elemsPerThread)
		}
		if n%64 != 0 || int64(n)*8*int64(c.threads) < got {
			t.Errorf("%s: %d elements per thread do not cover %d bytes in whole 512 B", c.name, n, got)
		}
		if c.total > 0 && 3*got > c.total/8 && got > minArrayBytes {
			t.Errorf("%s: 3 × %d bytes over 1/8 of MemTotal %d", c.name, got, c.total)
		}
	}
}
