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

// The backends sit side by side: internal/backend/{cpu,metal,cuda} import
// none of each other, and what they share (internal/backend/emu, opcases)
// imports none of them, except in tests. Where one needs another's work
// (the Metal fake device's reference, the self-tests' reference), the
// caller passes it in as a graph.Backend.
var specificBackends = []string{"cpu", "metal", "cuda"}

// sidewaysAllowed are the sideways imports not yet removed, each a debt
// with its reason ("from -> to": "why"). It is empty, and stays so.
var sidewaysAllowed = map[string]string{}

// backendOf returns the specific backend a package belongs to ("" for a
// shared package under internal/backend/), and whether it is under
// internal/backend/ at all.
func backendOf(pkg string) (string, bool) {
	rel, ok := strings.CutPrefix(pkg, module+"/internal/backend/")
	if !ok {
		return "", false
	}
	top, _, _ := strings.Cut(rel, "/")
	if slices.Contains(specificBackends, top) {
		return top, true
	}
	return "", true
}

// sideways lists the imports of one backend by another, or of a specific
// backend by a shared package, that sidewaysAllowed does not name.
func sideways(deps map[string][]string) []string {
	var bad []string
	for pkg, imps := range deps {
		from, ok := backendOf(pkg)
		if !ok {
			continue
		}
		for _, imp := range imps {
			to, ok := backendOf(imp)
			if !ok || to == "" || to == from {
				continue
			}
			edge := strings.TrimPrefix(pkg, module+"/") + " -> " + strings.TrimPrefix(imp, module+"/")
			if _, ok := sidewaysAllowed[edge]; ok {
				continue
			}
			bad = append(bad, edge)
		}
	}
	slices.Sort(bad)
	return bad
}

// TestImportsKeepBackendsSideBySide checks the real import graph, for
// Linux and for macOS.
func TestImportsKeepBackendsSideBySide(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		for _, v := range sideways(imports(t, goos, "")) {
			t.Errorf("GOOS=%s: sideways import %s", goos, v)
		}
	}
}

// TestPlantedSidewaysImportsAreCaught adds files that import sideways,
// through go list's overlay (the tree is not touched), and checks that
// each is reported.
func TestPlantedSidewaysImportsAreCaught(t *testing.T) {
	planted := []struct{ dir, pkg, imp string }{
		{"internal/backend/cuda", "cuda", "internal/backend/metal/shaders"},
		{"internal/backend/cuda/emu", "emu", "internal/backend/metal/emu"},
		{"internal/backend/metal", "metal", "internal/backend/cuda"},
		{"internal/backend/cpu", "cpu", "internal/backend/metal/shaders"},
		{"internal/backend/emu", "emu", "internal/backend/cuda/shaders"},
		{"internal/backend/opcases", "opcases", "internal/backend/metal"},
		// The two debts paid off: the Metal fake device's reference and
		// the self-test's.
		{"internal/backend/metal", "metal", "internal/backend/cpu"},
		{"internal/backend/opcases", "opcases", "internal/backend/cpu"},
		{"internal/backend/metal/metalcheck", "metalcheck", "internal/backend/cpu"},
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range planted {
		src := fmt.Sprintf("package %s\n\nimport _ %q\n", p.pkg, module+"/"+p.imp)
		file := filepath.Join(t.TempDir(), "planted.go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, p.dir, "zz_planted.go"): file}})
		overlay := filepath.Join(t.TempDir(), "overlay.json")
		if err := os.WriteFile(overlay, ov, 0o644); err != nil {
			t.Fatal(err)
		}
		want := p.dir + " -> " + p.imp
		if got := sideways(imports(t, "linux", overlay)); !slices.Contains(got, want) {
			t.Errorf("planted import %s: sideways imports %q, want %q", want, got, want)
		}
	}
}

// testOnly are the path elements of packages that exist for tests and
// developers: the kernel emulators and their harnesses, testenv, the op
// cases and the GPU self-tests over them (run by internal/cmd/gpucheck).
// A package whose name ends in "fake" is one too.
var testOnly = []string{"emu", "metaltest", "cudatest", "testenv", "opcases", "metalcheck", "cudacheck"}

// TestProgramsLinkNoTestSupport checks that the two programs link no
// emulator, test harness, fake device package, op cases, self-test or
// testenv, on Linux, on macOS and with the cuda tag.
func TestProgramsLinkNoTestSupport(t *testing.T) {
	for _, env := range [][]string{{"GOOS=linux"}, {"GOOS=darwin", "CGO_ENABLED=0"}, {"GOOS=linux", "-tags=cuda"}} {
		args := []string{"list", "-deps"}
		var vars []string
		for _, e := range env {
			if strings.HasPrefix(e, "-") {
				args = append(args, e)
			} else {
				vars = append(vars, e)
			}
		}
		cmd := exec.Command("go", append(args, "./cmd/redrafter", "./cmd/libredrafter")...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), vars...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v\n%s", env, err, stderr.String())
		}
		for _, pkg := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(pkg, module+"/")
			if !ok {
				continue
			}
			for _, elem := range strings.Split(rel, "/") {
				if slices.Contains(testOnly, elem) || strings.HasSuffix(elem, "fake") {
					t.Errorf("%v: the programs link %s, a package for tests", env, pkg)
				}
			}
		}
	}
}
