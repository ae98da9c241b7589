// Package tools finds what the CUDA checks run without a GPU: clang-16,
// which compiles the kernels to PTX, and NVIDIA's ptxas and libcuda.so.1,
// which scripts/install-cuda-tools.sh unpacks into .cache/cuda-tools at the
// repository root (scripts/deps.sh runs it). For tests and the PTX
// generator only.
package tools

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
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

// PTXSumsFile is the file under the shaders' ptx/ in which the generator
// records, for each .cu file, a sum of what clang compiled (ClangArgs,
// prelude.cuh and the file) and of the PTX it wrote (PTXSum): make test
// checks that the checked-in PTX was generated from the sources as they
// are by comparing sums, in milliseconds; make test-all compiles them again
// and compares the PTX itself (a minute and a half of clang on 2 cores).
const PTXSumsFile = "SUMS"

// PTXSum is a .cu file's line of PTXSumsFile.
func PTXSum(name string, cu, prelude, ptx []byte) string {
	in := sha256.New()
	in.Write([]byte(strings.Join(ClangArgs, " ")))
	for _, b := range [][]byte{prelude, cu} {
		fmt.Fprintf(in, "\x00%d\x00", len(b))
		in.Write(b)
	}
	out := sha256.Sum256(ptx)
	return fmt.Sprintf("%x %x %s\n", in.Sum(nil), out, name)
}

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

// MaxSharedBytes is the static shared memory a kernel may use on every GPU
// targeted (48 KiB without opting in).
const MaxSharedBytes = 48 << 10

// PtxasKernel is what ptxas -v reports of one kernel.
type PtxasKernel struct {
	SpillBytes  int // register spill stores and loads
	SharedBytes int // static shared memory
}

var (
	ptxasFunctionRE = regexp.MustCompile(`Compiling entry function '([A-Za-z0-9_]+)' for '(sm_[0-9]+)'`)
	ptxasSpillRE    = regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	ptxasSmemRE     = regexp.MustCompile(`Used (\d+) registers, (\d+) bytes smem`)
)

// PtxasReport runs ptxas -v on ptx for arch and returns what it reports of
// each kernel.
func PtxasReport(ptxas string, ptx []byte, arch string) (map[string]PtxasKernel, error) {
	cmd := exec.Command(ptxas, "-v", "--gpu-name", arch, "-o", "/dev/null", "-")
	cmd.Stdin = bytes.NewReader(ptx)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ptxas %s: %v\n%s", arch, err, out)
	}
	rep := map[string]PtxasKernel{}
	cur := ""
	for _, line := range bytes.Split(out, []byte("\n")) {
		if m := ptxasFunctionRE.FindSubmatch(line); m != nil {
			cur = string(m[1])
			rep[cur] = PtxasKernel{}
		} else if m := ptxasSpillRE.FindSubmatch(line); m != nil && cur != "" {
			st, _ := strconv.Atoi(string(m[1]))
			ld, _ := strconv.Atoi(string(m[2]))
			r := rep[cur]
			r.SpillBytes += st + ld
			rep[cur] = r
		} else if m := ptxasSmemRE.FindSubmatch(line); m != nil && cur != "" {
			r := rep[cur]
			r.SharedBytes, _ = strconv.Atoi(string(m[2]))
			rep[cur] = r
		}
	}
	return rep, nil
}

// PtxasProblems assembles ptx for arch and returns, for the kernels named,
// each one ptxas did not report, that spills registers or that uses more
// shared memory than MaxSharedBytes; err is ptxas refusing the PTX.
func PtxasProblems(ptxas string, ptx []byte, arch string, kernels []string) ([]string, error) {
	rep, err := PtxasReport(ptxas, ptx, arch)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, k := range kernels {
		r, ok := rep[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("ptxas reported nothing for kernel %s", k))
		case r.SpillBytes > 0:
			problems = append(problems, fmt.Sprintf("kernel %s spills %d bytes of registers", k, r.SpillBytes))
		case r.SharedBytes > MaxSharedBytes:
			problems = append(problems, fmt.Sprintf("kernel %s uses %d bytes of shared memory (limit %d)", k, r.SharedBytes, MaxSharedBytes))
		}
	}
	return problems, nil
}
