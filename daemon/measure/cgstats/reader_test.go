package cgstats

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/daemon/jobcgroup"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
)

const (
	v1Job = "slurm/uid_1000/job_42"
	v2Dir = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"
)

func v1Dir(ctrl string) string { return filepath.Join("/sys/fs/cgroup", ctrl, v1Job) }

// copyTree copies testdata/<name> into a temporary FS root.
func copyTree(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", name)
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// unset clears fields f of s as if they had not been measured.
func unset(s Stats, f Field) Stats {
	ptrs := map[Field]*uint64{
		CPUUser: &s.CPUUserNs, CPUSystem: &s.CPUSystemNs, CPUPeriods: &s.NrPeriods,
		CPUThrottled: &s.NrThrottled, CPUThrottledTime: &s.ThrottledNs,
		MemCurrent: &s.MemCurrent, MemPeak: &s.MemPeak, MemOOM: &s.OOM, MemOOMKill: &s.OOMKill,
		PgFault: &s.PgFault, PgMajFault: &s.PgMajFault, PidsCurrent: &s.Pids,
		IOReadBytes: &s.IOReadBytes, IOWriteBytes: &s.IOWriteBytes, IOReadOps: &s.IOReadOps, IOWriteOps: &s.IOWriteOps,
		MemAnon: &s.MemAnon,
	}
	pp := map[Field]*Pressure{
		PSICPUSome: &s.CPUSome, PSICPUFull: &s.CPUFull, PSIMemSome: &s.MemSome,
		PSIMemFull: &s.MemFull, PSIIOSome: &s.IOSome, PSIIOFull: &s.IOFull,
	}
	for b := Field(1); b < fieldEnd; b <<= 1 {
		if f&b == 0 {
			continue
		}
		if p, ok := ptrs[b]; ok {
			*p = 0
		} else {
			*pp[b] = Pressure{}
		}
	}
	s.Measured &^= f
	return s
}

const (
	cpuAll  = CPUUser | CPUSystem | CPUPeriods | CPUThrottled | CPUThrottledTime
	ioAll   = IOReadBytes | IOWriteBytes | IOReadOps | IOWriteOps
	psiAll  = PSICPUSome | PSICPUFull | PSIMemSome | PSIMemFull | PSIIOSome | PSIIOFull
	memLib1 = MemCurrent | MemPeak | PgFault | PgMajFault | MemAnon
)

// The fixtures hold the same job in both layouts, so most values agree.
func fixtureValues() Stats {
	return Stats{
		CPUUserNs: 1_500_000_000, CPUSystemNs: 250_000_000,
		NrPeriods: 120, NrThrottled: 7, ThrottledNs: 350_000_000,
		MemCurrent: 71303168, MemPeak: 73400320, MemAnon: 67108864, OOM: 2, OOMKill: 1,
		PgFault: 16850, PgMajFault: 3, Pids: 1,
		IOReadBytes: 4096000 + 8192, IOWriteBytes: 1048576, IOReadOps: 1002, IOWriteOps: 16,
		CPUSome: Pressure{2.45, 570929}, CPUFull: Pressure{0, 0},
		MemSome: Pressure{0.50, 1200}, MemFull: Pressure{0.25, 800},
		IOSome: Pressure{0.02, 63736}, IOFull: Pressure{0.01, 51348},
	}
}

func v1Want() Stats {
	s := fixtureValues()
	s.Measured = AllFields
	s = unset(s, MemOOM|psiAll)
	s.Missing = []Missing{
		{MemOOM, "", "cgroup v1 counts OOM kills only (no oom event counter)"},
		{PSIMemSome | PSIMemFull, v1Dir("memory") + "/memory.pressure", "file absent"},
		{PSIIOSome | PSIIOFull, v1Dir("blkio") + "/io.pressure", "file absent"},
		{PSICPUSome | PSICPUFull, v1Dir("cpuacct") + "/cpu.pressure", "file absent"},
	}
	return s
}

func v2Want() Stats {
	s := fixtureValues()
	s.Measured = AllFields
	return s
}

func TestReadFixtures(t *testing.T) {
	tests := []struct {
		name   string
		tree   string
		mutate func(t *testing.T, root string, paths map[string]string)
		want   func() Stats
		err    string
	}{
		{name: "v1 all controllers", tree: "v1", want: v1Want},
		{
			name: "v1 blkio files empty (kernel does not account)", tree: "v1",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				for _, f := range []string{"io_service_bytes_recursive", "io_serviced_recursive"} {
					testenv.Write(t, filepath.Join(root, v1Dir("blkio")+"/blkio.throttle."+f), "")
				}
			},
			want: func() Stats {
				s := unset(v1Want(), ioAll)
				s.Missing = append([]Missing{
					{IOReadBytes | IOWriteBytes, v1Dir("blkio") + "/blkio.throttle.io_service_bytes_recursive", "file empty (kernel does not account I/O here)"},
					{IOReadOps | IOWriteOps, v1Dir("blkio") + "/blkio.throttle.io_serviced_recursive", "file empty (kernel does not account I/O here)"},
				}, s.Missing...)
				// The blkio notes come after the memory ones in read order.
				s.Missing[0], s.Missing[1], s.Missing[2], s.Missing[3] = s.Missing[2], s.Missing[3], s.Missing[0], s.Missing[1]
				return s
			},
		},
		{
			name: "v1 non-recursive blkio files only (old kernel)", tree: "v1",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				for _, f := range []string{"io_service_bytes", "io_serviced"} {
					p := filepath.Join(root, v1Dir("blkio"), "blkio.throttle."+f)
					if err := os.Rename(p+"_recursive", p); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: v1Want,
		},
		{
			name: "v1 memory cgroup vanished after Find", tree: "v1",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				if err := os.RemoveAll(filepath.Join(root, v1Dir("memory"))); err != nil {
					t.Fatal(err)
				}
			},
			want: func() Stats {
				s := unset(v1Want(), memLib1|MemOOMKill)
				s.Vanished = true
				s.Missing = []Missing{
					{memLib1 | MemOOMKill | PSIMemSome | PSIMemFull, v1Dir("memory"), "cgroup removed (job ended?)"},
					{MemOOM, "", "cgroup v1 counts OOM kills only (no oom event counter)"},
					{PSIIOSome | PSIIOFull, v1Dir("blkio") + "/io.pressure", "file absent"},
					{PSICPUSome | PSICPUFull, v1Dir("cpuacct") + "/cpu.pressure", "file absent"},
				}
				return s
			},
		},
		{
			name: "v1 no pids hierarchy", tree: "v1",
			mutate: func(t *testing.T, _ string, paths map[string]string) { delete(paths, "pids") },
			want: func() Stats {
				s := unset(v1Want(), PidsCurrent)
				s.Missing = append(s.Missing, Missing{PidsCurrent, "", "no cgroup hierarchy of the job provides it"})
				return s
			},
		},
		{
			name: "v1 joint cpu,cpuacct hierarchy", tree: "v1",
			mutate: func(t *testing.T, _ string, paths map[string]string) {
				// Both controllers' files in the cpuacct dir, as on a joint mount.
				delete(paths, "cpu")
				delete(paths, "cpuacct")
				paths["cpu,cpuacct"] = v1Dir("cpuacct")
			},
			want: func() Stats {
				s := unset(v1Want(), CPUPeriods|CPUThrottled|CPUThrottledTime)
				s.Missing = append([]Missing{{CPUPeriods | CPUThrottled | CPUThrottledTime, v1Dir("cpuacct") + "/cpu.stat", "file absent"}}, s.Missing...)
				return s
			},
		},
		{
			name: "v1 malformed cpu.stat", tree: "v1",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				testenv.Write(t, filepath.Join(root, v1Dir("cpu")+"/cpu.stat"), "nr_periods 1\nnr_throttled x\n")
			},
			want: func() Stats {
				s := unset(v1Want(), CPUPeriods|CPUThrottled|CPUThrottledTime)
				s.Missing = append([]Missing{{CPUPeriods | CPUThrottled | CPUThrottledTime, v1Dir("cpu") + "/cpu.stat", `unreadable: line 2: key nr_throttled: want a number, got "x"`}}, s.Missing...)
				return s
			},
			err: `cgstats: ` + v1Dir("cpu") + `/cpu.stat: line 2: key nr_throttled: want a number, got "x"`,
		},
		{
			name: "v1 malformed blkio line", tree: "v1",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				testenv.Write(t, filepath.Join(root, v1Dir("blkio")+"/blkio.throttle.io_serviced_recursive"), "8:0 Read 1\n8:0 Write\nTotal 1\n")
			},
			want: func() Stats {
				s := unset(v1Want(), IOReadOps|IOWriteOps)
				m := s.Missing
				s.Missing = append(m[:2:2], Missing{IOReadOps | IOWriteOps, v1Dir("blkio") + "/blkio.throttle.io_serviced_recursive", `unreadable: line 2: want "MAJ:MIN Op value" or "Total value", got "8:0 Write"`})
				s.Missing = append(s.Missing, m[2:]...)
				return s
			},
			err: `cgstats: ` + v1Dir("blkio") + `/blkio.throttle.io_serviced_recursive: line 2: want "MAJ:MIN Op value" or "Total value", got "8:0 Write"`,
		},
		{name: "v2 all controllers", tree: "v2", want: v2Want},
		{
			name: "v2 without memory, pids, io and cpu controllers (like this dev machine)", tree: "v2",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				for _, f := range []string{"memory.current", "memory.peak", "memory.events", "memory.stat", "pids.current", "io.stat"} {
					if err := os.Remove(filepath.Join(root, v2Dir, f)); err != nil {
						t.Fatal(err)
					}
				}
				testenv.Write(t, filepath.Join(root, v2Dir+"/cpu.stat"), "usage_usec 1750000\nuser_usec 1500000\nsystem_usec 250000\nnice_usec 0\n")
			},
			want: func() Stats {
				s := unset(v2Want(), CPUPeriods|CPUThrottled|CPUThrottledTime|MemCurrent|MemPeak|MemOOM|MemOOMKill|PgFault|PgMajFault|MemAnon|PidsCurrent|ioAll)
				const noCPU = "no throttling keys (cpu controller not enabled for this cgroup)"
				s.Missing = []Missing{
					{CPUPeriods | CPUThrottled | CPUThrottledTime, v2Dir + "/cpu.stat", noCPU},
					{MemCurrent, v2Dir + "/memory.current", "file absent"},
					{MemPeak, v2Dir + "/memory.peak", "file absent"},
					{MemOOM | MemOOMKill, v2Dir + "/memory.events", "file absent"},
					{PgFault | PgMajFault | MemAnon, v2Dir + "/memory.stat", "file absent"},
					{PidsCurrent, v2Dir + "/pids.current", "file absent"},
					{ioAll, v2Dir + "/io.stat", "file absent"},
				}
				return s
			},
		},
		{
			name: "v2 kernel without memory.peak and cpu full PSI", tree: "v2",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				if err := os.Remove(filepath.Join(root, v2Dir, "memory.peak")); err != nil {
					t.Fatal(err)
				}
				testenv.Write(t, filepath.Join(root, v2Dir+"/cpu.pressure"), "some avg10=2.45 avg60=5.26 avg300=15.97 total=570929\n")
			},
			want: func() Stats {
				s := unset(v2Want(), MemPeak|PSICPUFull)
				s.Missing = []Missing{
					{MemPeak, v2Dir + "/memory.peak", "file absent"},
					{PSICPUFull, v2Dir + "/cpu.pressure", `no "full" line (kernel before 5.13 for cpu)`},
				}
				return s
			},
		},
		{
			name: "v2 malformed io.stat keeps the rest", tree: "v2",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				testenv.Write(t, filepath.Join(root, v2Dir+"/io.stat"), "8:16 rbytes=8192 wbytes=0\n8:0 rbytes=oops\n")
			},
			want: func() Stats {
				s := unset(v2Want(), ioAll)
				s.Missing = []Missing{{ioAll, v2Dir + "/io.stat", `unreadable: line 2: key rbytes: want a number, got "oops"`}}
				return s
			},
			err: "cgstats: " + v2Dir + `/io.stat: line 2: key rbytes: want a number, got "oops"`,
		},
		{
			name: "v2 cgroup vanished", tree: "v2",
			mutate: func(t *testing.T, root string, _ map[string]string) {
				if err := os.RemoveAll(filepath.Join(root, v2Dir)); err != nil {
					t.Fatal(err)
				}
			},
			want: func() Stats {
				s := Stats{Vanished: true}
				s.Missing = []Missing{{AllFields, v2Dir, "cgroup removed (job ended?)"}}
				return s
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, tt.tree)
			fsys := hostfs.New(root)
			paths, err := jobcgroup.Find(fsys, "node1", 1000, 42)
			if err != nil {
				t.Fatal(err)
			}
			if tt.mutate != nil {
				tt.mutate(t, root, paths)
			}
			got, err := NewReader(fsys, Options{}).Read(paths)
			if diff := cmp.Diff(tt.err, errString(err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want(), got); diff != "" {
				t.Errorf("Stats (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadHybrid merges a v1 job and a v2 job cgroup: v2 wins by default, v1 with PreferV1.
func TestReadHybrid(t *testing.T) {
	root := copyTree(t, "v1")
	v2 := copyTree(t, "v2")
	if err := os.Rename(filepath.Join(v2, "sys/fs/cgroup"), filepath.Join(root, "sys/fs/cgroup/unified")); err != nil {
		t.Fatal(err)
	}
	// v2 with different CPU numbers, to see who wins.
	unified := "/sys/fs/cgroup/unified/system.slice/slurmstepd.scope/job_42"
	testenv.Write(t, filepath.Join(root, unified+"/cpu.stat"), "usage_usec 3\nuser_usec 2\nsystem_usec 1\n")
	paths := map[string]string{"cpuacct": v1Dir("cpuacct"), "memory": v1Dir("memory"), "unified": unified}
	for _, tt := range []struct {
		opts     Options
		user     uint64
		measured Field
	}{
		{Options{}, 2000, AllFields &^ CPUPeriods &^ CPUThrottled &^ CPUThrottledTime},
		{Options{PreferV1: true}, 1_500_000_000, AllFields &^ CPUPeriods &^ CPUThrottled &^ CPUThrottledTime},
	} {
		got, err := NewReader(hostfs.New(root), tt.opts).Read(paths)
		if err != nil {
			t.Fatal(err)
		}
		if got.CPUUserNs != tt.user || got.Measured != tt.measured || got.OOM != 2 || got.MemPeak != 73400320 {
			t.Errorf("%+v: got user %d, measured %v, oom %d, peak %d", tt.opts, got.CPUUserNs, got.Measured, got.OOM, got.MemPeak)
		}
	}
}
