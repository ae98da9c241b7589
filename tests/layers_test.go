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
	leaf    layer = "leaf"    // graph, quant, sample, hostmath, envvar: import nothing of ours
	backend layer = "backend" // backend/...: leaves and backends
	model   layer = "model"   // model/...: leaves and model
	api     layer = "api"     // the module root, package redrafter
	tool    layer = "tool"    // tools/...: the API, model and leaves, never a backend
	service layer = "service" // server/: the API, model and leaves, never a backend (as tools)
	program layer = "program" // cmd/...: anything
	suite   layer = "suite"   // tests/: anything (end-to-end tests)
)

var mayImport = map[layer][]layer{
	leaf:    {},
	backend: {leaf, backend},
	model:   {leaf, model},
	api:     {leaf, model, backend},
	tool:    {leaf, model, api},
	service: {leaf, model, api},
	program: {leaf, backend, model, api, tool, service},
	suite:   {leaf, backend, model, api, tool, service, program},
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
	top, _, _ := strings.Cut(rel, "/")
	switch top {
	case "graph", "quant", "sample", "hostmath", "envvar":
		return leaf, true
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
		{"graph", "graph", "model/llama", "graph (leaf) imports " + module + "/model/llama (model)"},
		{"model/llama", "llama", "backend/cpu", "model/llama (model) imports " + module + "/backend/cpu (backend)"},
		{"tools/train", "train", "backend/cpu/kernels", "tools/train (tool) imports " + module + "/backend/cpu/kernels (backend)"},
		{"backend/cpu", "cpu", "", "backend/cpu (backend) imports " + module + " (api)"},
		{"model/drafter", "drafter", "tools/bench", "model/drafter (model) imports " + module + "/tools/bench (tool)"},
		{"server", "server", "backend/cpu", "server (service) imports " + module + "/backend/cpu (backend)"},
		{"tools/bench", "bench", "server", "tools/bench (tool) imports " + module + "/server (service)"},
		{"model/llama", "llama", "server", "model/llama (model) imports " + module + "/server (service)"},
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
