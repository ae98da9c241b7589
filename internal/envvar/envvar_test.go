package envvar

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestCount(t *testing.T) {
	const v Count = "REDRAFTER_TEST_COUNT"
	for _, c := range []struct {
		val string
		n   int
		set bool
		bad bool
	}{
		{"", 0, false, false},
		{"0", 0, true, false},
		{"7", 7, true, false},
		{"+7", 7, true, false}, // what strconv.Atoi accepts
		{"007", 7, true, false},
		{"-1", 0, false, true},
		{"x", 0, false, true},
		{" 7", 0, false, true},
		{"1.5", 0, false, true},
		{"7k", 0, false, true},
	} {
		t.Setenv(string(v), c.val)
		n, set, err := v.Get()
		if n != c.n || set != c.set || (err != nil) != c.bad {
			t.Errorf("%s=%q: Get() = %d, %v, %v; want %d, %v, error %v", v, c.val, n, set, err, c.n, c.set, c.bad)
		}
		if want := v.Name() + "=" + strconv.Quote(c.val) + ": want a non-negative integer"; c.bad && (err == nil || err.Error() != want) {
			t.Errorf("%s=%q: error %v, want %q", v, c.val, err, want)
		}
	}
	os.Unsetenv(string(v)) // t.Setenv restores it after the test
	if n, set, err := v.Get(); n != 0 || set || err != nil {
		t.Errorf("unset: Get() = %d, %v, %v", n, set, err)
	}
}

func TestSwitch(t *testing.T) {
	const v Switch = "REDRAFTER_TEST_SWITCH"
	for val, off := range map[string]bool{"off": true, "": false, "on": false, "OFF": false, "Off": false, "0": false, "false": false, " off": false} {
		t.Setenv(string(v), val)
		if v.Off() != off {
			t.Errorf("%s=%q: Off() = %v, want %v", v, val, !off, off)
		}
	}
	os.Unsetenv(string(v))
	if v.Off() {
		t.Error("unset: Off() = true")
	}
}

func TestText(t *testing.T) {
	const v Text = "REDRAFTER_TEST_TEXT"
	t.Setenv(string(v), "metal")
	if v.Get() != "metal" || v.Or("auto") != "metal" {
		t.Errorf("set: Get() = %q, Or = %q", v.Get(), v.Or("auto"))
	}
	t.Setenv(string(v), "")
	if v.Get() != "" || v.Or("auto") != "auto" {
		t.Errorf("empty: Get() = %q, Or = %q", v.Get(), v.Or("auto"))
	}
	os.Unsetenv(string(v))
	if v.Or("auto") != "auto" {
		t.Errorf("unset: Or = %q", v.Or("auto"))
	}
}

// TestDeclared checks the declarations against each other and the docs:
// every variable is declared once, under a name its doc comment gives, and
// is listed in the package doc; the REDRAFTER_* ones in README.md too.
func TestDeclared(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "envvar.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	pkgDoc := f.Doc.Text()
	seen := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			typ, _ := vs.Type.(*ast.Ident)
			if typ == nil || (typ.Name != "Text" && typ.Name != "Switch" && typ.Name != "Count") {
				t.Errorf("%s: a constant that is not a Text, Switch or Count", vs.Names[0])
				continue
			}
			name, _ := strconv.Unquote(vs.Values[0].(*ast.BasicLit).Value)
			ident := vs.Names[0].Name
			if prev, dup := seen[name]; dup {
				t.Errorf("%s is declared twice: %s and %s", name, prev, ident)
			}
			seen[name] = ident
			comment := vs.Doc.Text()
			if len(g.Specs) == 1 {
				comment = g.Doc.Text()
			}
			if !strings.HasPrefix(comment, ident+", "+name+",") && !strings.HasPrefix(comment, ident+", set by") {
				t.Errorf("%s: its doc comment should start %q", ident, ident+", "+name+", ...")
			}
			if !regexp.MustCompile(`(?m)^\t` + name + ` `).MatchString(pkgDoc) {
				t.Errorf("%s is not listed in the package doc", name)
			}
			if strings.HasPrefix(name, "REDRAFTER_") && !strings.Contains(string(readme), "`"+name+"`") {
				t.Errorf("%s is not in README.md's table", name)
			}
		}
	}
	if len(seen) < 9 {
		t.Errorf("found %d declarations, want at least 9", len(seen))
	}
}

// TestOnlyHereReadsTheEnvironment walks the module: no non-test file outside
// this package reads the environment itself, and every REDRAFTER_* name in
// any Go file (tests' too) is listed in the package doc.
func TestOnlyHereReadsTheEnvironment(t *testing.T) {
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	pkgDoc := ""
	if f, err := parser.ParseFile(fset, "envvar.go", nil, parser.ParseComments); err != nil {
		t.Fatal(err)
	} else {
		pkgDoc = f.Doc.Text()
	}
	names := regexp.MustCompile(`\bREDRAFTER_[A-Z0-9_]*[A-Z0-9]\b`)
	files := 0
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "../.." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		if abs, _ := filepath.Abs(path); filepath.Dir(abs) == self {
			return nil // TestDeclared checks this package
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range names.FindAllString(string(src), -1) {
			if !strings.Contains(pkgDoc, "\t"+n+" ") {
				t.Errorf("%s: %s is not listed in package envvar's doc", path, n)
			}
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		osName := ""
		for _, im := range f.Imports {
			if im.Path.Value == `"os"` {
				osName = "os"
				if im.Name != nil {
					osName = im.Name.Name
				}
			}
		}
		if osName == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == osName {
				switch sel.Sel.Name {
				case "Getenv", "LookupEnv", "Environ", "ExpandEnv":
					t.Errorf("%s: os.%s: read the variable through package envvar", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Errorf("walked %d Go files; is the test running from internal/envvar/?", files)
	}
}
