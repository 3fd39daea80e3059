package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// GoFiles calls fn with each Go file of the tree below root, parsed with its comments
// into fset: every package's code and tests, not generated files, nor what lies in
// hidden or "_" directories, build/, testdata/ or node_modules/. rel is the file's path
// below root; test says it is a _test.go file. A file that does not parse fails tb.
func GoFiles(tb testing.TB, root string, fset *token.FileSet, fn func(rel string, f *ast.File, test bool)) {
	tb.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "build" || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		fn(rel, f, strings.HasSuffix(p, "_test.go"))
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}
