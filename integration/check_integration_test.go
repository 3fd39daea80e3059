package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/persyst/persyst/daemon"
	"github.com/persyst/persyst/slurmver"
)

// TestPluginNotLoaded: a node whose slurmd skips persyst's plugin because it was built
// for another Slurm release, as after a Slurm upgrade without persyst's. Slurm says so
// once in slurmd's log and runs the jobs; the daemon notices the jobs it never heard of
// within the grace time, and `persyst check` names the plugin and what to do. On a
// cluster with the right plugin, persyst check finds nothing to fix.
func TestPluginNotLoaded(t *testing.T) {
	defer sideBySide(t)()
	rel := slurmRelease(t)
	// The plugin of the release before (its plugin_version, as SPANK_PLUGIN sets it).
	other := slurmver.Release{Major: rel.Major - 1, Minor: rel.Minor, Micro: 1}
	stub := filepath.Join(t.TempDir(), "spank_persyst.so")
	buildStubPlugin(t, stub, other)

	t.Run("another release's plugin", func(t *testing.T) {
		c := startCluster(t, 1, "PERSYST_SPANK="+stub)
		node := c.nodes[0]
		id := c.sbatch(t, nil, "-o", "/dev/null", "--wrap", "sleep 40")
		// Reported within a cycle (1 s here), the time between the cycle's looks (5 s) and
		// the grace time (10 s) of the batch step's start, which comes a second or two after
		// submission.
		deadline := time.Now().Add(25 * time.Second)
		var got *daemon.UnannouncedJobs
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			l, err := daemon.List(ctx, c.socket(node))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if got = l.Unannounced; got != nil && got.Total > 0 {
				break
			}
			time.Sleep(time.Second)
		}
		if got == nil || got.Total != 1 || len(got.Recent) != 1 || got.Recent[0] != id {
			t.Fatalf("daemon's unannounced jobs: %+v, want job %d", got, id)
		}
		if log := c.readLog(t, "persyst-"+node); !strings.Contains(log, "never heard of") || !strings.Contains(log, fmt.Sprintf(`"job":%d`, id)) {
			t.Errorf("the daemon's log does not warn of job %d:\n%s", id, log)
		}
		if log := c.readLog(t, "slurmd-"+node); !strings.Contains(log, "Incompatible Slurm plugin") {
			t.Errorf("slurmd's log does not say it skipped the plugin:\n%s", log)
		}
		out, code := c.check(t, node)
		t.Logf("persyst check:\n%s", out)
		for _, want := range []string{
			fmt.Sprintf("was built for Slurm %s; slurmd is %s and skips it", other.Series(), rel.Series()),
			fmt.Sprintf("install persyst's package built for Slurm %s", rel.Series()),
			fmt.Sprintf("1 job Slurm ran here since the daemon started never announced by the plugin (latest: job %d)", id),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("persyst check does not say %q:\n%s", want, out)
			}
		}
		if code != 1 {
			t.Errorf("persyst check exited %d, want 1:\n%s", code, out)
		}
		c.run(t, nil, "scancel", strconv.FormatUint(uint64(id), 10))
	})

	t.Run("the right plugin", func(t *testing.T) {
		c := startCluster(t, 1)
		id := c.sbatch(t, nil, "-o", "/dev/null", "--wrap", "true")
		c.waitDone(t, id, time.Minute)
		out, code := c.check(t, c.nodes[0])
		t.Logf("persyst check:\n%s", out)
		if code != 0 || strings.Contains(out, "FAIL") || strings.Contains(out, "warn ") {
			t.Errorf("persyst check on a working node exited %d:\n%s", code, out)
		}
		for _, want := range []string{"ok    plugin", "ok    daemon", "every job Slurm ran here since the daemon started was announced", "persyst works on this node"} {
			if !strings.Contains(out, want) {
				t.Errorf("persyst check does not say %q:\n%s", want, out)
			}
		}
	})
}

// slurmRelease is the release of the Slurm installed here.
func slurmRelease(t *testing.T) slurmver.Release {
	t.Helper()
	if r := skipReason(); r != "" {
		t.Skip("integration test skipped: " + r)
	}
	out, err := exec.Command("slurmd", "-V").Output()
	if err != nil {
		t.Fatalf("slurmd -V: %v", err)
	}
	rel, err := slurmver.Parse(string(out))
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// buildStubPlugin compiles a SPANK plugin named persyst that does nothing, for release
// rel (Slurm's headers would set plugin_version to the installed release).
func buildStubPlugin(t *testing.T, path string, rel slurmver.Release) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "stub.c")
	code := fmt.Sprintf("const char plugin_name[] = \"persyst\";\nconst char plugin_type[] = \"spank\";\n"+
		"const unsigned int plugin_version = %#x;\nconst unsigned int spank_plugin_version = 1;\n", rel.Number())
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-o", path, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	// slurmd refuses nothing for the mode, but persyst check does: root's, not writable.
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
}

// check runs `persyst check` as root on node, in its slurmd's namespaces (its host name,
// network and the mount that gives the plugin's socket= path the node's daemon), and
// returns its output and exit code.
func (c *cluster) check(t *testing.T, node string) (string, int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "run", "slurmd-"+node+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	// -r: the root of slurmd (a pristine root's chroot, where the package is installed),
	// which entering its mount namespace alone would leave for the namespace's.
	out, errOut, err := c.run(t, nil, "nsenter", "-t", pid, "-m", "-u", "-n", "-r",
		persystBin(), "check", "--config", filepath.Join(c.dir, "etc/persyst.conf"))
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("persyst check: %v\n%s", err, errOut)
	}
	return out, code
}
