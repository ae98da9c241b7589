package redrafter

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is this module's path: the API must name none of its other
// packages, which are internal (a user cannot import them).
const module = "github.com/seed9b8f47b1/redrafter"

// The public API leaks nothing: no exported name of package redrafter (a
// field, a parameter or result of a function or method, a method of an
// exported interface, an embedded type, a variable or constant) mentions a
// type from another package of this module.
func TestAPINamesNoInternalType(t *testing.T) {
	imp := exportImporter(t)
	pkg, err := imp.Import(module)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range apiLeaks(pkg) {
		t.Error(l)
	}
}

// The check finds a planted leak of each kind, and passes a clean package.
func TestAPILeakPlanted(t *testing.T) {
	imp := exportImporter(t)
	const header = "package api\nimport \"" + module + "/internal/model/tokenizer\"\nvar _ tokenizer.Tokenizer\n"
	for _, c := range []struct {
		name, src string
		leaks     int
	}{
		{"clean", "type T struct{ N int; t tokenizer.Tokenizer }\nfunc (T) F(s []string) error { return nil }\nfunc (T) g() tokenizer.Tokenizer { return nil }", 0},
		{"field", "type T struct{ Tok tokenizer.Tokenizer }", 1},
		{"embedded", "type T struct{ *tokenizer.Vocab }", 1},
		{"parameter", "func F(m []tokenizer.Message) {}", 1},
		{"result", "func F() (map[string]*tokenizer.Vocab, error) { return nil, nil }", 1},
		{"method", "type T struct{}\nfunc (*T) Tok() tokenizer.Tokenizer { return nil }", 1},
		{"interface", "type I interface{ Tok() func(tokenizer.Message) }", 1},
		{"variable", "var V tokenizer.Message", 1},
		{"through an unexported type", "type t struct{ V tokenizer.Vocab }\nfunc F() t { return t{} }", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "api.go", header+c.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			pkg, err := (&types.Config{Importer: imp}).Check(module+"/api", fset, []*ast.File{f}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := apiLeaks(pkg); len(got) != c.leaks {
				t.Errorf("found %d leaks, want %d: %q", len(got), c.leaks, got)
			}
		})
	}
}

// exportImporter imports this module's packages from the compiler's export
// data, as `go list -export` builds it.
func exportImporter(t *testing.T) types.Importer {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	export := map[string]string{}
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			export[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})
}

// apiLeaks lists the exported names of pkg whose types mention a type of
// another package of this module.
func apiLeaks(pkg *types.Package) []string {
	var leaks []string
	seen := map[*types.Named]bool{} // unexported types of pkg already walked
	// check reports the internal types that typ mentions, as what.
	var check func(what string, typ types.Type)
	check = func(what string, typ types.Type) {
		switch u := typ.(type) {
		case *types.Named:
			obj := u.Obj()
			switch p := obj.Pkg(); {
			case p == nil:
			case p != pkg && strings.HasPrefix(p.Path()+"/", module+"/"):
				leaks = append(leaks, fmt.Sprintf("%s: %s", what, types.TypeString(typ, nil)))
			case p == pkg && !obj.Exported() && !seen[u]:
				// An unexported type's exported fields and methods are
				// reachable through the exported name that returns it.
				seen[u] = true
				walkNamed(what, u, check)
			}
			for a := range u.TypeArgs().Types() {
				check(what, a)
			}
		case *types.Alias:
			check(what, types.Unalias(u))
		case *types.Pointer:
			check(what, u.Elem())
		case *types.Slice:
			check(what, u.Elem())
		case *types.Array:
			check(what, u.Elem())
		case *types.Chan:
			check(what, u.Elem())
		case *types.Map:
			check(what, u.Key())
			check(what, u.Elem())
		case *types.Signature:
			for v := range u.Params().Variables() {
				check(what+" parameter", v.Type())
			}
			for v := range u.Results().Variables() {
				check(what+" result", v.Type())
			}
		case *types.Struct:
			for f := range u.Fields() {
				if f.Exported() || f.Embedded() {
					check(what+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for m := range u.Methods() {
				if m.Exported() {
					check(what+"."+m.Name(), m.Type())
				}
			}
			for e := range u.EmbeddedTypes() {
				check(what+" embeds", e)
			}
		}
	}
	scope := pkg.Scope()
	names := scope.Names()
	slices.Sort(names)
	for _, name := range names {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.TypeName:
			if n, ok := o.Type().(*types.Named); ok {
				walkNamed(name, n, check)
			} else {
				check(name, o.Type())
			}
		default: // funcs, variables, constants
			check(name, o.Type())
		}
	}
	return leaks
}

// walkNamed checks a named type's underlying type and its exported methods.
func walkNamed(name string, n *types.Named, check func(string, types.Type)) {
	check(name, n.Underlying())
	if _, isInterface := n.Underlying().(*types.Interface); isInterface {
		return // its methods are the underlying interface's
	}
	for m := range n.Methods() {
		if m.Exported() {
			check(name+"."+m.Name(), m.Type())
		}
	}
}
