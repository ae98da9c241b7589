//go:build linux || darwin

package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// The C API (cmd/libredrafter, redrafter.h) as an app sees it: the library
// built shared and static, the header compiled as C99 and C++, the exported
// symbols against the header's functions, and tests/c/redrafter_test.c run
// against each build and once under AddressSanitizer. It needs gcc and g++,
// as the race detector in `make test` needs a C compiler. It was written for
// darwin too (a .dylib, Mach-O symbol names, the frameworks the archive
// needs) but has only run on Linux.
func TestCLibrary(t *testing.T) {
	for _, tool := range []string{"gcc", "g++", "nm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the C library test needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "libredrafter.so")
	staticLibs := []string{"-lpthread"}
	if runtime.GOOS == "darwin" {
		so = filepath.Join(dir, "libredrafter.dylib")
		staticLibs = []string{"-framework", "CoreFoundation", "-lresolv"}
	}
	archive := filepath.Join(dir, "libredrafter.a")
	mustRun(t, "", "go", "build", "-buildmode=c-shared", "-o", so, "../cmd/libredrafter")
	mustRun(t, "", "go", "build", "-buildmode=c-archive", "-o", archive, "../cmd/libredrafter")
	const include = "../cmd/libredrafter"

	t.Run("header", func(t *testing.T) {
		for _, cc := range [][]string{{"gcc", "-x", "c", "-std=c99"}, {"g++", "-x", "c++", "-std=c++11"}} {
			mustRun(t, "", cc[0], append(cc[1:], "-Wall", "-Wextra", "-Werror", "-pedantic",
				"-I", include, "-c", "-o", os.DevNull, "c/header.c")...)
		}
	})

	t.Run("exports", func(t *testing.T) {
		want := headerFunctions(t, filepath.Join(include, "redrafter.h"))
		if len(want) < 10 {
			t.Fatalf("found only %d functions in redrafter.h: %v", len(want), want)
		}
		if got := exported(t, "-D", so); !slices.Equal(got, want) {
			t.Errorf("the shared library exports the rd_ functions\n%v\nredrafter.h declares\n%v", got, want)
		}
		if got := exported(t, "", archive); !slices.Equal(got, want) {
			t.Errorf("libredrafter.a defines the rd_ functions\n%v\nredrafter.h declares\n%v", got, want)
		}
	})

	expected := expectedOutputs(t)
	wrongHead := wrongDraftHead(t)
	args := []string{stories, storiesHead, wrongHead, expected}
	cflags := []string{"-std=c99", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-I", include}

	t.Run("shared", func(t *testing.T) {
		exe := filepath.Join(dir, "test-shared")
		mustRun(t, "", "gcc", append(cflags, "-o", exe, "c/redrafter_test.c", "-L", dir, "-lredrafter", "-lpthread", "-Wl,-rpath,"+dir)...)
		runC(t, nil, exe, args...)
	})
	t.Run("static", func(t *testing.T) {
		exe := filepath.Join(dir, "test-static")
		mustRun(t, "", "gcc", append(append(cflags, "-o", exe, "c/redrafter_test.c", archive), staticLibs...)...)
		runC(t, nil, exe, args...)
	})
	// AddressSanitizer instruments the C side (the test program; the Go
	// library's C allocations go through its malloc) and LeakSanitizer checks
	// at exit that everything the library handed out was freed. The Go heap
	// is not malloc'd, so LSan neither reports nor scans it; no suppressions
	// are needed. A planted leak (a result's text never rd_free'd, or the
	// library not freeing a callback's piece) fails this run: see
	// docs/EMBEDDING.md.
	t.Run("asan", func(t *testing.T) {
		exe := filepath.Join(dir, "test-asan")
		mustRun(t, "", "gcc", append(cflags, "-g", "-fsanitize=address", "-fno-omit-frame-pointer",
			"-o", exe, "c/redrafter_test.c", "-L", dir, "-lredrafter", "-lpthread", "-Wl,-rpath,"+dir)...)
		options := "ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:exitcode=23"
		if runtime.GOOS == "darwin" {
			options = "ASAN_OPTIONS=halt_on_error=1:exitcode=23" // Apple's ASan may lack LeakSanitizer
		}
		runC(t, []string{options}, exe, args...)
	})
}

// mustRun runs a build step and fails the test with its output if it fails.
func mustRun(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// runC runs the C test program, which prints "ok" when every check passed.
func runC(t *testing.T, env []string, exe string, args ...string) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil || strings.TrimSpace(stdout.String()) != "ok" {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(exe), err, stdout.String(), stderr.String())
	}
}

// headerFunctions lists the functions redrafter.h declares, sorted.
func headerFunctions(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	decl := regexp.MustCompile(`(?m)^(?:rd_status|void)\s+(rd_\w+)\s*\(`)
	for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}

// exported lists the rd_ functions a library defines (nm flag -D for the
// dynamic symbols of a .so), sorted and without repeats.
func exported(t *testing.T, flag, lib string) []string {
	t.Helper()
	args := []string{"--defined-only", lib}
	if flag != "" {
		args = append([]string{flag}, args...)
	}
	if runtime.GOOS == "darwin" {
		args = []string{"-gU", lib} // Mach-O: external, defined; names start with _
	}
	out, err := exec.Command("nm", args...).Output()
	if err != nil {
		t.Fatalf("nm %s: %v", lib, err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[1] != "T" {
			continue
		}
		name := f[2]
		if runtime.GOOS == "darwin" {
			name = strings.TrimPrefix(name, "_")
		}
		if strings.HasPrefix(name, "rd_") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// expectedOutputs writes what the C program must reproduce into a folder:
// `redrafter generate` on the prompt, greedy, without and with the draft
// head, and a chat reply through the Go API rendered as the CLI's chat does.
func expectedOutputs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	base := []string{"generate", "--backend", "cpu", "--model", stories, "--prompt", "Once upon a time", "--max-tokens", "64"}
	for name, extra := range map[string][]string{"generate.txt": nil, "generate-drafter.txt": {"--drafter", storiesHead}} {
		out, stderr, err := runCLI(t, append(base, extra...)...)
		if err != nil {
			t.Fatalf("redrafter %v: %v\n%s", extra, err, stderr)
		}
		text, ok := strings.CutSuffix(out, "\n") // generate ends the text with a newline
		if !ok || len(text) < 50 {
			t.Fatalf("redrafter generate printed %q", out)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	e, err := redrafter.Load(stories, redrafter.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if tokenizer.DetectTemplate(e.ChatTemplate) != "" {
		t.Fatal("the demo model names a chat template; the C test's chat expects vicuna")
	}
	prompt, err := tokenizer.RenderChat("vicuna", []tokenizer.Message{
		{Role: "system", Content: "You tell stories."},
		{Role: "user", Content: "Tell me about a cat."},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Generate(context.Background(), prompt, redrafter.GenerateOptions{
		MaxTokens: 32, ParseSpecial: true, NoBOS: tokenizer.TemplateAddsBOS("vicuna"),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat.txt"), []byte(res.Text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// wrongDraftHead is a copy of the bundled draft head whose config says it
// reads a hidden state of another size: a head made for another model.
func wrongDraftHead(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(storiesHead, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "config.json" {
			fixed := strings.Replace(string(b), `"hidden_size": 64`, `"hidden_size": 32`, 1)
			if fixed == string(b) {
				t.Fatal(`the bundled head's config.json has no "hidden_size": 64`)
			}
			b = []byte(fixed)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
