package jobcgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/persyst/persyst/hostfs"
)

func v1(key, path string, ctrls ...string) Mount {
	return Mount{Key: key, Path: path, Ctrls: ctrls}
}

func v2(path string) Mount { return Mount{Key: "unified", Path: path, IsV2: true} }

func TestParseMountinfoFixtures(t *testing.T) {
	tests := []struct {
		file string
		want []Mount
	}{
		{"mountinfo-v1-hybrid", []Mount{
			v1("cpu", "/sys/fs/cgroup/cpu", "cpu"),
			v1("cpuacct", "/sys/fs/cgroup/cpuacct", "cpuacct"),
			v1("cpuset", "/sys/fs/cgroup/cpuset", "cpuset"),
			v1("memory", "/sys/fs/cgroup/memory", "memory"),
			v1("devices", "/sys/fs/cgroup/devices", "devices"),
			v1("freezer", "/sys/fs/cgroup/freezer", "freezer"),
			v1("blkio", "/sys/fs/cgroup/blkio", "blkio"),
			v1("pids", "/sys/fs/cgroup/pids", "pids"),
			v1("name=systemd", "/sys/fs/cgroup/systemd", "name=systemd"),
			v2("/sys/fs/cgroup/unified"),
		}},
		{"mountinfo-v1-systemd", []Mount{
			v2("/sys/fs/cgroup/unified"),
			v1("name=systemd", "/sys/fs/cgroup/systemd", "name=systemd"),
			v1("cpu,cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "cpu", "cpuacct"),
			v1("cpuset", "/sys/fs/cgroup/cpuset", "cpuset"),
			v1("memory", "/sys/fs/cgroup/memory", "memory"),
			v1("freezer", "/sys/fs/cgroup/freezer", "freezer"),
			v1("perf_event", "/mnt/cg space", "perf_event"),
		}},
		{"mountinfo-v2", []Mount{
			v2("/sys/fs/cgroup"),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := parseMountinfo(f)
			if err != nil {
				t.Fatalf("parseMountinfo: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseMountinfo(%s) mismatch (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	const (
		cpu     = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
		unified = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	)
	tests := []struct {
		name    string
		in      string
		want    []Mount
		wantErr string
	}{
		{name: "empty", in: "", want: nil},
		{name: "no cgroups", in: "22 1 0:21 / /sys rw - sysfs sysfs rw\n23 1 0:5 / /proc rw - proc proc rw\n", want: nil},
		{name: "v1 and v2", in: cpu + unified, want: []Mount{v1("cpu", "/sys/fs/cgroup/cpu", "cpu"), v2("/sys/fs/cgroup/unified")}},
		{
			name: "controllers sorted",
			in:   "30 25 0:27 / /sys/fs/cgroup/net rw - cgroup cgroup rw,net_prio,net_cls\n",
			want: []Mount{v1("net_cls,net_prio", "/sys/fs/cgroup/net", "net_cls", "net_prio")},
		},
		{
			name: "flags and release_agent are not controllers",
			in:   "30 25 0:27 / /sys/fs/cgroup/cpuset ro - cgroup cgroup ro,noprefix,clone_children,xattr,cpuset_v2_mode,favordynmods,release_agent=/sbin/x,cpuset\n",
			want: []Mount{v1("cpuset", "/sys/fs/cgroup/cpuset", "cpuset")},
		},
		{
			name: "named hierarchy with a controller",
			in:   "30 25 0:27 / /sys/fs/cgroup/x rw - cgroup cgroup rw,name=slurm,freezer\n",
			want: []Mount{v1("freezer,name=slurm", "/sys/fs/cgroup/x", "freezer", "name=slurm")},
		},
		{
			name: "v1 without controllers ignored",
			in:   "30 25 0:27 / /sys/fs/cgroup/x rw - cgroup cgroup rw,xattr\n" + cpu,
			want: []Mount{v1("cpu", "/sys/fs/cgroup/cpu", "cpu")},
		},
		{
			name: "second mount of a hierarchy ignored",
			in:   cpu + "50 1 0:29 / /mnt/cpu rw - cgroup cgroup rw,cpu\n" + unified + "51 1 0:38 / /mnt/unified rw - cgroup2 cgroup2 rw\n",
			want: []Mount{v1("cpu", "/sys/fs/cgroup/cpu", "cpu"), v2("/sys/fs/cgroup/unified")},
		},
		{
			name: "optional fields",
			in:   "26 25 0:23 / /sys/fs/cgroup rw,nosuid shared:5 master:1 propagate_from:2 - cgroup2 cgroup2 rw\n",
			want: []Mount{v2("/sys/fs/cgroup")},
		},
		{
			name: "octal escapes",
			in:   `26 25 0:23 / /mnt/a\040b\011c\134d rw - cgroup2 cgroup2 rw` + "\n",
			want: []Mount{v2("/mnt/a b\tc\\d")},
		},
		{
			name: "escape at the end",
			in:   `26 25 0:23 / /mnt/a\040 rw - cgroup2 cgroup2 rw` + "\n",
			want: []Mount{v2("/mnt/a ")},
		},
		{
			name: "invalid escapes kept",
			in:   `26 25 0:23 / /mnt/a\9zz\04 rw - cgroup2 cgroup2 rw` + "\n",
			want: []Mount{v2(`/mnt/a\9zz\04`)},
		},
		{name: "no separator", in: "garbage\n", wantErr: "line 1: no ' - ' separator"},
		{name: "no separator later", in: cpu + unified + "31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs\n", wantErr: "line 3: no ' - ' separator"},
		{name: "too few fields before", in: cpu + "1 2 3 - cgroup cgroup rw,cpu\n", wantErr: "line 2: too few fields"},
		{name: "nothing after separator", in: "1 2 3 4 5 - \n", wantErr: "line 1: too few fields"},
		{name: "cgroup without options", in: unified + "1 2 3 / /x - cgroup cgroup\n", wantErr: "line 2: cgroup mount without options"},
		{name: "very long line", in: "1 2 3 / /" + strings.Repeat("x", 2<<20) + " rw - cgroup2 cgroup2 rw\n", wantErr: "too long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMountinfo(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseMountinfo error = %v, want one containing %q", err, tc.wantErr)
				}
				if got != nil {
					t.Errorf("parseMountinfo returned mounts %v along with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseMountinfo: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseMountinfo mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{name: "v2 root", in: "0::/\n", want: map[string]string{"unified": "/"}},
		{
			name: "hybrid",
			in:   "12:pids:/slurm/uid_1000/job_42/step_0\n4:memory:/x\n2:cpu,cpuacct:/y\n1:name=systemd:/user.slice\n0::/system.slice/slurmd.service\n",
			want: map[string]string{
				"pids":         "/slurm/uid_1000/job_42/step_0",
				"memory":       "/x",
				"cpu,cpuacct":  "/y",
				"name=systemd": "/user.slice",
				"unified":      "/system.slice/slurmd.service",
			},
		},
		{name: "controllers sorted", in: "2:cpuacct,cpu:/y\n", want: map[string]string{"cpu,cpuacct": "/y"}},
		{name: "path with colon", in: "0::/a:b/c\n", want: map[string]string{"unified": "/a:b/c"}},
		{name: "blank lines skipped", in: "\n4:memory:/x\n\n", want: map[string]string{"memory": "/x"}},
		{name: "no newline at end", in: "4:memory:/x", want: map[string]string{"memory": "/x"}},
		{name: "one colon", in: "0::/\n4:memory\n", wantErr: "line 2: want hierarchy:controllers:path"},
		{name: "no colon", in: "garbage", wantErr: `line 1: want hierarchy:controllers:path, got "garbage"`},
		{name: "empty controllers on v1 hierarchy", in: "4::/x\n", wantErr: "line 1: empty controller list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcCgroup(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseProcCgroup error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseProcCgroup: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseProcCgroup mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeRoot builds a root with proc/self/mountinfo copied from a fixture, proc/self/cgroup
// (when cgroup is not empty), the given directories and the given regular files.
func fakeRoot(t *testing.T, fixture, cgroup string, dirs, files []string) hostfs.FS {
	t.Helper()
	root := t.TempDir()
	mi, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel string, b []byte) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/self/mountinfo", mi)
	if cgroup != "" {
		write("proc/self/cgroup", []byte(cgroup))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		write(f, nil)
	}
	return hostfs.New(root)
}

func TestFind(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		dirs    []string
		files   []string
		init    string // <root>/proc/1/cgroup, when not empty
		node    string
		uid     uint32
		job     uint32
		want    map[string]string
	}{
		{
			name:    "v1 node-specific and plain slurm",
			fixture: "mountinfo-v1-systemd",
			dirs: []string{
				"sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_42/step_batch",
				"sys/fs/cgroup/memory/slurm/uid_1000/job_42/step_0",
				// Both layouts exist: the node-specific one wins.
				"sys/fs/cgroup/cpuset/slurm_node1/uid_1000/job_42",
				"sys/fs/cgroup/cpuset/slurm/uid_1000/job_42",
				"sys/fs/cgroup/cpu,cpuacct/slurm/uid_1000/job_42",
				"mnt/cg space/slurm_node1/uid_1000/job_42",
				// Other jobs, other users and other nodes do not match.
				"sys/fs/cgroup/systemd/slurm/uid_1000/job_420",
				"sys/fs/cgroup/systemd/slurm/uid_1001/job_42",
				"sys/fs/cgroup/systemd/slurm_node2/uid_1000/job_42",
			},
			node: "node1", uid: 1000, job: 42,
			want: map[string]string{
				"freezer":     "/sys/fs/cgroup/freezer/slurm_node1/uid_1000/job_42",
				"memory":      "/sys/fs/cgroup/memory/slurm/uid_1000/job_42",
				"cpuset":      "/sys/fs/cgroup/cpuset/slurm_node1/uid_1000/job_42",
				"cpu,cpuacct": "/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1000/job_42",
				"perf_event":  "/mnt/cg space/slurm_node1/uid_1000/job_42",
			},
		},
		{
			name:    "v1 a file is not a cgroup",
			fixture: "mountinfo-v1-hybrid",
			dirs:    []string{"sys/fs/cgroup/pids/slurm/uid_7/job_9"},
			files:   []string{"sys/fs/cgroup/freezer/slurm/uid_7/job_9"},
			node:    "n", uid: 7, job: 9,
			want: map[string]string{"pids": "/sys/fs/cgroup/pids/slurm/uid_7/job_9"},
		},
		{
			name:    "hybrid unified hierarchy",
			fixture: "mountinfo-v1-hybrid",
			dirs:    []string{"sys/fs/cgroup/unified/system.slice/slurmstepd.scope/job_42"},
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{"unified": "/sys/fs/cgroup/unified/system.slice/slurmstepd.scope/job_42"},
		},
		{
			name:    "v2 slurmstepd.scope",
			fixture: "mountinfo-v2",
			dirs:    []string{"sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_batch"},
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"},
		},
		{
			name:    "v2 node-specific scope wins",
			fixture: "mountinfo-v2",
			dirs: []string{
				"sys/fs/cgroup/system.slice/slurmstepd.scope/job_42",
				"sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_42",
			},
			node: "node1", uid: 1000, job: 42,
			want: map[string]string{"unified": "/sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_42"},
		},
		{
			name:    "v2 scope outside system.slice",
			fixture: "mountinfo-v2",
			dirs:    []string{"sys/fs/cgroup/node2_slurmstepd.scope/job_5"},
			node:    "node2", uid: 1000, job: 5,
			want: map[string]string{"unified": "/sys/fs/cgroup/node2_slurmstepd.scope/job_5"},
		},
		{
			name:    "v2 CgroupSlice of Slurm 25.11",
			fixture: "mountinfo-v2",
			dirs:    []string{"sys/fs/cgroup/slurm.slice/slurmstepd.scope/job_42/step_0"},
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{"unified": "/sys/fs/cgroup/slurm.slice/slurmstepd.scope/job_42"},
		},
		{
			name:    "v2 node in a container: below PID 1's parent",
			fixture: "mountinfo-v2",
			init:    "0::/docker/c0ffee/init.scope\n",
			dirs: []string{
				"sys/fs/cgroup/docker/c0ffee/system.slice/slurmstepd.scope/job_42",
				// Not under the prefix: another container's slurmd.
				"sys/fs/cgroup/system.slice/slurmstepd.scope/job_42",
			},
			node: "node1", uid: 1000, job: 42,
			want: map[string]string{"unified": "/sys/fs/cgroup/docker/c0ffee/system.slice/slurmstepd.scope/job_42"},
		},
		{
			name:    "v2 host's PID 1 in init.scope",
			fixture: "mountinfo-v2",
			init:    "0::/init.scope\n",
			dirs:    []string{"sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"},
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{"unified": "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42"},
		},
		{
			name:    "v2 a scope that is no slice's",
			fixture: "mountinfo-v2",
			dirs:    []string{"sys/fs/cgroup/user.scope/slurmstepd.scope/job_42"},
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{},
		},
		{
			name:    "v2 other node's scope",
			fixture: "mountinfo-v2",
			dirs:    []string{"sys/fs/cgroup/system.slice/node2_slurmstepd.scope/job_42"},
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{},
		},
		{
			name:    "v1 job without cgroups",
			fixture: "mountinfo-v1-systemd",
			dirs:    []string{"sys/fs/cgroup/freezer/slurm/uid_1000/job_41"},
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{},
		},
		{
			name:    "v2 job without cgroups",
			fixture: "mountinfo-v2",
			node:    "node1", uid: 1000, job: 42,
			want: map[string]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakeRoot(t, tc.fixture, "", tc.dirs, tc.files)
			if tc.init != "" {
				if err := os.MkdirAll(fs.Path("proc/1"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(fs.Path("proc/1/cgroup"), []byte(tc.init), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Find(fs, tc.node, tc.uid, tc.job)
			if err != nil {
				t.Fatalf("Find: %v", err)
			}
			if got == nil {
				t.Fatal("Find returned a nil map")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Find(%q, %d, %d) mismatch (-want +got):\n%s", tc.node, tc.uid, tc.job, diff)
			}
			// Looking only where Slurm's layout is finds the same.
			mounts, err := Mounts(fs)
			if err != nil {
				t.Fatal(err)
			}
			slurm := WithSlurm(fs, mounts, tc.node)
			if diff := cmp.Diff(tc.want, FindIn(fs, slurm, tc.node, tc.uid, tc.job)); diff != "" {
				t.Errorf("FindIn over WithSlurm's %d of %d mounts (-want +got):\n%s", len(slurm), len(mounts), diff)
			}
			if len(tc.want) == 0 && len(tc.dirs) == 0 && len(slurm) != 0 {
				t.Errorf("WithSlurm kept %d mounts of a root without Slurm's layout", len(slurm))
			}
		})
	}
}

// asProcess makes fakeRoot's files for "self" those of process 4242 too.
func asProcess(t *testing.T, fs hostfs.FS) hostfs.FS {
	t.Helper()
	if err := os.Symlink("self", fs.Path("proc/4242")); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestFSErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) hostfs.FS
		call  func(fs hostfs.FS) error
		want  []string
	}{
		{
			name:  "Find without mountinfo",
			setup: func(t *testing.T) hostfs.FS { return hostfs.New(t.TempDir()) },
			call:  func(fs hostfs.FS) error { _, err := Find(fs, "n", 1, 1); return err },
			want:  []string{"proc/self/mountinfo"},
		},
		{
			name:  "OfProcess without cgroup file",
			setup: func(t *testing.T) hostfs.FS { return asProcess(t, fakeRoot(t, "mountinfo-v2", "", nil, nil)) },
			call:  func(fs hostfs.FS) error { _, err := OfProcess(fs, 4242, 1); return err },
			want:  []string{"proc/4242/cgroup"},
		},
		{
			name: "OfProcess with a malformed cgroup file",
			setup: func(t *testing.T) hostfs.FS {
				return asProcess(t, fakeRoot(t, "mountinfo-v2", "0::/\nbroken\n", nil, nil))
			},
			call: func(fs hostfs.FS) error { _, err := OfProcess(fs, 4242, 1); return err },
			want: []string{"proc/4242/cgroup", "line 2"},
		},
		{
			name: "Find with a malformed mountinfo",
			setup: func(t *testing.T) hostfs.FS {
				fs := fakeRoot(t, "mountinfo-v2", "", nil, nil)
				p := filepath.Join(fs.Root(), "proc/self/mountinfo")
				if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return fs
			},
			call: func(fs hostfs.FS) error { _, err := Find(fs, "n", 1, 1); return err },
			want: []string{"proc/self/mountinfo", "line 1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := tc.setup(t)
			err := tc.call(fs)
			if err == nil {
				t.Fatalf("got nil error, want one containing %q", tc.want)
			}
			var missing []string
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					missing = append(missing, w)
				}
			}
			if diff := cmp.Diff([]string(nil), missing); diff != "" {
				t.Errorf("error %q lacks substrings (-want +got):\n%s", err, diff)
			}
		})
	}
}

// TestHolds: the kernel's name of a task's cgroup lies in a job's cgroup of Slurm's
// layout (v1 with or without the node's name, v2 under slurmstepd.scope) or not.
func TestHolds(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"/slurm_n1/uid_5/job_9/step_batch/task_0", true},
		{"/slurm_n1/uid_5/job_9", true},
		{"/slurm/uid_5/job_9/step_extern", true},
		{"/system.slice/n1_slurmstepd.scope/job_9/step_0/user/task_0", true},
		{"/system.slice/slurmstepd.scope/job_9", true},
		{"/n1_slurmstepd.scope/job_9/step_0", true},
		{"/slurm.slice/slurmstepd.scope/job_9/step_0", true},
		{"/kubepods/pod1/system.slice/n1_slurmstepd.scope/job_9", true},
		{"/slurm.slice/slurmstepd.scope/job_90", false},
		{"/slurm.slice/slurmstepd.scope/system/job_9", false},
		{"/slurm_n1/uid_5/job_90/step_batch", false},
		{"/slurm_n1/uid_6/job_9/step_batch", false},
		{"/slurm_n2/uid_5/job_9/step_batch", false},
		{"/system.slice/n2_slurmstepd.scope/job_9", false},
		{"/user.slice/job_9", false},
		{"slurm_n1/uid_5/job_9", false},
	} {
		if got := Holds(tc.rel, "n1", 5, 9); got != tc.want {
			t.Errorf("Holds(%q, n1, uid 5, job 9) = %v, want %v", tc.rel, got, tc.want)
		}
	}
}
