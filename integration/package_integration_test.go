package integration

// The packages (make package; scripts/test.sh builds them before these tests): the .deb
// holds the binaries, the plugin in Debian's Slurm plugin directory, a unit per role that
// passes systemd-analyze verify, configuration files an upgrade keeps, a manual page for
// every unit's documentation and every command, and the docs; the .rpm the same files,
// the plugin in /usr/lib64/slurm. In the pristine root the .deb is installed and every
// integration test runs the installed files (PERSYST_INSTALLED=1).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func TestPackage(t *testing.T) {
	defer sideBySide(t)()
	debs, _ := filepath.Glob(filepath.Join(repoRoot, "build/package/persyst_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(repoRoot, "build/package/persyst-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("want one .deb and one .rpm in build/package (make package): %v %v", debs, rpms)
	}
	units := []string{"persyst-daemon", "persyst-collector", "persyst-sync", "persyst-frontend", "persyst-web"}
	want := []string{"/usr/bin/persyst", "/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_persyst.so", "/etc/slurm/persyst.conf",
		"/etc/slurm/plugstack.conf.d/persyst.conf", "/etc/default/persyst", "/usr/lib/sysusers.d/persyst.conf",
		"/usr/lib/tmpfiles.d/persyst.conf", "/usr/share/man/man1/persyst.1.gz", "/usr/share/doc/persyst/admin.md", "/usr/lib/persyst/slurm-mail", "/usr/lib/persyst/persyst-nvml",
		"/usr/share/doc/persyst/LICENSE"}
	for _, u := range units {
		want = append(want, "/usr/lib/systemd/system/"+u+".service", "/usr/share/man/man1/"+u+".1.gz")
	}
	want = append(want, "/usr/lib/systemd/system/persyst-web.socket")
	root := t.TempDir()
	t.Run("deb", func(t *testing.T) {
		if out, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x: %v %s", err, out)
		}
		for _, f := range want {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("the .deb lacks %s", f)
			}
		}
		// An upgrade never overwrites what an admin edited.
		conf, err := exec.Command("dpkg-deb", "-f", debs[0], "Version").Output()
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", "dpkg-deb --ctrl-tarfile "+debs[0]+" | tar -xO ./conffiles").Output()
		if err != nil {
			t.Fatalf("conffiles: %v", err)
		}
		for _, f := range []string{"/etc/slurm/persyst.conf", "/etc/slurm/plugstack.conf.d/persyst.conf", "/etc/default/persyst"} {
			if !strings.Contains(string(out), f+"\n") {
				t.Errorf("%s is not a conffile: %q", f, out)
			}
		}
		// The binary says the version the package carries.
		v, err := exec.Command(filepath.Join(root, "usr/bin/persyst"), "version").Output()
		if err != nil {
			t.Fatal(err)
		}
		if pv := strings.TrimSpace(string(conf)); !strings.HasPrefix(string(v), "persyst ") || pv == "" {
			t.Errorf("persyst version %q, package version %q", v, pv)
		}
		// The package is for the Slurm series its plugin was built with (this Slurm's): it
		// says so, needs that series and conflicts with the next.
		series, next := slurmSeries(t)
		if pv := strings.TrimSpace(string(conf)); !strings.HasSuffix(pv, "+slurm"+series) {
			t.Errorf("package version %q does not end in +slurm%s", pv, series)
		}
		for field, want := range map[string]string{
			"Depends":   "slurm-client (>= " + series + "~) | slurm-smd-client (>= " + series + "~)",
			"Conflicts": "slurm-client (>= " + next + "~), slurm-smd-client (>= " + next + "~)",
		} {
			got, err := exec.Command("dpkg-deb", "-f", debs[0], field).Output()
			if err != nil || !strings.Contains(string(got), want) {
				t.Errorf("the .deb's %s: %q (%v), want %q", field, got, err, want)
			}
		}
		// The plugstack snippet names the plugin where the package puts it.
		snip, _ := os.ReadFile(filepath.Join(root, "etc/slurm/plugstack.conf.d/persyst.conf"))
		if !strings.Contains(string(snip), "optional /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_persyst.so") {
			t.Errorf("plugstack snippet:\n%s", snip)
		}
	})
	t.Run("units pass systemd-analyze verify", func(t *testing.T) {
		// The root needs systemd's own targets to resolve the units' dependencies.
		if out, err := exec.Command("cp", "-r", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		args := []string{"verify", "--man=no", "--root=" + root}
		for _, u := range units {
			args = append(args, filepath.Join(root, "usr/lib/systemd/system", u+".service"))
		}
		args = append(args, filepath.Join(root, "usr/lib/systemd/system/persyst-web.socket"))
		out, err := exec.Command("systemd-analyze", args...).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
		// Every man: page a unit names is in the package.
		re := regexp.MustCompile(`man:([a-z-]+)\(1\)`)
		for _, u := range units {
			b, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system", u+".service"))
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				if _, err := os.Stat(filepath.Join(root, "usr/share/man/man1", m[1]+".1.gz")); err != nil {
					t.Errorf("%s names man:%s(1), not in the package", u, m[1])
				}
			}
		}
	})
	t.Run("rpm", func(t *testing.T) {
		out, err := exec.Command("rpm", "-qlp", rpms[0]).Output()
		if err != nil {
			t.Fatalf("rpm -qlp: %v", err)
		}
		files := map[string]bool{}
		for _, f := range strings.Fields(string(out)) {
			files[f] = true
		}
		for _, f := range want {
			if strings.Contains(f, "x86_64-linux-gnu") {
				f = "/usr/lib64/slurm/spank_persyst.so"
			}
			if !files[f] {
				t.Errorf("the .rpm lacks %s", f)
			}
		}
		series, next := slurmSeries(t)
		for _, q := range []struct{ flag, want string }{{"--requires", "slurm >= " + series}, {"--conflicts", "slurm >= " + next}} {
			got, err := exec.Command("rpm", "-qp", q.flag, rpms[0]).Output()
			if err != nil || !slices.Contains(strings.Split(string(got), "\n"), q.want) {
				t.Errorf("rpm %s: %q (%v), want %q", q.flag, got, err, q.want)
			}
		}
		if lic, err := exec.Command("rpm", "-qp", "--qf", "%{LICENSE}", rpms[0]).Output(); err != nil || string(lic) != "Apache-2.0" {
			t.Errorf("the .rpm's license: %q, %v; want Apache-2.0", lic, err)
		}
		cfg, err := exec.Command("rpm", "-qp", "--qf", `[%{FILENAMES} %{FILEFLAGS:fflags}\n]`, rpms[0]).Output()
		if err != nil {
			t.Fatal(err)
		}
		var noreplace []string
		for _, l := range strings.Split(string(cfg), "\n") {
			if f := strings.Fields(l); len(f) == 2 && strings.Contains(f[1], "c") && strings.Contains(f[1], "n") {
				noreplace = append(noreplace, f[0])
			}
		}
		sort.Strings(noreplace)
		if strings.Join(noreplace, " ") != "/etc/default/persyst /etc/slurm/persyst.conf /etc/slurm/plugstack.conf.d/persyst.conf" {
			t.Errorf("config(noreplace) files of the .rpm: %v", noreplace)
		}
		// rpm2cpio of Debian's rpm exits 1 after writing the whole archive of an nfpm
		// package: the archive is what counts.
		archive, err := exec.Command("rpm2cpio", rpms[0]).Output()
		if len(archive) == 0 {
			t.Fatalf("rpm2cpio: %v", err)
		}
		snip, ok := cpioFile(archive, "/etc/slurm/plugstack.conf.d/persyst.conf")
		if !ok || !strings.Contains(string(snip), "optional /usr/lib64/slurm/spank_persyst.so") {
			t.Errorf("the .rpm's plugstack snippet (found %v):\n%s", ok, snip)
		}
	})
	t.Run("installed", func(t *testing.T) {
		if os.Getenv("PERSYST_INSTALLED") != "1" {
			if os.Getenv("PERSYST_FRESH_INSIDE") != "" {
				t.Fatal("in the pristine root the .deb must be installed (scripts/test.sh)")
			}
			t.Skip("the .deb is installed only in the pristine root (make test), not on this machine")
		}
		out, err := exec.Command("dpkg-query", "-S", "/usr/bin/persyst").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "persyst: ") {
			t.Errorf("/usr/bin/persyst is not the package's: %v %s", err, out)
		}
		if persystBin() != "/usr/bin/persyst" || os.Getenv("PERSYST_SPANK") != "/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_persyst.so" {
			t.Errorf("the tests do not run the installed files: PERSYST_BIN=%q PERSYST_SPANK=%q", persystBin(), os.Getenv("PERSYST_SPANK"))
		}
		if out, err := exec.Command("getent", "passwd", "persyst").Output(); err != nil || len(out) == 0 {
			t.Errorf("the package made no persyst user: %v", err)
		}
	})
}

// cpioFile returns the contents of the file name in a cpio archive of the "newc" format
// (rpm2cpio's).
func cpioFile(a []byte, name string) ([]byte, bool) {
	pad := func(n int) int { return (n + 3) &^ 3 }
	for len(a) >= 110 && string(a[:6]) == "070701" {
		hex := func(i int) int {
			v, _ := strconv.ParseUint(string(a[6+8*i:14+8*i]), 16, 32)
			return int(v)
		}
		size, nameLen := hex(6), hex(11)
		if 110+nameLen > len(a) {
			return nil, false
		}
		// rpm2cpio of RPM 4.18 (Debian 12) names /etc/..., of 4.20 (Debian 13) ./etc/...
		n := strings.TrimSuffix(string(a[110:110+nameLen]), "\x00")
		if strings.HasPrefix(n, "./") {
			n = n[1:]
		}
		data := pad(110 + nameLen)
		if data+size > len(a) {
			return nil, false
		}
		if n == name {
			return a[data : data+size], true
		}
		if n == "TRAILER!!!" {
			break
		}
		a = a[pad(data+size):]
	}
	return nil, false
}

// slurmSeries is the series of the Slurm installed here ("24.11") and the next ("24.12").
func slurmSeries(t *testing.T) (string, string) {
	t.Helper()
	rel := slurmRelease(t)
	return rel.Series(), fmt.Sprintf("%d.%02d", rel.Major, rel.Minor+1)
}
