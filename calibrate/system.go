package calibrate

import (
	"fmt"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"
)

// What the node says about itself: pure parsers over readers and an fs.FS (the root of
// /proc and /sys), so that they can be tested on fixtures.

// ParseCacheSize parses a sysfs cache size ("32K", "32768K", "1M", "512").
func ParseCacheSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad cache size %q", s)
	}
	return n * mult, nil
}

// VectorLanes is the number of double-precision values in the widest vector register the
// flags announce, and the extension: avx512f 8, avx2 or avx 4, sse2 or asimd (arm64 NEON)
// 2, otherwise 1 (scalar).
func VectorLanes(flags string) (lanes int, ext string) {
	has := map[string]bool{}
	for _, f := range strings.Fields(flags) {
		has[f] = true
	}
	for _, c := range []struct {
		flag  string
		lanes int
	}{{"avx512f", 8}, {"avx2", 4}, {"avx", 4}, {"sse2", 2}, {"asimd", 2}} {
		if has[c.flag] {
			return c.lanes, c.flag
		}
	}
	return 1, "scalar"
}

// STREAM sizing (McCalpin's rule, as in Mundra's thesis on dynamic thresholds, §4.1): each
// array at least 4 × the last-level caches used in the run and at least 1 million elements.
const (
	minTotalBytes = 64 << 20  // the three arrays together, all threads
	minArrayBytes = 8 << 20   // 1 M float64
	minElements   = 4096      // per thread and array, when memory is short
	elemAlign     = 64        // elements per thread rounded up to whole 512 B
	maxArrayBytes = 256 << 30 // no node needs more
)

// ArrayBytes is the size of each of the three STREAM arrays, summed over the threads:
// max(4 × llc, 1 M elements, a third of 64 MiB), then the three together capped at 1/8 of
// MemTotal and half of MemAvailable (a value ≤ 0 is unknown and caps nothing).
func ArrayBytes(llc, memTotal, memAvailable int64) int64 {
	b := max(4*llc, minArrayBytes, (minTotalBytes+2)/3)
	limit := int64(math.MaxInt64)
	if memTotal > 0 {
		limit = min(limit, memTotal/8)
	}
	if memAvailable > 0 {
		limit = min(limit, memAvailable/2)
	}
	if 3*b > limit {
		b = limit / 3
	}
	return min(b, maxArrayBytes)
}

// ElementsPerThread splits an array of arrayBytes over threads: float64 elements per
// thread, rounded up to a multiple of 64 and at least 4096.
func ElementsPerThread(arrayBytes int64, threads int) int {
	if threads < 1 {
		threads = 1
	}
	n := (arrayBytes/8 + int64(threads) - 1) / int64(threads)
	n = (n + elemAlign - 1) / elemAlign * elemAlign
	return int(max(n, minElements))
}

// cacheDir is the sysfs directory of a CPU's caches in fsys (the root of the file system).
func cacheDir(cpu int) string {
	return fmt.Sprintf("sys/devices/system/cpu/cpu%d/cache", cpu)
}

func readTrim(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	return strings.TrimSpace(string(b)), err
}

// LLCBytes sums the last-level caches that serve cpus, each cache once, from
// sys/devices/system/cpu/cpuN/cache/indexM/{level,type,size,id,shared_cpu_list} in fsys.
// The last level is the highest data or unified level any of the CPUs has. It returns 0
// and no error when no CPU describes its caches (some VMs and arm64 systems).
func LLCBytes(fsys fs.FS, cpus []int) (int64, error) {
	type cache struct {
		level int
		key   string
		size  int64
	}
	var all []cache
	for _, c := range cpus {
		dir := cacheDir(c)
		ents, err := fs.ReadDir(fsys, dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "index") {
				continue
			}
			d := path.Join(dir, e.Name())
			if t, _ := readTrim(fsys, path.Join(d, "type")); t == "Instruction" {
				continue
			}
			ls, err := readTrim(fsys, path.Join(d, "level"))
			if err != nil {
				continue
			}
			level, err := strconv.Atoi(ls)
			if err != nil {
				return 0, fmt.Errorf("%s/level: %q", d, ls)
			}
			ss, err := readTrim(fsys, path.Join(d, "size"))
			if err != nil {
				continue
			}
			size, err := ParseCacheSize(ss)
			if err != nil {
				return 0, fmt.Errorf("%s/size: %w", d, err)
			}
			// A cache is one per (level, id); without an id, per set of CPUs sharing it;
			// without either, private to this CPU.
			key := ""
			if id, err := readTrim(fsys, path.Join(d, "id")); err == nil && id != "" {
				key = "id " + id
			} else if sh, err := readTrim(fsys, path.Join(d, "shared_cpu_list")); err == nil && sh != "" {
				key = "cpus " + sh
			} else {
				key = "cpu " + strconv.Itoa(c)
			}
			all = append(all, cache{level, key, size})
		}
	}
	top := 0
	for _, c := range all {
		top = max(top, c.level)
	}
	seen := map[string]bool{}
	var sum int64
	for _, c := range all {
		if c.level == top && !seen[c.key] {
			seen[c.key] = true
			sum += c.size
		}
	}
	return sum, nil
}

// PhysicalCores counts the distinct cores (physical_package_id, core_id of
// sys/devices/system/cpu/cpuN/topology) of cpus: hyperthreads of one core count once, as
// in the core domain of the properties. A CPU without topology counts as its own core.
func PhysicalCores(fsys fs.FS, cpus []int) int {
	seen := map[string]bool{}
	for _, c := range cpus {
		dir := fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology", c)
		pkg, err1 := readTrim(fsys, dir+"/physical_package_id")
		core, err2 := readTrim(fsys, dir+"/core_id")
		key := pkg + "/" + core
		if err1 != nil || err2 != nil {
			key = "cpu " + strconv.Itoa(c)
		}
		seen[key] = true
	}
	return len(seen)
}
