package cgstats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/persyst/persyst/hostfs"
)

// Options tune a Reader. The zero value is the default.
type Options struct {
	// PreferV1 takes a field that both a v1 controller and the v2 cgroup offer (hybrid
	// hosts) from v1. By default v2 wins: its cpu.stat counts in µs, v1 cpuacct.stat in
	// clock ticks.
	PreferV1 bool
}

// Reader reads job cgroup statistics below an injected filesystem root.
type Reader struct {
	fs   hostfs.FS
	opts Options
}

// NewReader returns a Reader for cgroup directories under the root.
func NewReader(fsys hostfs.FS, opts Options) *Reader {
	return &Reader{fs: fsys, opts: opts}
}

// Read reads the job's cgroups. paths maps hierarchy keys (Mount.Key: "memory",
// "cpu,cpuacct", "unified", ...) to cgroup directories, as jobcgroup.Find returns them.
// Absent controllers, files and cgroups leave fields unmeasured (see Stats.Missing); the
// error, if any, reports malformed or unreadable files, and the returned Stats still
// holds everything else. Every file is opened and closed again:
// a job read at every cycle keeps them open with Files instead.
func (r *Reader) Read(paths map[string]string) (Stats, error) {
	return r.read(paths, pathSource{root: r.fs.Root()}, nil)
}

// scratch is what a read may reuse from the last (Files): the v1 directories by
// controller and the Missing notes' array.
type scratch struct {
	v1      map[string]string
	missing []Missing
}

func (r *Reader) read(paths map[string]string, src source, sc *scratch) (Stats, error) {
	rd := &read{root: r.fs.Root(), src: src}
	var v1dirs map[string]string
	if sc != nil {
		if sc.v1 == nil {
			sc.v1 = map[string]string{}
		}
		clear(sc.v1)
		v1dirs = sc.v1
		rd.s.Missing = sc.missing[:0]
		defer func() { sc.missing = rd.s.Missing[:0] }()
	} else {
		v1dirs = map[string]string{}
	}
	for key, dir := range paths {
		if key == "unified" {
			continue
		}
		for c := range strings.SplitSeq(key, ",") {
			v1dirs[c] = dir
		}
	}
	v2dir, hasV2 := paths["unified"]
	if r.opts.PreferV1 {
		rd.v1(v1dirs)
	}
	if hasV2 {
		rd.v2(v2dir)
	}
	if !r.opts.PreferV1 {
		rd.v1(v1dirs)
	}
	rd.s.finish()
	return rd.s, errors.Join(rd.errs...)
}

// source reads the file name of a cgroup directory (as seen in the mount namespace). The
// content may be a scratch buffer, valid until the next read. path is the file's name
// for notes and errors: filepath.Join(dir, name).
type source interface {
	read(dir, name string) ([]byte, error)
	path(dir, name string) string
}

// pathSource opens every file anew, under the FS root.
type pathSource struct{ root string }

func (pathSource) path(dir, name string) string { return filepath.Join(dir, name) }

func (p pathSource) read(dir, name string) ([]byte, error) {
	return hostfs.ReadRegular(filepath.Join(p.root, dir, name))
}

type read struct {
	root string
	src  source
	s    Stats
	errs []error
}

// abs is dir under the FS root, made absolute.
func (rd *read) abs(dir string) string {
	p := filepath.Join(rd.root, dir)
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// absentErr reports whether err means "not there": the file does not exist, the cgroup was
// removed under an open file (ENODEV), or the kernel has the file but not the feature
// (EOPNOTSUPP, e.g. PSI switched off with cgroup.pressure=0 or psi=0).
func absentErr(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EOPNOTSUPP)
}

// absent records fields as unmeasured because file (in cgroup dir) could not be read with
// err, telling a vanished cgroup from an absent file.
func (rd *read) absent(dir, file string, fields Field, err error) {
	if errors.Is(err, errKnownAbsent) {
		rd.s.miss(fields, file, "file absent")
		return
	}
	if _, serr := os.Stat(rd.abs(dir)); serr != nil && errors.Is(serr, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
		rd.s.Vanished = true
		rd.s.miss(fields, dir, "cgroup removed (job ended?)")
		return
	}
	why := "file absent"
	if errors.Is(err, syscall.EOPNOTSUPP) {
		why = "not supported by the kernel"
	}
	rd.s.miss(fields, file, why)
}

// bad records a malformed or unreadable file.
func (rd *read) bad(file string, fields Field, err error) {
	rd.errs = append(rd.errs, fmt.Errorf("cgstats: %s: %w", file, err))
	rd.s.miss(fields, file, "unreadable: "+err.Error())
}

// file reads dir/name. ok is false (and fields recorded as missing) when it cannot. A file
// whose fields were all measured already (from the other cgroup version on a hybrid
// host) is not read: ok is false and nothing is recorded.
func (rd *read) file(dir, name string, fields Field) (b []byte, ok bool) {
	if rd.s.Has(fields) {
		return nil, false
	}
	b, err := rd.src.read(dir, name)
	if err != nil {
		file := rd.src.path(dir, name)
		if absentErr(err) {
			rd.absent(dir, file, fields, err)
		} else {
			rd.bad(file, fields, err)
		}
		return nil, false
	}
	return b, true
}

func (rd *read) single(dir, name string, f Field, dst *uint64) {
	b, ok := rd.file(dir, name, f)
	if !ok {
		return
	}
	v, num, err := parseSingle(b)
	switch {
	case err != nil:
		rd.bad(rd.src.path(dir, name), f, err)
	case !num:
		rd.s.miss(f, rd.src.path(dir, name), "no number (\"max\")")
	default:
		rd.s.setU(f, dst, v)
	}
}

// flat reads a flat keyed file for keys.
func (rd *read) flat(dir, name string, fields Field, keys ...string) (flatVals, bool) {
	b, ok := rd.file(dir, name, fields)
	if !ok {
		return flatVals{}, false
	}
	m, err := parseFlatKeyed(b, keys...)
	if err != nil {
		rd.bad(rd.src.path(dir, name), fields, err)
		return flatVals{}, false
	}
	return m, true
}

// key sets f from key k of m when present; else records why (the file dir/name is there,
// the key not).
func (rd *read) key(m *flatVals, k string, f Field, dst *uint64, scale uint64, dir, name, why string) {
	if v, ok := m.get(k); ok {
		rd.s.setU(f, dst, v*scale)
		return
	}
	rd.s.miss(f, rd.src.path(dir, name), why)
}

func (rd *read) pressure(dir, name string, some, full Field, dSome, dFull *Pressure) {
	b, ok := rd.file(dir, name, some|full)
	if !ok {
		return
	}
	p, err := parsePSI(b)
	if err != nil {
		rd.bad(rd.src.path(dir, name), some|full, err)
		return
	}
	if p.hasSome {
		rd.s.setP(some, dSome, p.some)
	} else {
		rd.s.miss(some, rd.src.path(dir, name), "no \"some\" line")
	}
	if p.hasFull {
		rd.s.setP(full, dFull, p.full)
	} else {
		rd.s.miss(full, rd.src.path(dir, name), "no \"full\" line (kernel before 5.13 for cpu)")
	}
}

// v2 reads a cgroup v2 directory with the package's own parsers (see the package doc).
func (rd *read) v2(dir string) {
	s := &rd.s
	const cpuStat = CPUUser | CPUSystem | CPUPeriods | CPUThrottled | CPUThrottledTime
	if m, ok := rd.flat(dir, "cpu.stat", cpuStat, "user_usec", "system_usec", "nr_periods", "nr_throttled", "throttled_usec"); ok {
		rd.key(&m, "user_usec", CPUUser, &s.CPUUserNs, 1000, dir, "cpu.stat", "no user_usec")
		rd.key(&m, "system_usec", CPUSystem, &s.CPUSystemNs, 1000, dir, "cpu.stat", "no system_usec")
		const noCPU = "no throttling keys (cpu controller not enabled for this cgroup)"
		rd.key(&m, "nr_periods", CPUPeriods, &s.NrPeriods, 1, dir, "cpu.stat", noCPU)
		rd.key(&m, "nr_throttled", CPUThrottled, &s.NrThrottled, 1, dir, "cpu.stat", noCPU)
		rd.key(&m, "throttled_usec", CPUThrottledTime, &s.ThrottledNs, 1000, dir, "cpu.stat", noCPU)
	}
	rd.single(dir, "memory.current", MemCurrent, &s.MemCurrent)
	rd.single(dir, "memory.peak", MemPeak, &s.MemPeak)
	if m, ok := rd.flat(dir, "memory.events", MemOOM|MemOOMKill, "oom", "oom_kill"); ok {
		rd.key(&m, "oom", MemOOM, &s.OOM, 1, dir, "memory.events", "no oom key")
		rd.key(&m, "oom_kill", MemOOMKill, &s.OOMKill, 1, dir, "memory.events", "no oom_kill key")
	}
	if m, ok := rd.flat(dir, "memory.stat", PgFault|PgMajFault|MemAnon, "pgfault", "pgmajfault", "anon"); ok {
		rd.key(&m, "pgfault", PgFault, &s.PgFault, 1, dir, "memory.stat", "no pgfault key")
		rd.key(&m, "pgmajfault", PgMajFault, &s.PgMajFault, 1, dir, "memory.stat", "no pgmajfault key")
		rd.key(&m, "anon", MemAnon, &s.MemAnon, 1, dir, "memory.stat", "no anon key")
	}
	rd.single(dir, "pids.current", PidsCurrent, &s.Pids)
	const io = IOReadBytes | IOWriteBytes | IOReadOps | IOWriteOps
	if b, ok := rd.file(dir, "io.stat", io); ok {
		t, err := parseIOStat(bytes.NewReader(b))
		if err != nil {
			rd.bad(filepath.Join(dir, "io.stat"), io, err)
		} else {
			s.setU(IOReadBytes, &s.IOReadBytes, t.rbytes)
			s.setU(IOWriteBytes, &s.IOWriteBytes, t.wbytes)
			s.setU(IOReadOps, &s.IOReadOps, t.rios)
			s.setU(IOWriteOps, &s.IOWriteOps, t.wios)
		}
	}
	rd.pressure(dir, "cpu.pressure", PSICPUSome, PSICPUFull, &s.CPUSome, &s.CPUFull)
	rd.pressure(dir, "memory.pressure", PSIMemSome, PSIMemFull, &s.MemSome, &s.MemFull)
	rd.pressure(dir, "io.pressure", PSIIOSome, PSIIOFull, &s.IOSome, &s.IOFull)
}

// userHZ is the unit of cpuacct.stat: clock ticks of USER_HZ, which is 100 on every
// Linux architecture (the kernel converts with jiffies_64_to_clock_t).
const userHZ = 100

// v1 reads cgroup v1 controller directories (controller name → dir), with the
// hierarchical counters (Slurm's tasks live in step_* children of the job's cgroup).
func (rd *read) v1(dirs map[string]string) {
	s := &rd.s
	if dir, ok := dirs["cpuacct"]; ok {
		if m, ok := rd.flat(dir, "cpuacct.stat", CPUUser|CPUSystem, "user", "system"); ok {
			rd.key(&m, "user", CPUUser, &s.CPUUserNs, 1e9/userHZ, dir, "cpuacct.stat", "no user key")
			rd.key(&m, "system", CPUSystem, &s.CPUSystemNs, 1e9/userHZ, dir, "cpuacct.stat", "no system key")
		}
	}
	if dir, ok := dirs["cpu"]; ok {
		if m, ok := rd.flat(dir, "cpu.stat", CPUPeriods|CPUThrottled|CPUThrottledTime, "nr_periods", "nr_throttled", "throttled_time"); ok {
			rd.key(&m, "nr_periods", CPUPeriods, &s.NrPeriods, 1, dir, "cpu.stat", "no nr_periods key")
			rd.key(&m, "nr_throttled", CPUThrottled, &s.NrThrottled, 1, dir, "cpu.stat", "no nr_throttled key")
			rd.key(&m, "throttled_time", CPUThrottledTime, &s.ThrottledNs, 1, dir, "cpu.stat", "no throttled_time key")
		}
	}
	if dir, ok := dirs["memory"]; ok {
		rd.single(dir, "memory.usage_in_bytes", MemCurrent, &s.MemCurrent)
		rd.single(dir, "memory.max_usage_in_bytes", MemPeak, &s.MemPeak)
		if m, ok := rd.flat(dir, "memory.stat", PgFault|PgMajFault|MemAnon, "total_rss", "total_pgfault", "total_pgmajfault"); ok {
			// total_* are hierarchical.
			rd.key(&m, "total_rss", MemAnon, &s.MemAnon, 1, dir, "memory.stat", "no total_rss key")
			rd.key(&m, "total_pgfault", PgFault, &s.PgFault, 1, dir, "memory.stat", "no total_pgfault key")
			rd.key(&m, "total_pgmajfault", PgMajFault, &s.PgMajFault, 1, dir, "memory.stat", "no total_pgmajfault key")
		}
		if oc, ok := rd.flat(dir, "memory.oom_control", MemOOMKill, "oom_kill"); ok {
			rd.key(&oc, "oom_kill", MemOOMKill, &s.OOMKill, 1, dir, "memory.oom_control", "no oom_kill key (kernel before 4.13)")
		}
		s.miss(MemOOM, "", "cgroup v1 counts OOM kills only (no oom event counter)")
		rd.pressure(dir, "memory.pressure", PSIMemSome, PSIMemFull, &s.MemSome, &s.MemFull)
	}
	if dir, ok := dirs["pids"]; ok {
		rd.single(dir, "pids.current", PidsCurrent, &s.Pids)
	}
	if dir, ok := dirs["blkio"]; ok {
		rd.blkio(dir, "io_service_bytes", IOReadBytes, IOWriteBytes, &s.IOReadBytes, &s.IOWriteBytes)
		rd.blkio(dir, "io_serviced", IOReadOps, IOWriteOps, &s.IOReadOps, &s.IOWriteOps)
		rd.pressure(dir, "io.pressure", PSIIOSome, PSIIOFull, &s.IOSome, &s.IOFull)
	}
	if dir, ok := dirs["cpuacct"]; ok {
		rd.pressure(dir, "cpu.pressure", PSICPUSome, PSICPUFull, &s.CPUSome, &s.CPUFull)
	} else if dir, ok := dirs["cpu"]; ok {
		rd.pressure(dir, "cpu.pressure", PSICPUSome, PSICPUFull, &s.CPUSome, &s.CPUFull)
	}
}

// blkio reads blkio.throttle.<what>_recursive (hierarchical; falls back to the
// non-recursive file on kernels without it).
func (rd *read) blkio(dir, what string, fr, fw Field, dr, dw *uint64) {
	name := "blkio.throttle." + what + "_recursive"
	b, err := rd.src.read(dir, name)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		if errors.Is(err, errKnownAbsent) {
			name = "blkio.throttle." + what
		} else if _, serr := os.Stat(rd.abs(dir)); serr == nil {
			name = "blkio.throttle." + what
		}
	}
	if err != nil {
		var ok bool
		if b, ok = rd.file(dir, name, fr|fw); !ok {
			return
		}
	}
	file := filepath.Join(dir, name)
	r, w, ok, perr := parseBlkio(bytes.NewReader(b))
	switch {
	case perr != nil:
		rd.bad(file, fr|fw, perr)
	case !ok:
		rd.s.miss(fr|fw, file, "file empty (kernel does not account I/O here)")
	default:
		rd.s.setU(fr, dr, r)
		rd.s.setU(fw, dw, w)
	}
}
