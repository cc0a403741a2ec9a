package gate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestGateBuildsNoDecision: every outcome the gate reports comes from judge (Decide or a
// constructor with fixed public text); the gate's own code writes no policy.Decision with fields
// and adds nothing to a reason, so no internal cause can reach what the agent reads.
func TestGateBuildsNoDecision(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, v := range decisionsBuilt(f) {
			t.Errorf("%s: %s; build it with a judge constructor", fset.Position(v.Pos()), describe(v))
		}
	}
	if n == 0 {
		t.Fatal("no source file read")
	}
}

// decisionsBuilt returns the nodes of f that build a decision: a policy.Decision literal with
// fields, or an assignment that sets a Reason or Code of anything but an audit record (rec,
// ex.rec, a journal's c) or a ticket's request (req), which copy a decision's.
func decisionsBuilt(f *ast.File) []ast.Node {
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if sel, ok := n.Type.(*ast.SelectorExpr); ok && len(n.Elts) > 0 && sel.Sel.Name == "Decision" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "policy" {
					out = append(out, n)
				}
			}
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				sel, ok := l.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Reason" && sel.Sel.Name != "Code") {
					continue
				}
				// The audit record's fields are set from a decision (ex.rec.Reason = d.Reason).
				if in, ok := sel.X.(*ast.SelectorExpr); ok && in.Sel.Name == "rec" {
					continue
				}
				if id, ok := sel.X.(*ast.Ident); ok && (id.Name == "rec" || id.Name == "c" || id.Name == "req") {
					continue
				}
				out = append(out, n)
			}
		}
		return true
	})
	return out
}

func describe(n ast.Node) string {
	if _, ok := n.(*ast.CompositeLit); ok {
		return "a policy.Decision literal"
	}
	return "an assignment to a decision's Reason or Code"
}

// TestDecisionsBuilt checks the search on made-up code, so that TestGateBuildsNoDecision cannot
// pass by finding nothing.
func TestDecisionsBuilt(t *testing.T) {
	src := `package gate
func f() {
	d := policy.Decision{Verdict: policy.Deny, Reason: "x: " + err.Error()}
	d.Reason += err.Error()
	d.Code = policy.CodeRule
	var z policy.Decision = policy.Decision{}
	ex.rec.Reason = d.Reason
	rec.Code = string(d.Code)
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(decisionsBuilt(f)); got != 3 {
		t.Errorf("found %d, want 3", got)
	}
}
