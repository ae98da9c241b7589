package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The docs that name code: every repository path and Go identifier they
// put in backticks must exist, so that a rename breaks this test rather
// than the reader.
var docsNamingCode = []struct {
	file             string
	minPaths, minIDs int // what the check must find, so that it cannot pass by finding nothing
}{
	{"docs/HOWTO.md", 60, 70},
	{"docs/ARCHITECTURE.md", 12, 150},
}

// repoNames is what a doc may name: the Go declarations of the module, by
// package name, and its files.
type repoNames struct {
	root     string
	decls    map[string]bool            // every declared name: funcs, methods, types, vars, consts, fields
	pkgDecls map[string]map[string]bool // package name → names declared in it
	bases    map[string]bool            // every file and directory's base name
	external map[string]bool            // packages from outside the module that it imports (sync, purego)
	symbols  map[string]bool            // names in its string literals: C and Objective-C symbols bound by name
	envvars  string                     // internal/envvar/envvar.go, which declares every REDRAFTER_* variable
}

func loadRepoNames(t *testing.T) *repoNames {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	n := &repoNames{root: root, decls: map[string]bool{}, pkgDecls: map[string]map[string]bool{}, bases: map[string]bool{},
		external: map[string]bool{}, symbols: map[string]bool{}}
	env, err := os.ReadFile(filepath.Join(root, "internal", "envvar", "envvar.go"))
	if err != nil {
		t.Fatal(err)
	}
	n.envvars = string(env)
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin") {
			return filepath.SkipDir
		}
		n.bases[name] = true
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		n.addFile(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *repoNames) addFile(f *ast.File) {
	pkg := n.pkgDecls[f.Name.Name]
	if pkg == nil {
		pkg = map[string]bool{}
		n.pkgDecls[f.Name.Name] = pkg
	}
	add := func(id *ast.Ident) {
		if id != nil && id.Name != "_" {
			n.decls[id.Name] = true
			pkg[id.Name] = true
		}
	}
	var fields func(fl *ast.FieldList)
	fields = func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, fd := range fl.List {
			for _, id := range fd.Names {
				add(id)
			}
			if len(fd.Names) == 0 { // embedded: named by its type
				if id, ok := ast.Unparen(fd.Type).(*ast.Ident); ok {
					add(id)
				}
			}
		}
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.HasPrefix(path, "github.com/seed9b8f47b1/redrafter") {
			n.external[pathpkg.Base(path)] = true
		}
	}
	ast.Inspect(f, func(node ast.Node) bool {
		switch x := node.(type) {
		case *ast.BasicLit:
			if v, err := strconv.Unquote(x.Value); x.Kind == token.STRING && err == nil && identRE.MatchString(v) {
				n.symbols[v] = true
			}
		case *ast.FuncDecl:
			add(x.Name)
		case *ast.TypeSpec:
			add(x.Name)
		case *ast.ValueSpec:
			for _, id := range x.Names {
				add(id)
			}
		case *ast.StructType:
			fields(x.Fields)
		case *ast.InterfaceType:
			fields(x.Methods)
		}
		return true
	})
}

var (
	envvarRE    = regexp.MustCompile(`^REDRAFTER_[A-Z0-9_]+$`)
	codeSpanRE  = regexp.MustCompile("`([^`]+)`")
	fenceRE     = regexp.MustCompile("(?ms)^```.*?^```")
	linkRE      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	identRE     = regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$`)
	receiverRE  = regexp.MustCompile(`^\(\*?(\w+)\)\.(\w+)$`)
	callRE      = regexp.MustCompile(`^([\w.]+)\(.*\)$`)
	pathExtRE   = regexp.MustCompile(`\.(go|md|metal|cu|cuh|h|c|s|sh|ptx|json|svg|txt|mod|sum|gguf)$`)
	notAPathRE  = regexp.MustCompile(`[<>*{}$:]|^-`)
	buildOutput = []string{".cache/", "bin/", "/tmp/", "out/"} // made by the build, not in the repository
)

// withoutFences drops fenced code blocks: commands, not names.
func withoutFences(doc string) string { return fenceRE.ReplaceAllString(doc, "") }

// checkCodeNames returns what doc names in backticks that does not exist,
// and how many paths and identifiers it checked.
func (n *repoNames) checkCodeNames(doc string) (bad []string, paths, ids int) {
	for _, m := range codeSpanRE.FindAllStringSubmatch(withoutFences(doc), -1) {
		s := strings.TrimSpace(m[1])
		if strings.ContainsAny(s, " \t\n") {
			continue // a command, a shape, an expression: not one name
		}
		switch {
		case strings.Contains(s, "/") || pathExtRE.MatchString(s):
			if notAPathRE.MatchString(s) || strings.HasPrefix(s, ".") && !strings.HasPrefix(s, "./") {
				continue // a pattern, a URL, a flag or an extension
			}
			skip := false
			for _, p := range buildOutput {
				skip = skip || strings.HasPrefix(s, p)
			}
			if skip {
				continue
			}
			paths++
			if !n.pathExists(s) {
				bad = append(bad, "path "+s)
			}
		default:
			name := s
			if c := callRE.FindStringSubmatch(name); c != nil {
				name = c[1]
			}
			if r := receiverRE.FindStringSubmatch(name); r != nil {
				name = r[1] + "." + r[2]
			}
			if n.external[strings.Split(name, ".")[0]] && strings.Contains(name, ".") {
				continue // sync.Pool: not ours to check
			}
			if !identRE.MatchString(name) || strings.ToLower(name) == name && !strings.Contains(name, ".") && !n.decls[name] && n.pkgDecls[name] == nil {
				continue // a value or a word (auto, f16, canceled), not a Go name
			}
			ids++
			if !n.identExists(name) {
				bad = append(bad, "identifier "+s)
			}
		}
	}
	return bad, paths, ids
}

// pathExists finds p relative to the repository's root or to internal/; a
// bare file name (group.go) may be anywhere in the repository.
func (n *repoNames) pathExists(p string) bool {
	p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/...")
	p = strings.TrimSuffix(p, "/")
	if !strings.Contains(p, "/") && n.bases[p] {
		return true
	}
	for _, dir := range []string{"", "internal"} {
		if _, err := os.Stat(filepath.Join(n.root, dir, filepath.FromSlash(p))); err == nil {
			return true
		}
	}
	return false
}

// identExists checks a Go name: Name, pkg.Name, Type.Member or
// pkg.Type.Member. A package's name must be followed by one it declares.
// A REDRAFTER_* name must be declared in internal/envvar; a symbol bound
// by name (MTLCreateSystemDefaultDevice) must be in a string literal.
func (n *repoNames) identExists(name string) bool {
	if envvarRE.MatchString(name) {
		return strings.Contains(n.envvars, `"`+name+`"`)
	}
	parts := strings.Split(name, ".")
	if len(parts) == 1 {
		return n.decls[name] || n.pkgDecls[name] != nil || types.Universe.Lookup(name) != nil || n.symbols[name]
	}
	if pkg := n.pkgDecls[parts[0]]; pkg != nil {
		if !pkg[parts[1]] {
			return false
		}
		parts = parts[2:]
	}
	for _, p := range parts {
		if !n.decls[p] {
			return false
		}
	}
	return true
}

// checkLinks returns the relative links of doc (a file at path) whose
// target does not exist, and how many it checked.
func checkLinks(path, doc string) (bad []string, checked int) {
	for _, m := range linkRE.FindAllStringSubmatch(withoutFences(doc), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		checked++
		if _, err := os.Stat(filepath.Join(filepath.Dir(path), filepath.FromSlash(target))); err != nil {
			bad = append(bad, m[1])
		}
	}
	return bad, checked
}

func TestDocsNameWhatExists(t *testing.T) {
	n := loadRepoNames(t)
	for _, d := range docsNamingCode {
		b, err := os.ReadFile(filepath.Join(n.root, d.file))
		if err != nil {
			t.Fatal(err)
		}
		bad, paths, ids := n.checkCodeNames(string(b))
		sort.Strings(bad)
		for _, s := range bad {
			t.Errorf("%s names %s, which the repository does not have", d.file, s)
		}
		t.Logf("%s: %d paths and %d identifiers checked", d.file, paths, ids)
		if paths < d.minPaths || ids < d.minIDs {
			t.Errorf("%s: checked %d paths and %d identifiers, want at least %d and %d: is the check still finding them?",
				d.file, paths, ids, d.minPaths, d.minIDs)
		}
	}
}

func TestDocLinksResolve(t *testing.T) {
	files := []string{"../README.md"}
	for _, pattern := range []string{"../docs/*.md", "../docs/benchmarks/*.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	total := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bad, checked := checkLinks(f, string(b))
		total += checked
		for _, l := range bad {
			t.Errorf("%s: link %s does not resolve", f, l)
		}
	}
	t.Logf("%d relative links in %d files", total, len(files))
	if len(files) < 15 || total < 60 {
		t.Errorf("checked %d links in %d files, want at least 60 in 15: is the check still finding them?", total, len(files))
	}
}

// TestPlantedBadDocNamesAreCaught runs both checks over a text with one
// bad name of each kind, and over the same text with real names.
func TestPlantedBadDocNamesAreCaught(t *testing.T) {
	n := loadRepoNames(t)
	const good = "`internal/graph/plan.go`, `graph/ops.go`, `group.go`, `graph.AllOps`, `SiLUOp.String`, " +
		"`(*Backend).step`, `graph.Open(\"auto\")`, `mustf`, `REDRAFTER_SEED`, `sync.Pool`, and [the index](README.md).\n" +
		"```\n`graph.NoSuchOp` in a fenced block is a command, not a name\n```\n"
	const planted = "`internal/graph/nosuch.go`, `graph/nosuch.go`, `nosuch.go`, `graph.NoSuchOp`, `SiLUOp.NoSuch`, " +
		"`(*Backend).nosuch`, `graph.Nosuch(\"auto\")`, `graph.AllOps.Nosuch`, `llama.AllOps`, `REDRAFTER_" + "NOSUCH`, and [a link](nosuch.md).\n"
	if bad, paths, ids := n.checkCodeNames(good); len(bad) != 0 || paths != 3 || ids != 6 {
		t.Errorf("real names: bad %q, %d paths, %d identifiers; want none bad, 3 and 6", bad, paths, ids)
	}
	if bad, checked := checkLinks("../docs/x.md", good); len(bad) != 0 || checked != 1 {
		t.Errorf("real link: bad %q, %d checked", bad, checked)
	}
	bad, paths, ids := n.checkCodeNames(planted)
	if len(bad) != 10 || paths != 3 || ids != 7 {
		t.Errorf("planted names: caught %d of 10 (%q), %d paths, %d identifiers", len(bad), bad, paths, ids)
	}
	if bad, _ := checkLinks("../docs/x.md", planted); len(bad) != 1 {
		t.Errorf("planted link: caught %q, want nosuch.md", bad)
	}
}
