package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stopping are the methods of testing.T, B and TB that end the test by
// runtime.Goexit. Called on another goroutine they end that goroutine
// only: the test goes on, or waits forever for what the goroutine would
// have sent (the testing package's documentation forbids it).
var stopping = map[string]bool{"Fatal": true, "Fatalf": true, "FailNow": true, "Skip": true, "Skipf": true, "SkipNow": true}

// TestNoFatalOffTheTestGoroutine finds, in every test file of the module
// and of tests/openai-go, a test that stops (t.Fatal, t.FailNow, t.Skip…)
// from a goroutine it started: in a `go func` literal, in a function a go
// statement starts with the test's t, or through a helper of the same
// package that stops when given t. Such goroutines report with t.Error
// and return, or send their error to the test's goroutine.
func TestNoFatalOffTheTestGoroutine(t *testing.T) {
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{} // by folder
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pkgs[filepath.Join("..", "tests", "openai-go")]; !ok {
		t.Fatalf("tests/openai-go was not searched (folders: %d)", len(pkgs))
	}
	for _, files := range pkgs {
		for _, p := range stopsOffTheTestGoroutine(fset, files) {
			t.Errorf("%s: stops the test from a goroutine it started: report with t.Error and return, or send the error to the test's goroutine", p)
		}
	}
}

// TestPlantedFatalOffTheTestGoroutineIsCaught shows the search above
// finding each form it looks for, and passing what is allowed.
func TestPlantedFatalOffTheTestGoroutineIsCaught(t *testing.T) {
	const header = "package p\n\nimport \"testing\"\n\n"
	cases := []struct {
		name, src string
		caught    int
	}{
		{"in a go func", `func TestA(t *testing.T) { go func() { t.Fatal("x") }() }`, 1},
		{"FailNow on a TB", `func h(tb testing.TB) { go func() { tb.FailNow() }() }`, 1},
		{"Skip in a benchmark", `func BenchmarkA(b *testing.B) { go func() { b.Skipf("x") }() }`, 1},
		{"nested in the goroutine", `func TestA(t *testing.T) { go func() { if true { func() { t.Fatalf("x") }() } }() }`, 1},
		{"through a helper", `func help(t *testing.T) { t.Helper(); t.Fatal("x") }
func TestA(t *testing.T) { go func() { help(t) }() }`, 1},
		{"through a helper's helper", `func help(t *testing.T) { t.Fatal("x") }
func outer(t *testing.T) int { help(t); return 1 }
func TestA(t *testing.T) { go func() { _ = outer(t) }() }`, 1},
		{"through a method", `type s struct{}
func (s) post(t *testing.T) { t.Fatal("x") }
func TestA(t *testing.T) { var v s; go func() { v.post(t) }() }`, 1},
		{"a go statement on a helper", `func help(t *testing.T) { t.Fatal("x") }
func TestA(t *testing.T) { go help(t) }`, 1},
		{"a go func given t", `func TestA(t *testing.T) { go func(t *testing.T) { t.SkipNow() }(t) }`, 1},
		{"t.Error in a goroutine", `func TestA(t *testing.T) { done := make(chan bool); go func() { t.Error("x"); done <- true }(); <-done }`, 0},
		{"t.Fatal on the test goroutine", `func TestA(t *testing.T) { err := make(chan error); go func() { err <- nil }(); if e := <-err; e != nil { t.Fatal(e) } }`, 0},
		{"a helper that only reports", `func help(t *testing.T) { t.Error("x") }
func TestA(t *testing.T) { go func() { help(t) }() }`, 0},
		{"a subtest's own t", `func TestA(t *testing.T) { t.Run("s", func(t *testing.T) { t.Fatal("x") }) }`, 0},
		{"Fatal on something else", `type f struct{}
func (f) Fatal(...any) {}
func TestA(t *testing.T) { var l f; go func() { l.Fatal("x") }() }`, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "planted_test.go", header+c.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := stopsOffTheTestGoroutine(fset, []*ast.File{f}); len(got) != c.caught {
				t.Errorf("found %v, want %d", got, c.caught)
			}
		})
	}
}

// stopsOffTheTestGoroutine returns the positions of the go statements of
// one package's files whose goroutine stops its test.
func stopsOffTheTestGoroutine(fset *token.FileSet, files []*ast.File) []string {
	helpers := stoppingHelpers(files)
	var found []string
	for _, f := range files {
		imports := importNames(f)
		ast.Inspect(f, func(n ast.Node) bool {
			g, ok := n.(*ast.GoStmt)
			if !ok {
				return true
			}
			stops := false
			if lit, ok := g.Call.Fun.(*ast.FuncLit); ok {
				stops = bodyStops(lit.Body, helpers, imports)
			} else {
				stops = callStops(g.Call, helpers, imports)
			}
			if stops {
				found = append(found, fset.Position(g.Pos()).String())
			}
			return true
		})
	}
	slices.Sort(found)
	return found
}

// stoppingHelpers returns the keys (see calleeKey) of the package's
// functions and methods that stop the test given them: they call a
// stopping method on a testing parameter, directly or through another
// such helper. Methods are known by name alone, which is enough within
// one package's tests.
func stoppingHelpers(files []*ast.File) map[string]bool {
	helpers := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, f := range files {
			imports := importNames(f)
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				k := "func " + fn.Name.Name
				if fn.Recv != nil {
					k = "method " + fn.Name.Name
				}
				if !helpers[k] && bodyStops(fn.Body, helpers, imports) {
					helpers[k] = true
					changed = true
				}
			}
		}
	}
	return helpers
}

// bodyStops reports whether body calls a stopping method on a testing
// variable, or passes one to a stopping helper. Function literals that
// declare their own testing parameter (subtests) run where their caller
// puts them and are not searched.
func bodyStops(body ast.Node, helpers map[string]bool, imports map[string]bool) bool {
	stops := false
	ast.Inspect(body, func(n ast.Node) bool {
		if stops {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return !slices.ContainsFunc(n.Type.Params.List, func(p *ast.Field) bool { return isTestingType(p.Type) })
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && stopping[sel.Sel.Name] && isTestingVar(sel.X) {
				stops = true
				return false
			}
			stops = callStops(n, helpers, imports)
		}
		return !stops
	})
	return stops
}

// callStops reports whether call passes a testing variable to a stopping
// helper.
func callStops(call *ast.CallExpr, helpers map[string]bool, imports map[string]bool) bool {
	k := calleeKey(call.Fun, imports)
	return k != "" && helpers[k] && slices.ContainsFunc(call.Args, isTestingVar)
}

// calleeKey names the function a call calls, as stoppingHelpers keys it:
// "func name" or "method name"; "" for another package's function or
// what is not a name.
func calleeKey(fun ast.Expr, imports map[string]bool) string {
	switch f := fun.(type) {
	case *ast.IndexExpr: // a generic function instantiated: decode[T](t, b)
		return calleeKey(f.X, imports)
	case *ast.IndexListExpr:
		return calleeKey(f.X, imports)
	case *ast.Ident:
		return "func " + f.Name
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok && x.Obj == nil && imports[x.Name] {
			return ""
		}
		return "method " + f.Sel.Name
	}
	return ""
}

// isTestingVar reports whether e is a name declared (as a parameter or a
// variable) of type *testing.T, *testing.B or testing.TB.
func isTestingVar(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	if !ok || id.Obj == nil {
		return false
	}
	switch d := id.Obj.Decl.(type) {
	case *ast.Field:
		return isTestingType(d.Type)
	case *ast.ValueSpec:
		return d.Type != nil && isTestingType(d.Type)
	}
	return false
}

func isTestingType(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "testing" && (sel.Sel.Name == "T" || sel.Sel.Name == "B" || sel.Sel.Name == "TB")
}

// importNames returns the names a file's imports are known by.
func importNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, imp := range f.Imports {
		if imp.Name != nil {
			names[imp.Name.Name] = true
			continue
		}
		path, _ := strconv.Unquote(imp.Path.Value) // the parser checked it
		elems := strings.Split(path, "/")
		name := elems[len(elems)-1]
		if len(elems) > 1 && isMajorVersion(name) { // math/rand/v2 is rand
			name = elems[len(elems)-2]
		}
		names[name] = true
	}
	return names
}

func isMajorVersion(elem string) bool {
	_, err := strconv.Atoi(strings.TrimPrefix(elem, "v"))
	return strings.HasPrefix(elem, "v") && err == nil
}
