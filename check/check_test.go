package check

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/persyst/persyst/amdgpu/fakeamdgpu"
	"github.com/persyst/persyst/config"
	"github.com/persyst/persyst/daemon/measure/redfish/fakebmc"
	"github.com/persyst/persyst/hostfs"
	"github.com/persyst/persyst/internal/testenv"
	"github.com/persyst/persyst/slurmver"
)

func TestParseStack(t *testing.T) {
	in := `# plugstack.conf
optional /usr/lib/x/spank_persyst.so default=on socket=/run/p.sock # a comment
required	spank_other.so
include plugstack.conf.d/*.conf

optional
`
	got, err := parseStack(strings.NewReader(in), "/etc/slurm/plugstack.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := stackFile{
		lines: []stackLine{
			{File: "/etc/slurm/plugstack.conf", Line: 2, Path: "/usr/lib/x/spank_persyst.so", Args: []string{"default=on", "socket=/run/p.sock"}},
			{File: "/etc/slurm/plugstack.conf", Line: 3, Required: true, Path: "spank_other.so", Args: []string{}},
			{File: "/etc/slurm/plugstack.conf", Line: 4, Include: true, Path: "plugstack.conf.d/*.conf", Args: []string{}},
		},
		errs: []string{"/etc/slurm/plugstack.conf:6: optional without a path: slurmd ignores the line"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(stackFile{})); diff != "" {
		t.Errorf("parseStack (-want +got):\n%s", diff)
	}
	// An unknown type stops the file, as in slurmd.
	got, _ = parseStack(strings.NewReader("requred a.so\noptional b.so\n"), "p")
	if len(got.lines) != 0 || len(got.errs) != 1 || !strings.Contains(got.errs[0], `p:1: "requred"`) {
		t.Errorf("a bad type: %+v", got)
	}
}

// TestLoadStack: includes are followed from the including file's directory, relative
// plugin paths looked for in PluginDir, include loops bounded.
func TestLoadStack(t *testing.T) {
	root := testenv.Files(t, map[string]string{
		"etc/slurm/plugstack.conf":             "include plugstack.conf.d/*.conf\noptional /abs/missing.so\n",
		"etc/slurm/plugstack.conf.d/a.conf":    "optional spank_persyst.so default=off\n",
		"etc/slurm/plugstack.conf.d/b.conf":    "include /etc/slurm/loop.conf\n",
		"etc/slurm/loop.conf":                  "include /etc/slurm/loop.conf\n",
		"usr/lib64/slurm/spank_persyst.so":     "",
		"usr/lib/slurm-wlm/spank_persyst.so":   "",
		"etc/slurm/plugstack.conf.d/README.md": "not included",
	})
	h := hostfs.New(root)
	plugins, problems, err := loadStack(h, "/etc/slurm/plugstack.conf", "/usr/lib64/slurm:/usr/lib/slurm-wlm")
	if err != nil {
		t.Fatal(err)
	}
	want := []stackLine{
		{File: "/etc/slurm/plugstack.conf.d/a.conf", Line: 1, Path: "spank_persyst.so", Args: []string{"default=off"}, Resolved: "/usr/lib64/slurm/spank_persyst.so"},
		{File: "/etc/slurm/plugstack.conf", Line: 2, Path: "/abs/missing.so", Args: []string{}},
	}
	if diff := cmp.Diff(want, plugins); diff != "" {
		t.Errorf("loadStack (-want +got):\n%s", diff)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "nest deeper") {
		t.Errorf("problems = %q, want the include loop", problems)
	}
	// No plugstack.conf: an empty stack, as for slurmd.
	if p, _, err := loadStack(h, "/etc/none.conf", ""); err != nil || len(p) != 0 {
		t.Errorf("a missing file: %v, %v", p, err)
	}
}

// buildPlugin compiles a shared object with Slurm's plugin symbols (as SPANK_PLUGIN
// defines them) at path; name "" leaves plugin_name out.
func buildPlugin(t *testing.T, path, name, typ string, version uint32) {
	t.Helper()
	cc := testenv.Program(t, "cc", "gcc")
	src := fmt.Sprintf("const char plugin_type[] = %q;\nconst unsigned int plugin_version = %#x;\nint spank_init(void) { return 0; }\n", typ, version)
	if name != "" {
		src += fmt.Sprintf("const char plugin_name[] = %q;\n", name)
	}
	c := filepath.Join(t.TempDir(), "p.c")
	testenv.Write(t, c, src)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", path, c).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
}

func TestReadPlugin(t *testing.T) {
	dir := t.TempDir()
	good, noName := filepath.Join(dir, "good.so"), filepath.Join(dir, "noname.so")
	buildPlugin(t, good, "persyst", "spank", 0x180b05)
	buildPlugin(t, noName, "", "spank", 0x180b05)
	got, err := readPlugin(good)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pluginInfo{Name: "persyst", Type: "spank", Version: slurmver.Release{Major: 24, Minor: 11, Micro: 5}}, got); diff != "" {
		t.Errorf("readPlugin (-want +got):\n%s", diff)
	}
	if _, err := readPlugin(noName); err == nil || !strings.Contains(err.Error(), "not a Slurm plugin") {
		t.Errorf("readPlugin of a library without plugin_name: %v", err)
	}
	notELF := filepath.Join(dir, "text.so")
	testenv.Write(t, notELF, "not ELF")
	if _, err := readPlugin(notELF); err == nil {
		t.Error("readPlugin of a text file: no error")
	}
}

// slurmCommands answers Slurm's and MUNGE's commands as a node with release rel would
// (a table, not Slurm: the integration tests run the real one); a missing answer is the
// command failing.
func slurmCommands(answers map[string]string) func(ctx context.Context, name string, args ...string) ([]byte, error) {
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		cmd := strings.Join(append([]string{name}, args...), " ")
		if out, ok := answers[cmd]; ok {
			return []byte(out), nil
		}
		return nil, errors.New(cmd + ": exit status 1")
	}
}

// TestRun: what a node's Slurm, plugstack.conf and plugin file give, by check.
func TestRun(t *testing.T) {
	testenv.Root(t, "the plugin file must be root's (a test root made by another user is not)")
	const plugdir = "/usr/lib/x86_64-linux-gnu/slurm-wlm"
	line := "optional " + plugdir + "/spank_persyst.so default=on\n"
	bmcURL, bmcCA := fakeBMC(t, "n1", 412)
	tests := []struct {
		name    string
		files   map[string]string
		built   uint32 // the plugin's plugin_version (0: no plugin file)
		answers map[string]string
		conf    func(c *config.Config)
		setup   func(t *testing.T, root string)
		gres    string   // what slurmd -G prints ("": not asked; "fail": it fails)
		want    []string // "STATUS check: substring" of results that must be there
	}{
		{
			// Slurm's GPU indices: the device nodes slurmd -G names, read under the root
			// (one of them a plain file, no device).
			name:  "GPU indices from slurmd",
			files: map[string]string{"etc/slurm/plugstack.conf": line, "dev/nvidia1": ""},
			built: 0x180b05,
			setup: func(t *testing.T, root string) {
				os.MkdirAll(filepath.Join(root, "dev/dri"), 0o755)
				for p, dev := range map[string]uint64{"dev/nvidia0": unix.Mkdev(195, 0), "dev/dri/renderD128": unix.Mkdev(226, 128)} {
					if err := unix.Mknod(filepath.Join(root, p), unix.S_IFCHR|0o600, int(dev)); err != nil {
						t.Fatal(err)
					}
				}
			},
			gres: "slurmd: Gres Name=gpu Type=nvidia Count=2 Index=0 ID=7696487 File=/dev/nvidia[0-1] Links=(null) Flags=HAS_FILE\n" +
				"slurmd: Gres Name=gpu Type=amd Count=1 Index=128 ID=7696487 File=/dev/dri/renderD128 Links=(null) Flags=HAS_FILE\n",
			want: []string{"ok gpus: Slurm's GPU indices (slurmd -G): 0 /dev/nvidia0, 2 /dev/dri/renderD128",
				"warn gpus: Slurm's GPU indices that name no one GPU device: 1 (/dev/nvidia1: not a character device)"},
		},
		{
			name:  "slurmd -G fails",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x180b05,
			gres:  "fail",
			setup: func(t *testing.T, root string) {
				os.MkdirAll(filepath.Join(root, "dev"), 0o755)
				if err := unix.Mknod(filepath.Join(root, "dev/nvidia0"), unix.S_IFCHR|0o600, int(unix.Mkdev(195, 0))); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"warn gpus: slurmd -G: exit status 1", "warn gpus: → jobs' GPU indices are taken as NVML's"},
		},
		{
			// Nothing depends on slurmd's answer on a node without a GPU.
			name:  "slurmd -G fails on a node without GPUs",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x180b05,
			gres:  "fail",
			want:  []string{"info gpus: slurmd -G: exit status 1", "info gpus: this node has no GPU, so nothing depends on it"},
		},
		{
			name:  "works",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x180b05,
			want: []string{"ok slurm: Slurm 24.11.2 (slurmd -V)", "ok plugstack: /etc/slurm/plugstack.conf:1 loads", `ok plugin: SPANK plugin "persyst" built for Slurm 24.11`,
				"info energy: no RAPL counters", "info gpus: no AMD GPU"},
		},
		{
			// FAKE AMD cards (no machine here has one): an MI250X-like one read whole, an
			// MI300X-like one in a partition whose table (v1.4) says nothing of throttling
			// and that the KFD does not list.
			name:  "AMD GPUs",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x180b05,
			setup: func(t *testing.T, root string) {
				tree, err := fakeamdgpu.New(root,
					fakeamdgpu.Card{Bus: "0000:c1:00.0", Render: 128, GPUID: 5, Name: "AMD Instinct MI250X", VRAM: 64 << 30, Metrics: 3},
					fakeamdgpu.Card{Bus: "0000:d1:00.0", Render: 136, Name: "AMD Instinct MI300X", VRAM: 192 << 30, Partition: "CPX", PowerInput: true, Metrics: 4})
				if err != nil {
					t.Fatal(err)
				}
				tree.Set(0, fakeamdgpu.State{Watts: 90, Joules: 5})
				tree.Set(1, fakeamdgpu.State{Watts: 140, Joules: 7})
			},
			want: []string{"ok gpus: AMD Instinct MI250X at 0000:c1:00.0 (card1, /dev/dri/renderD128): busy time, memory, power, energy counter, throttling, RAS errors; processes through the KFD",
				"warn gpus: AMD Instinct MI300X at 0000:d1:00.0 (card2, /dev/dri/renderD136, compute partition CPX)", "warn gpus: not: throttling (gpu_metrics v1.4 says nothing",
				"warn gpus: whose processes use it (the KFD does not list this GPU"},
		},
		{
			name: "RAPL counters in the powercap tree",
			files: map[string]string{"etc/slurm/plugstack.conf": line,
				"sys/class/powercap/intel-rapl:0/name": "package-0\n", "sys/class/powercap/intel-rapl:0/energy_uj": "12\n",
				"sys/class/powercap/intel-rapl:0:0/name": "dram\n", "sys/class/powercap/intel-rapl:0:0/energy_uj": "3\n"},
			built: 0x180b05,
			want:  []string{"ok energy: RAPL (powercap ", "ok energy: package-0, dram; a job's share of a shared node by its CPU time"},
		},
		{
			name:  "the node's BMC answers",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x180b05,
			conf:  func(c *config.Config) { c.BMCRedfish, c.BMCCA = bmcURL, bmcCA },
			want:  []string{"ok energy: the node's meter (BMC, Redfish): 412 W now"},
		},
		{
			name:  "the node's BMC is not there",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x180b05,
			conf:  func(c *config.Config) { c.BMCRedfish, c.BMCCA = strings.Replace(bmcURL, "%n", "other", 1), bmcCA },
			want:  []string{"warn energy: 404", "warn energy: → the node's whole energy is not measured while its BMC does not answer"},
		},
		{
			name:  "built for another release",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x160508,
			want:  []string{"FAIL plugin: spank_persyst.so was built for Slurm 22.05; slurmd is 24.11 and skips it", "FAIL plugin: → install persyst's package built for Slurm 24.11"},
		},
		{
			name: "the package's file is not included",
			files: map[string]string{"etc/slurm/plugstack.conf": "# empty\n",
				"etc/slurm/plugstack.conf.d/persyst.conf": line},
			built: 0x180b05,
			want:  []string{"FAIL plugstack: loads no persyst plugin", `FAIL plugstack: → persyst's package put its line in /etc/slurm/plugstack.conf.d/: add "include /etc/slurm/plugstack.conf.d/*.conf"`},
		},
		{
			name:  "required, bad argument",
			files: map[string]string{"etc/slurm/plugstack.conf": "required spank_persyst.so default=maybe\n"},
			built: 0x180b05,
			want:  []string{"warn plugstack: /etc/slurm/plugstack.conf:1: required", "FAIL plugstack: /etc/slurm/plugstack.conf:1: ", "FAIL plugstack: the plugin turns itself off"},
		},
		{
			name:  "no plugin file",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			want:  []string{"FAIL plugin: " + plugdir + "/spank_persyst.so: no such plugin file"},
		},
		{
			name:    "PlugStackConfig and PluginDir from slurmctld",
			files:   map[string]string{"opt/slurm/stack.conf": "optional spank_persyst.so\n"},
			built:   0x180b05,
			answers: map[string]string{"scontrol show config": "Configuration data as of now\nPlugStackConfig         = /opt/slurm/stack.conf\nPluginDir               = " + plugdir + "\n"},
			want:    []string{"ok plugstack: /opt/slurm/stack.conf:1 loads spank_persyst.so"},
		},
		{
			name:    "a tree on munge where Slurm runs auth/slurm",
			files:   map[string]string{"etc/slurm/plugstack.conf": line},
			built:   0x180b05,
			answers: map[string]string{"scontrol show config": "AuthType                = auth/slurm\n"},
			conf:    func(c *config.Config) { c.Collector = "col1:16830" },
			want: []string{"FAIL tree: TreeAuth=munge: munged does not answer",
				"FAIL tree: → Slurm authenticates with auth/slurm here, without munged: set TreeAuth=tls with TLSCert, TLSKey and TLSCA"},
		},
		{
			name:  "a tree on TLS without its files",
			files: map[string]string{"etc/slurm/plugstack.conf": line},
			built: 0x180b05,
			conf: func(c *config.Config) {
				c.Collector, c.TLSCert, c.TLSKey, c.TLSCA = "col1:16830", "/etc/persyst/%n.pem", "/etc/persyst/%n.key", "/etc/persyst/ca.pem"
			},
			want: []string{"FAIL tree: TreeAuth=tls: stat", "FAIL tree: /etc/persyst/n1.pem"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testenv.Files(t, tc.files)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			if tc.built != 0 {
				buildPlugin(t, filepath.Join(root, plugdir, "spank_persyst.so"), "persyst", "spank", tc.built)
			}
			answers := map[string]string{"slurmd -V": "slurm 24.11.2\n"}
			for k, v := range tc.answers {
				answers[k] = v
			}
			conf := config.Defaults()
			if tc.conf != nil {
				tc.conf(&conf)
			}
			o := Options{Host: hostfs.New(root), Node: "n1", Socket: filepath.Join(root, "none.sock"),
				Config: conf, Run: slurmCommands(answers)}
			if tc.gres != "" {
				o.RunAll = func(_ context.Context, name string, args ...string) ([]byte, error) {
					if tc.gres == "fail" || name+" "+strings.Join(args, " ") != "slurmd -G -N n1" {
						return nil, errors.New("exit status 1: fatal: Unable to determine this slurmd's NodeName")
					}
					return []byte(tc.gres), nil
				}
			}
			rs := Run(context.Background(), o)
			var got []string
			for _, r := range rs {
				got = append(got, fmt.Sprintf("%s %s: %s", r.Status, r.Check, r.Detail))
				if r.Fix != "" {
					got = append(got, fmt.Sprintf("%s %s: → %s", r.Status, r.Check, r.Fix))
				}
			}
			for _, w := range tc.want {
				head, sub, _ := strings.Cut(w, ": ")
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, head+": ") && strings.Contains(g, sub) }) {
					t.Errorf("no %s result with %q in:\n%s", head, sub, strings.Join(got, "\n"))
				}
			}
			if !Failed(rs) {
				t.Error("no daemon answers, yet the check did not fail")
			}
		})
	}
}

// fakeBMC serves a FAKE BMC (no machine here has one) on loopback with a chassis at watts,
// and returns its URL with %n for the chassis and the file of its certificate.
func fakeBMC(t *testing.T, chassis string, watts float64) (url, caFile string) {
	t.Helper()
	bmc := fakebmc.New(nil)
	bmc.Set(chassis, watts)
	cert, ca, err := fakebmc.Certificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fakebmc.Serve(ln, bmc, cert))
	return "https://" + ln.Addr().String() + "/redfish/v1/Chassis/%n", caFile
}

// TestDocsListEveryCheck: docs/admin.md's table of persyst check names every check, and
// no other.
func TestDocsListEveryCheck(t *testing.T) {
	b, err := os.ReadFile("../docs/admin.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "| check | what it looks at |")
	if !ok {
		t.Fatal("docs/admin.md has no table of the checks")
	}
	sec, _, _ = strings.Cut(sec, "\n\n")
	var documented []string
	for _, l := range strings.Split(sec, "\n") {
		if name, ok := strings.CutPrefix(l, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			documented = append(documented, name)
		}
	}
	var names []string
	for _, c := range checks {
		names = append(names, c.name)
	}
	if diff := cmp.Diff(names, documented); diff != "" {
		t.Errorf("docs/admin.md's checks (-code +docs):\n%s", diff)
	}
}
