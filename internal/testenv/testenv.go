// Package testenv holds the helpers that tests of several packages share: what this
// machine must have for a test (root, a kernel feature, a program), with one rule for CI,
// and a fake host filesystem under a temporary root. It imports nothing of persyst, so
// that any package's tests can use it.
//
// The rule: a test that cannot run here is skipped on a developer's machine, and fails
// where CI is set (scripts/test.sh sets it), because CI's machine has everything the
// tests need and every test must run there.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// InCI says whether the tests run in CI (the environment variable CI is set).
func InCI() bool { return os.Getenv("CI") != "" }

// Unavailable stops a test that cannot run here, for why: it fails in CI, and is skipped
// elsewhere.
func Unavailable(tb testing.TB, why string) {
	tb.Helper()
	if InCI() {
		tb.Fatal(why + " (CI is set: this test must run here)")
	}
	tb.Skip(why)
}

// Root stops the test unless it runs as root (Unavailable); why says what needs root.
func Root(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Unavailable(tb, "needs root: "+why)
	}
}

// Program stops the test unless the program name is installed (Unavailable); pkg is the
// Debian package scripts/deps.sh installs it with.
func Program(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(tb, name+" is not installed (scripts/deps.sh installs "+pkg+")")
	}
	return p
}

// Files writes files (a path under the root → its content) under a new temporary root,
// making their directories, and returns the root.
func Files(tb testing.TB, files map[string]string) string {
	tb.Helper()
	root := tb.TempDir()
	for p, c := range files {
		Write(tb, filepath.Join(root, p), c)
	}
	return root
}

// Write writes content into the file at path (0644), making its directories.
func Write(tb testing.TB, p, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Golden compares got with the golden file at path, or with update (the test's -update
// flag) writes got there first; regenerate says how to run that.
func Golden(tb testing.TB, path, got string, update bool, regenerate string) {
	tb.Helper()
	if update {
		Write(tb, path, got)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run %s to create it)", err, regenerate)
	}
	if string(want) != got {
		tb.Errorf("%s differs from what the code gives now (-want +got):\n%s\nIf the change is right: %s", path, lineDiff(string(want), got), regenerate)
	}
}

// lineDiff shows the lines of want and got that differ, with their numbers.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "%d:\n-%s\n+%s\n", i+1, wl, gl)
		}
	}
	return b.String()
}
