package slurmver

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReleaseRecipe walks docs/development.md's "Adding a Slurm release" for the releases
// of Tested, as far as it can be checked without a cluster: each has its recorded answers
// in jobmap/testdata (which jobmap's TestRecordedReleases reads through the sources of that
// release), its Debian release is the one scripts/test.sh runs the tests in and
// scripts/fresh-check.sh makes a root of, the newest runs on the virtual node
// (scripts/vm.sh, and scripts/test.sh's case for it), and the guide names them.
func TestReleaseRecipe(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	testSh, freshSh, vmSh, guide := read("scripts/test.sh"), read("scripts/fresh-check.sh"), read("scripts/vm.sh"), read("docs/development.md")
	if !strings.Contains(guide, "## Adding a Slurm release") {
		t.Error(`docs/development.md has no section "Adding a Slurm release"`)
	}
	var suites []string
	for i, d := range Tested {
		series := d.Slurm.Series()
		if i > 0 && d.Slurm.CompareSeries(Tested[i-1].Slurm) <= 0 {
			t.Errorf("Tested: Slurm %s comes after %s: keep it oldest first", series, Tested[i-1].Slurm.Series())
		}
		suites = append(suites, d.Suite)
		if _, err := os.Stat(filepath.Join("..", "jobmap", "testdata", "slurm-"+series, "truth.txt")); err != nil {
			t.Errorf("Slurm %s: no recorded answers (%v): SUITE=%s scripts/fresh-check.sh record-slurm, then copy them to jobmap/testdata/slurm-%s/", series, err, d.Suite, series)
		}
		if !slices.Contains(caseOf(t, freshSh, "fresh-check.sh"), d.Suite) {
			t.Errorf("scripts/fresh-check.sh does not accept SUITE=%s (Slurm %s)", d.Suite, series)
		}
		for _, w := range []string{series, d.Suite} {
			if !strings.Contains(guide, w) {
				t.Errorf("docs/development.md does not name %s (Slurm %s of Debian's %s)", w, series, d.Suite)
			}
		}
	}
	m := regexp.MustCompile(`\$\{PERSYST_SUITES:-([a-z ]+)\}`).FindStringSubmatch(testSh)
	if m == nil {
		t.Fatal("scripts/test.sh: no ${PERSYST_SUITES:-...}")
	}
	if diff := cmp.Diff(suites, strings.Fields(m[1])); diff != "" {
		t.Errorf("scripts/test.sh's PERSYST_SUITES are not the Debian releases of slurmver.Tested (-Tested +test.sh):\n%s", diff)
	}
	vm := caseOf(t, vmSh, "vm.sh")
	if newest := Tested[len(Tested)-1].Suite; !slices.Contains(vm, newest) {
		t.Errorf("scripts/vm.sh does not boot the newest release's node (SUITE=%s)", newest)
	}
	if diff := cmp.Diff(vm, caseOf(t, testSh, "test.sh")); diff != "" {
		t.Errorf("scripts/test.sh runs the virtual node for other releases than scripts/vm.sh boots (-vm.sh +test.sh):\n%s", diff)
	}
}

// caseOf is the Debian releases of the first case on the suite in script (`case "$SUITE"
// in trixie | forky)`).
func caseOf(t *testing.T, script, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`case "\$(?:SUITE|suite)" in\s+([a-z]+(?: \| [a-z]+)*)\)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("scripts/%s: no case of Debian releases", name)
	}
	return strings.Split(m[1], " | ")
}
