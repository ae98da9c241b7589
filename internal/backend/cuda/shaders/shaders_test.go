package shaders_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// TestPTXSums checks that the checked-in PTX was generated from the
// sources as they are: ptx/SUMS, which the generator writes, holds for
// every .cu file the sum of its inputs (clang's arguments, prelude.cuh, the
// file) and of the PTX written from them, and both still match. A .cu file
// edited without go generate fails here in make test; make test-all also
// compiles every file again (TestPTXUpToDate).
func TestPTXSums(t *testing.T) {
	recorded, err := os.ReadFile(filepath.Join("ptx", tools.PTXSumsFile))
	if err != nil {
		t.Fatalf("%v: run go generate ./internal/backend/cuda/shaders", err)
	}
	for _, msg := range checkPTXSums(string(recorded), shaders.Source, shaders.PTX) {
		t.Error(msg)
	}
}

// checkPTXSums compares the lines of ptx/SUMS with the sums of the sources
// and PTX that source and ptx return.
func checkPTXSums(recorded string, source func(string) (string, error), ptx func(string) ([]byte, error)) []string {
	var msgs []string
	prelude, err := source("prelude.cuh")
	if err != nil {
		return []string{err.Error()}
	}
	lines := map[string]bool{}
	for _, l := range strings.SplitAfter(recorded, "\n") {
		lines[l] = true
	}
	for _, f := range shaders.Files() {
		cu, err := source(f)
		if err != nil {
			msgs = append(msgs, err.Error())
			continue
		}
		p, err := ptx(f)
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("%s has no checked-in PTX: run go generate ./internal/backend/cuda/shaders", f))
			continue
		}
		if !lines[tools.PTXSum(f, []byte(cu), []byte(prelude), p)] {
			msgs = append(msgs, fmt.Sprintf("ptx/%s was not generated from %s and prelude.cuh as they are (ptx/%s): run go generate ./internal/backend/cuda/shaders",
				strings.TrimSuffix(f, ".cu")+".ptx", f, tools.PTXSumsFile))
		}
	}
	return msgs
}

// TestPTXSumsCatchEdits checks the check: a byte changed in a .cu file, in
// prelude.cuh or in a PTX file is reported.
func TestPTXSumsCatchEdits(t *testing.T) {
	recorded, err := os.ReadFile(filepath.Join("ptx", tools.PTXSumsFile))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(s string) string { return s + " " }
	for _, c := range []struct {
		name   string
		source func(string) (string, error)
		ptx    func(string) ([]byte, error)
	}{
		{"matvec.cu", func(f string) (string, error) {
			s, err := shaders.Source(f)
			if f == "matvec.cu" {
				s = edit(s)
			}
			return s, err
		}, shaders.PTX},
		{"prelude.cuh", func(f string) (string, error) {
			s, err := shaders.Source(f)
			if f == "prelude.cuh" {
				s = edit(s)
			}
			return s, err
		}, shaders.PTX},
		{"quant.ptx", shaders.Source, func(f string) ([]byte, error) {
			b, err := shaders.PTX(f)
			if f == "quant.cu" {
				b = append(b[:len(b):len(b)], ' ')
			}
			return b, err
		}},
	} {
		msgs := checkPTXSums(string(recorded), c.source, c.ptx)
		want := 1
		if c.name == "prelude.cuh" {
			want = len(shaders.Files())
		}
		if len(msgs) != want {
			t.Errorf("%s edited: %d files reported, want %d: %q", c.name, len(msgs), want, msgs)
		}
	}
}

// TestPTXUpToDate regenerates the PTX of every .cu file with clang-16 and
// fails where it differs from the checked-in (embedded) PTX. It takes a
// minute and a half of a 2-core machine's clang, so make test-all
// (REDRAFTER_TEST_FULL) runs it and make test checks ptx/SUMS instead
// (TestPTXSums).
func TestPTXUpToDate(t *testing.T) {
	if !testenv.Full() {
		t.Skip("SKIPPED, NOT PASSED: make test-all (REDRAFTER_TEST_FULL=1) compiles the PTX again; make test checks ptx/SUMS (TestPTXSums)")
	}
	tools.Need(t, tools.ClangPath)
	// One clang a file, in parallel: the files take from a second to a
	// minute each, and the package often runs alone at the end of make test.
	for _, f := range shaders.Files() {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			got, err := tools.CompilePTX(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := shaders.PTX(f)
			if err != nil {
				t.Fatalf("%s has no checked-in PTX: run go generate ./internal/backend/cuda/shaders", f)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("ptx/%s is not what clang writes from %s: run go generate ./internal/backend/cuda/shaders", filepath.Base(f[:len(f)-3])+".ptx", f)
			}
		})
	}
}

// TestPtxas assembles every kernel for sm_90 (H100, H200: the GPUs
// measured) and sm_80 (A100) with NVIDIA's ptxas and fails on a rejected
// kernel, a register spill, or shared memory over the limit. ptxas takes a
// minute or more an architecture on a 2-core machine, so make test-all
// (REDRAFTER_TEST_FULL) runs it; in make test, TestPTXSums holds the PTX to
// what go generate wrote, and go generate runs the same check for sm_90
// whenever it writes PTX.
func TestPtxas(t *testing.T) {
	if !testenv.Full() {
		t.Skip("SKIPPED, NOT PASSED: make test-all (REDRAFTER_TEST_FULL=1) runs ptxas; go generate checks sm_90 as it writes the PTX")
	}
	ptxas := tools.Need(t, tools.Ptxas)
	for _, arch := range []string{"sm_90", "sm_80"} {
		for _, f := range shaders.Files() {
			t.Run(arch+"/"+f, func(t *testing.T) {
				t.Parallel()
				ptxasCheck(t, ptxas, arch, f)
			})
		}
	}
}

// ptxasCheck is TestPtxas for one file and architecture.
func ptxasCheck(t *testing.T, ptxas, arch, f string) {
	ptx, err := shaders.PTX(f)
	if err != nil {
		t.Fatal(err)
	}
	names, err := shaders.Kernels(f)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := tools.PtxasProblems(ptxas, ptx, arch, names)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	for _, p := range problems {
		t.Errorf("%s %s: %s", arch, f, p)
	}
}

// TestPtxasCatchesSpillsAndSharedMemory checks the checks: a kernel that
// spills and one with too much shared memory are reported as such.
func TestPtxasCatchesSpillsAndSharedMemory(t *testing.T) {
	ptxas := tools.Need(t, tools.Ptxas)
	const big = `.version 7.0
.target sm_80
.address_size 64
.visible .entry too_much_shared(.param .u64 p)
{
	.reg .b64 %rd<2>;
	.shared .align 4 .b8 buf[65536];
	mov.u64 %rd1, buf;
	ret;
}
`
	if rep, err := tools.PtxasReport(ptxas, []byte(big), "sm_80"); err != nil {
		t.Logf("ptxas refuses 64 KiB of static shared memory outright (TestPtxas fails on that too): %v", err)
	} else if r := rep["too_much_shared"]; r.SharedBytes <= tools.MaxSharedBytes {
		t.Errorf("64 KiB of shared memory not caught: %v", r)
	}
	spill := `.version 7.0
.target sm_80
.address_size 64
.visible .entry spills(.param .u64 p)
.maxnreg 16
{
	.reg .f32 %f<200>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [p];
	cvta.to.global.u64 %rd2, %rd1;
`
	for i := 0; i < 100; i++ {
		// Volatile loads keep their order, so f0..f49 all wait for their partners.
		spill += fmt.Sprintf("\tld.volatile.global.f32 %%f%d, [%%rd2+%d];\n", i, 4*i)
	}
	for i := 0; i < 100; i++ {
		spill += fmt.Sprintf("\tadd.f32 %%f%d, %%f%d, %%f%d;\n", 100+i, i, 99-i)
	}
	for i := 0; i < 100; i++ {
		spill += fmt.Sprintf("\tst.global.f32 [%%rd2+%d], %%f%d;\n", 4*i, 100+i)
	}
	spill += "\tret;\n}\n"
	rep, err := tools.PtxasReport(ptxas, []byte(spill), "sm_80")
	if err != nil {
		t.Fatal(err)
	}
	if r := rep["spills"]; r.SpillBytes == 0 {
		t.Errorf("a kernel held to 16 registers with 100 live values does not show spills: %v", r)
	}
}

// TestGELUCopiesAgree: the fused products' GELU (matvec.cu's lin_gelu,
// quant.cu's qlin_gelu) is GeGLU's (elementwise.cu's gelu) expression for
// expression, so that a Gemma layer's fused gate·up rounds as the unfused
// GeGLU does; each file compiles alone, hence the copies.
func TestGELUCopiesAgree(t *testing.T) {
	body := func(file, fn string) string {
		src, err := shaders.Source(file)
		if err != nil {
			t.Fatal(err)
		}
		head := "DEVICE float " + fn + "(float x) {"
		i := strings.Index(src, head)
		if i < 0 {
			t.Fatalf("%s has no %q", file, head)
		}
		b, _, ok := strings.Cut(src[i+len(head):], "\n}")
		if !ok {
			t.Fatalf("%s: %s has no end", file, fn)
		}
		return b
	}
	want := body("elementwise.cu", "gelu")
	for _, c := range [][2]string{{"matvec.cu", "lin_gelu"}, {"quant.cu", "qlin_gelu"}} {
		if got := body(c[0], c[1]); got != want {
			t.Errorf("%s's %s is\n%s\nnot elementwise.cu's gelu\n%s", c[0], c[1], got, want)
		}
	}
}
