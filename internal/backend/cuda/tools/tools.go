// Package tools finds what the CUDA checks run without a GPU: clang-16,
// which compiles the kernels to PTX, and NVIDIA's ptxas and libcuda.so.1,
// which scripts/install-cuda-tools.sh unpacks into .cache/cuda-tools at the
// repository root (scripts/deps.sh runs it). For tests and the PTX
// generator only.
package tools

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// Clang is the compiler of the checked-in PTX. It is one version exactly:
// the test that regenerates the PTX must get the same bytes.
const Clang = "clang-16"

// ClangArgs compile one .cu file to PTX for sm_80 (PTX ISA 7.0, which the
// driver's JIT takes on every GPU since Ampere) with clang's own CUDA
// support: no CUDA headers or libdevice. Contraction is off so that the GPU
// rounds where the source says, as the emulator does.
var ClangArgs = []string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib",
	"--cuda-feature=+ptx70", "-O3", "-ffp-contract=off", "-S"}

// ErrMissing says a tool is not installed, and how to install it.
var ErrMissing = errors.New("run scripts/install-cuda-tools.sh (scripts/deps.sh runs it)")

// Root is the repository root (the directory holding go.mod): the one the
// package was compiled in, or, for a test binary built on one machine and
// run in a checkout on another (scripts/cuda-device-check.sh), the one
// above the working directory.
func Root() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("tools: cannot locate the source tree")
	}
	if dir, ok := moduleAbove(filepath.Dir(file)); ok {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	if dir, ok := moduleAbove(wd); ok {
		return dir, nil
	}
	return "", errors.New("tools: no go.mod above " + filepath.Dir(file) + " or " + wd)
}

func moduleAbove(dir string) (string, bool) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func cached(rel string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, ".cache", "cuda-tools", rel)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("tools: no %s: %w", p, ErrMissing)
	}
	return p, nil
}

// Ptxas is the path of NVIDIA's PTX assembler.
func Ptxas() (string, error) { return cached("bin/ptxas") }

// LibCUDA is the path of NVIDIA's unpacked driver library.
func LibCUDA() (string, error) { return cached("lib/libcuda.so.1") }

// ClangPath is the path of clang-16.
func ClangPath() (string, error) {
	p, err := exec.LookPath(Clang)
	if err != nil {
		return "", fmt.Errorf("tools: no %s on PATH: %w", Clang, ErrMissing)
	}
	return p, nil
}

// CompilePTX compiles the .cu file at path (its includes beside it) to PTX.
func CompilePTX(path string) ([]byte, error) {
	clang, err := ClangPath()
	if err != nil {
		return nil, err
	}
	args := append(append([]string{}, ClangArgs...), path, "-o", "-")
	cmd := exec.Command(clang, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", Clang, filepath.Base(path), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Need returns the tool at path, or skips the test with why it is missing:
// except under CI (CI set), where a missing tool fails the test, since
// scripts/deps.sh installs them and a skipped check is not a pass.
func Need(tb interface {
	Helper()
	Skipf(string, ...any)
	Fatalf(string, ...any)
}, find func() (string, error)) string {
	tb.Helper()
	path, err := find()
	if err != nil {
		if envvar.CI.Get() != "" {
			tb.Fatalf("%v (CI is set: the CUDA checks must run)", err)
		}
		tb.Skipf("SKIPPED, NOT PASSED: %v", err)
	}
	return path
}
