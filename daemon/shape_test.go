package daemon

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Limits that keep the node daemon's code one a newcomer can change (docs/development.md):
// a function reads in one screen or two, a type does one thing.
const (
	maxFuncLines   = 80
	maxTypeMethods = 20
)

// TestDaemonShape: no function of the daemon's code (daemon/ and its packages, tests
// aside) is longer than maxFuncLines, and no type has more than maxTypeMethods methods.
func TestDaemonShape(t *testing.T) {
	fset := token.NewFileSet()
	methods := map[string]int{} // "dir.Type" → methods
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fn.Name.Name
			if recv := receiver(fn); recv != "" {
				name = recv + "." + name
				methods[filepath.Dir(p)+"."+recv]++
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines long, more than %d: split it by stage", p, name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(methods) == 0 {
		t.Fatal("no methods found: the walk read nothing")
	}
	for typ, n := range methods {
		if n > maxTypeMethods {
			t.Errorf("%s has %d methods, more than %d: give a resource of it a type of its own", typ, n, maxTypeMethods)
		}
	}
}

// receiver is the name of fn's receiver type ("": a function).
func receiver(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok { // a generic type
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
