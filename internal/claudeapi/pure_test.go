package claudeapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPure: the package does no I/O and starts no goroutines. net/http is imported
// for its Header type only.
func TestPure(t *testing.T) {
	forbidden := map[string]bool{"os": true, "os/exec": true, "net": true, "syscall": true, "log": true,
		"log/slog": true, "io/ioutil": true, "io/fs": true, "time": true, "math/rand": true, "unsafe": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if forbidden[p] {
				t.Errorf("%s imports %s", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: a go statement", fset.Position(g.Pos()))
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
