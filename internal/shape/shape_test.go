package shape

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/persyst/persyst/internal/testenv"
)

// Limits that keep persyst's code one a newcomer can change (docs/development.md): a
// function reads in one screen or two, a type does one thing, a file holds one subject,
// a command only wires packages together.
const (
	maxFuncLines    = 80
	maxCmdFuncLines = 60
	maxTypeMethods  = 20
	maxFileLines    = 800
)

// TestShape: no function of persyst's code (every package, tests and generated files
// aside) is longer than maxFuncLines (maxCmdFuncLines under cmd/), no type has more than
// maxTypeMethods methods, and no file is longer than maxFileLines.
func TestShape(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	methods := map[string]int{} // "dir.Type" → methods
	files := 0
	testenv.GoFiles(t, root, fset, func(rel string, f *ast.File, test bool) {
		if test {
			return
		}
		files++
		if n := fset.Position(f.End()).Line; n > maxFileLines {
			t.Errorf("%s is %d lines long, more than %d: give a type or a stage a file of its own", rel, n, maxFileLines)
		}
		limit := maxFuncLines
		if strings.HasPrefix(rel, "cmd"+string(filepath.Separator)) {
			limit = maxCmdFuncLines
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fn.Name.Name
			if recv := receiver(fn); recv != "" {
				name = recv + "." + name
				methods[filepath.Dir(rel)+"."+recv]++
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > limit {
				t.Errorf("%s: %s is %d lines long, more than %d: split it by stage", rel, name, n, limit)
			}
		}
	})
	if files < 100 || len(methods) == 0 {
		t.Fatalf("read %d files and %d types with methods: the walk missed the tree", files, len(methods))
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
	if g, ok := t.(*ast.IndexListExpr); ok { // a generic type of several parameters
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
