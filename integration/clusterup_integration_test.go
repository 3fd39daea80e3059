package integration

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestClusterUpFailure makes scripts/cluster.sh up fail at different steps and checks that
// it says which step failed, with the log line that tells why, and leaves no process,
// namespace or bridge behind. It judges no CPU time: beside the other such tests, on a
// cluster instance of its own.
func TestClusterUpFailure(t *testing.T) {
	defer sideBySide(t)()
	if r := skipReason(); r != "" {
		t.Skip("integration test skipped: " + r)
	}
	inst := <-instancePool()
	t.Cleanup(func() { instancePool() <- inst })
	instance := "PERSYST_CLUSTER_INSTANCE=" + strconv.Itoa(inst)
	node1 := instanceLetter(inst) + "node1" // scripts/cluster.sh names instance I's nodes
	// busy returns a port on loopback that another program (this test) listens on.
	busy := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	// A stand-in for the persyst binary that refuses to start (a fake, to make the daemon
	// step fail; the real binary is tested everywhere else).
	fake := filepath.Join(t.TempDir(), "persyst")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'fake persyst: refusing to start' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) []string
		want []string // in the output, in this order
	}{
		{"a port that is not a port", func(*testing.T) []string { return []string{"PERSYST_CTLD_PORT=99999"} },
			[]string{"PERSYST_CTLD_PORT must be a TCP port", "99999"}},
		{"slurmctld's port is taken", func(t *testing.T) []string { return []string{"PERSYST_CTLD_PORT=" + busy(t)} },
			[]string{"slurmctld exited", "up failed at step: waiting for 2 idle node(s)", "Address already in use", "stopping everything up started"}},
		{"the node daemon does not start", func(*testing.T) []string { return []string{"PERSYST_BIN=" + fake} },
			[]string{"persyst daemon of " + node1 + " did not answer", "up failed at step: starting the persyst daemon of " + node1, "fake persyst: refusing to start", "stopping everything"}},
		{"slurmrestd's port is taken", func(t *testing.T) []string { return []string{"PERSYST_RESTD_JWT_PORT=" + busy(t)} },
			[]string{"slurmrestd-jwt exited", "up failed at step: starting slurmrestd", "Address already in use", "stopping everything"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(repoRoot, "scripts/cluster.sh"), "up", "2")
			cmd.Env = append(append(os.Environ(), "ACCOUNTING=0", instance), tc.env(t)...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				down := exec.Command(filepath.Join(repoRoot, "scripts/cluster.sh"), "down")
				down.Env = append(os.Environ(), instance)
				down.Run()
				t.Fatalf("cluster up succeeded, want a failure:\n%s", out)
			}
			rest := string(out)
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks %q (after the earlier ones):\n%s", w, out)
				}
				rest = rest[i+len(w):]
			}
			nothingLeft(t, inst)
			if _, err := os.Stat(filepath.Join(instanceDir(inst), "env")); err == nil {
				t.Errorf("%s/env exists after a failed up", instanceDir(inst))
			}
		})
	}
}
