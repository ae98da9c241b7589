package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/seed9b8f47b1/redrafter"

// A layer is a set of folders; rules say which layers each may import.
// docs/ARCHITECTURE.md draws the same picture.
type layer string

const (
	leaf     layer = "leaf"     // internal/{graph,quant,sample,hostmath,envvar,apihooks,hub}: import nothing of ours
	support  layer = "support"  // internal/testenv: what tests share; leaves only
	backend  layer = "backend"  // internal/backend/...: leaves and backends
	register layer = "register" // backend/{metal,cuda}: the public registrations, over their backend
	model    layer = "model"    // internal/model/...: leaves and model
	api      layer = "api"      // the module root, package redrafter
	tool     layer = "tool"     // internal/tools/...: the API, model and leaves, never a backend
	service  layer = "service"  // internal/server/: the API, model and leaves, never a backend (as tools)
	program  layer = "program"  // cmd/... and internal/cmd/... (developer programs): anything
	suite    layer = "suite"    // tests/: anything (end-to-end tests)
)

var mayImport = map[layer][]layer{
	leaf:     {},
	support:  {leaf},
	backend:  {leaf, backend},
	register: {backend},
	model:    {leaf, model},
	api:      {leaf, model, backend},
	tool:     {leaf, model, api},
	service:  {leaf, model, api},
	program:  {leaf, backend, register, model, api, tool, service},
	suite:    {leaf, support, backend, register, model, api, tool, service, program},
}

// layerOf places a package of the module; ok is false for a package
// outside every layer (a new top-level folder must be given one).
func layerOf(pkg string) (layer, bool) {
	if pkg == module {
		return api, true
	}
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return "", false
	}
	top, rest, _ := strings.Cut(rel, "/")
	switch top {
	case "internal":
		sub, _, _ := strings.Cut(rest, "/")
		switch sub {
		case "graph", "quant", "sample", "hostmath", "envvar", "apihooks", "hub":
			return leaf, true
		case "testenv":
			return support, true
		case "backend":
			return backend, true
		case "model":
			return model, true
		case "tools":
			return tool, true
		case "server":
			return service, true
		case "cmd":
			return program, true
		}
	case "backend":
		return register, true
	case "cmd":
		return program, true
	case "tests":
		return suite, true
	}
	return "", false
}

// imports lists the module's packages and their imports of the module (not
// test imports) for one GOOS, with an optional go list -overlay file.
func imports(t *testing.T, goos, overlay string) map[string][]string {
	t.Helper()
	args := []string{"list", "-e", "-json=ImportPath,Imports,Error"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list (GOOS=%s): %v\n%s", goos, err, stderr.String())
	}
	res := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		// A planted upward import may close a cycle, which go list
		// reports as an error of the package; its imports are still listed.
		if p.Error != nil && overlay == "" {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				res[p.ImportPath] = append(res[p.ImportPath], imp)
			}
		}
		if _, ok := res[p.ImportPath]; !ok {
			res[p.ImportPath] = nil
		}
	}
	return res
}

// violations lists every import that runs against the layers.
func violations(deps map[string][]string) []string {
	var bad []string
	for pkg, imps := range deps {
		from, ok := layerOf(pkg)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s is in no layer (give its folder one in tests/layers_test.go and docs/ARCHITECTURE.md)", pkg))
			continue
		}
		for _, imp := range imps {
			to, _ := layerOf(imp)
			if slices.Contains(mayImport[from], to) {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s (%s) imports %s (%s)", pkg, from, imp, to))
		}
	}
	slices.Sort(bad)
	return bad
}

// TestImportsFollowTheLayers checks the real import graph, for Linux and for
// macOS (Metal's files build only there).
func TestImportsFollowTheLayers(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		deps := imports(t, goos, "")
		if len(deps) < 20 {
			t.Fatalf("GOOS=%s: go list found only %d packages", goos, len(deps))
		}
		for _, v := range violations(deps) {
			t.Errorf("GOOS=%s: %s", goos, v)
		}
	}
}

// TestPlantedUpwardImportsAreCaught adds files that import upward or
// sideways, through go list's overlay (the tree is not touched), and checks
// that each is reported.
func TestPlantedUpwardImportsAreCaught(t *testing.T) {
	planted := []struct {
		dir, pkg, imp, want string
	}{
		{"internal/graph", "graph", "internal/model/llama", "internal/graph (leaf) imports " + module + "/internal/model/llama (model)"},
		{"internal/model/llama", "llama", "internal/backend/cpu", "internal/model/llama (model) imports " + module + "/internal/backend/cpu (backend)"},
		{"internal/tools/train", "train", "internal/backend/cpu/kernels", "internal/tools/train (tool) imports " + module + "/internal/backend/cpu/kernels (backend)"},
		{"internal/backend/cpu", "cpu", "", "internal/backend/cpu (backend) imports " + module + " (api)"},
		{"internal/model/drafter", "drafter", "internal/tools/bench", "internal/model/drafter (model) imports " + module + "/internal/tools/bench (tool)"},
		{"internal/server", "server", "internal/backend/cpu", "internal/server (service) imports " + module + "/internal/backend/cpu (backend)"},
		{"internal/tools/bench", "bench", "internal/server", "internal/tools/bench (tool) imports " + module + "/internal/server (service)"},
		{"internal/model/llama", "llama", "internal/server", "internal/model/llama (model) imports " + module + "/internal/server (service)"},
		{"backend/metal", "metal", "internal/graph", "backend/metal (register) imports " + module + "/internal/graph (leaf)"},
		{"internal/backend/cpu", "cpu", "backend/metal", "internal/backend/cpu (backend) imports " + module + "/backend/metal (register)"},
		{"internal/testenv", "testenv", "internal/backend/cpu", "internal/testenv (support) imports " + module + "/internal/backend/cpu (backend)"},
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range planted {
		imp := module
		if p.imp != "" {
			imp += "/" + p.imp
		}
		src := fmt.Sprintf("package %s\n\nimport _ %q\n", p.pkg, imp)
		file := filepath.Join(t.TempDir(), "planted.go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, p.dir, "zz_planted.go"): file}})
		overlay := filepath.Join(t.TempDir(), "overlay.json")
		if err := os.WriteFile(overlay, ov, 0o644); err != nil {
			t.Fatal(err)
		}
		got := violations(imports(t, "linux", overlay))
		if !slices.Contains(got, module+"/"+p.want) {
			t.Errorf("planted import %s → %s: violations %q, want %q", p.dir, imp, got, p.want)
		}
	}
}
