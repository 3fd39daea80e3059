// Package docsection keeps the generated sections of the docs in step with the code: a
// section lies between two marker lines, and the tests that own it check it (or, with
// -update, rewrite it).
package docsection

import (
	"os"
	"strings"
	"testing"
)

// Check compares the section of the file at path between the lines begin and end with
// want. With update it rewrites the section instead; regenerate says how to run that.
func Check(t testing.TB, path, begin, end, want string, update bool, regenerate string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", path, begin, end)
	}
	if doc[i+len(begin):j] == want {
		return
	}
	if update {
		if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not in step with the code: run %s", path, regenerate)
}
