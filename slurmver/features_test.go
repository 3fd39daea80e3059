package slurmver

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/persyst/persyst/internal/testenv"
)

// TestFeatures: the table has a row for each feature, named as its identifier, oldest
// first, each with its reason; a release not known has none, as the oldest tested has
// none (the commands of a release not known are read as that one's).
func TestFeatures(t *testing.T) {
	seen := map[string]bool{}
	for f := Feature(0); f < numFeatures; f++ {
		c := changes[f]
		if c.Name == "" || !c.Since.Known() || c.Why == "" {
			t.Errorf("feature %d has no row, or one without a name, release or reason: %+v", f, c)
		}
		if seen[c.Name] {
			t.Errorf("two features are named %s", c.Name)
		}
		seen[c.Name] = true
		if f > 0 && compareRelease(c.Since, changes[f-1].Since) < 0 {
			t.Errorf("%s (%v) comes after %s (%v): keep the table oldest first", f, c.Since, f-1, changes[f-1].Since)
		}
		if c.Since.CompareSeries(NewestTested()) > 0 {
			t.Errorf("%s is of Slurm %v, newer than any persyst is tested with (%v): add that release to Tested", f, c.Since, NewestTested())
		}
	}
	for _, r := range []Release{{}, OldestTested()} {
		if got := featuresOf(r); len(got) != 0 {
			t.Errorf("Slurm %v has %v, want none", r, got)
		}
	}
}

// TestReleaseFeatures: what each release has, the tested ones and those between.
func TestReleaseFeatures(t *testing.T) {
	for _, tc := range []struct {
		rel  Release
		want []string
	}{
		{Release{}, nil},
		{Release{22, 5, 8}, nil},
		{Release{23, 2, 0}, []string{"DataParserPlugins", "SacctmgrKeepsCase"}},
		{Release{23, 11, 4}, []string{"DataParserPlugins", "SacctmgrKeepsCase"}},
		{Release{24, 5, 1}, []string{"DataParserPlugins", "SacctmgrKeepsCase"}},
		{Release{24, 11, 0}, []string{"DataParserPlugins", "SacctmgrKeepsCase", "DataParserV0042", "OutputPartlyExpanded"}},
		{Release{25, 5, 3}, []string{"DataParserPlugins", "SacctmgrKeepsCase", "DataParserV0042", "OutputPartlyExpanded"}},
		{Release{25, 11, 0}, []string{"DataParserPlugins", "SacctmgrKeepsCase", "DataParserV0042", "OutputPartlyExpanded", "OutputExpanded"}},
		{Release{26, 5, 3}, []string{"DataParserPlugins", "SacctmgrKeepsCase", "DataParserV0042", "OutputPartlyExpanded", "OutputExpanded", "SLUIDCgroups"}},
	} {
		if diff := cmp.Diff(tc.want, featuresOf(tc.rel)); diff != "" {
			t.Errorf("Slurm %v (-want +got):\n%s", tc.rel, diff)
		}
	}
	if !(Release{26, 5, 0}).Has(OutputExpanded) || (Release{25, 5, 9}).Has(OutputExpanded) {
		t.Error("Has")
	}
	if OutputExpanded.String() != "OutputExpanded" || OutputExpanded.Since() != (Release{25, 11, 0}) || OutputExpanded.Why() == "" {
		t.Errorf("OutputExpanded: %s %v %q", OutputExpanded, OutputExpanded.Since(), OutputExpanded.Why())
	}
}

// TestEveryFeatureDecides: each feature decides something in persyst's code, and no code
// outside this package decides by a release number (AtLeast) instead of by a feature.
// Tests are read too: a feature only they ask for is one they check.
func TestEveryFeatureDecides(t *testing.T) {
	root := ".."
	used := map[string]bool{}
	fset := token.NewFileSet()
	testenv.GoFiles(t, root, fset, func(rel string, f *ast.File, test bool) {
		if strings.HasPrefix(rel, "slurmver"+string(filepath.Separator)) {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "slurmver" {
				used[sel.Sel.Name] = true
			}
			if sel.Sel.Name == "AtLeast" && !test {
				t.Errorf("%s: decides by a release number (AtLeast): name the change in slurmver's table and ask rel.Has", fset.Position(sel.Pos()))
			}
			return true
		})
	})
	if len(used) == 0 {
		t.Fatal("no use of slurmver found: the walk missed the tree")
	}
	for f := Feature(0); f < numFeatures; f++ {
		if !used[f.String()] {
			t.Errorf("feature %s decides nothing (no slurmver.%s outside slurmver): remove its row, or ask for it where it matters", f, f)
		}
	}
}

func featuresOf(r Release) []string {
	var out []string
	for f := Feature(0); f < numFeatures; f++ {
		if r.Has(f) {
			out = append(out, f.String())
		}
	}
	return out
}

func compareRelease(a, b Release) int {
	if c := a.CompareSeries(b); c != 0 {
		return c
	}
	return a.Micro - b.Micro
}
