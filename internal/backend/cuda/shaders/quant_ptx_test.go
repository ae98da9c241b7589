package shaders_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// intToFloatRE matches PTX's integer-to-float conversions (cvt.rn.f32.u32
// and its kin), which issue at a quarter of the rate of an fma on sm_80 and
// sm_90; fmaRE the f32 fmas.
var (
	intToFloatRE = regexp.MustCompile(`(?m)^\s*(?:@!?%p\d+\s+)?cvt(?:\.rn)?\.f32\.[us](?:8|16|32|64)\s`)
	fmaRE        = regexp.MustCompile(`(?m)^\s*(?:@!?%p\d+\s+)?fma\.rn\.f32\s`)
)

// entryPTX returns the PTX of one entry point, up to the next.
func entryPTX(t *testing.T, ptx, name string) string {
	t.Helper()
	i := strings.Index(ptx, ".visible .entry "+name+"(")
	if i < 0 {
		t.Fatalf("no entry %s in the PTX", name)
	}
	body := ptx[i:]
	if j := strings.Index(body[1:], ".visible .entry "); j >= 0 {
		body = body[:j+1]
	}
	return body
}

// qmatvecCodeOps counts a qmatvec kernel's integer-to-float conversions and
// its fmas. Its loops are unrolled: each of its paths (qmatvec: rows 1 to 4
// with x read 16 bytes at a time and 1 row read a float at a time;
// qmatvec1: 1 row either way) has, per column of a thread and code of a
// chunk, one fma per row.
func qmatvecCodeOps(body string) (cvts, fmas int) {
	return len(intToFloatRE.FindAllString(body, -1)), len(fmaRE.FindAllString(body, -1))
}

// TestQMatVecNoCodeConversions: the quantized matvec turns codes into
// floats without a conversion instruction (quant.cu's qmv_code), which
// bounded the previous kernel on an H200: no qmatvec kernel in the
// checked-in PTX has any (the scales' f16 and bf16 loads are cvt.f32.f16
// and a shift, not matched). The fma count shows that the unrolled loops
// are there to be checked.
func TestQMatVecNoCodeConversions(t *testing.T) {
	b, err := shaders.PTX("quant.cu")
	if err != nil {
		t.Fatal(err)
	}
	names, err := shaders.Kernels("quant.cu")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, name := range names {
		if !strings.HasPrefix(name, "qmatvec") && !strings.HasPrefix(name, "qlinear") { // qlinear*: the fused products, the same loop
			continue
		}
		seen++
		cvts, fmas := qmatvecCodeOps(entryPTX(t, string(b), name))
		t.Logf("%s: %d integer-to-float conversions, %d f32 fmas", name, cvts, fmas)
		// 4 columns of a thread (2 in the one-row kernels' _c2_ ones) ×
		// (1+1+2+3+4 rows of qmatvec's 5 paths, 1+1 of qmatvec1's 2) × at
		// least 16 codes a chunk.
		rows, cols := 11, 4
		if strings.HasPrefix(name, "qmatvec1_") || strings.HasPrefix(name, "qlinear1_") {
			rows = 2
		}
		if strings.Contains(name, "_c2_") {
			cols = 2
		}
		if fmas < cols*rows*16 {
			t.Errorf("%s has %d fmas: its unrolled code loop is not in the PTX", name, fmas)
		}
		if cvts > 0 {
			t.Errorf("%s converts integers to float %d times (%d fmas): codes must become floats without cvt (quant.cu's qmv_code)", name, cvts, fmas)
		}
	}
	if seen != 72 {
		t.Errorf("quant.cu has %d qmatvec and qlinear kernels, want 72 (qmatvec, qlinear{,_norm}, and qmatvec1, qlinear1{,_norm} with sets of 8, 4 and 2 columns, × 4 and 8 bits × f32, f16, bf16 scales)", seen)
	}
}

// TestQMatVecConversionCheckCatchesCvt checks the check: quant.cu with
// qmv_code written as a plain conversion, compiled with clang-16, has
// integer-to-float conversions in its qmatvec kernels for the test to find,
// one per column of a thread, code of a chunk and path at least.
//
// It compiles all of quant.cu again (half a minute or more of a 2-core
// machine's clang), so make test-all (REDRAFTER_TEST_FULL) runs it and
// make test skips it, saying so; TestQMatVecNoCodeConversions, the check
// itself, runs in both.
func TestQMatVecConversionCheckCatchesCvt(t *testing.T) {
	if !testenv.Full() {
		t.Skip("SKIPPED, NOT PASSED: a check of the check, run by make test-all (REDRAFTER_TEST_FULL=1)")
	}
	tools.Need(t, tools.ClangPath)
	src, err := shaders.Source("quant.cu")
	if err != nil {
		t.Fatal(err)
	}
	const from = "return bits_f32(0x4B000000u | (h & mask)) - 8388608.0f;"
	if !strings.Contains(src, from) {
		t.Fatalf("quant.cu no longer contains %q; update the planted conversion", from)
	}
	prelude, err := shaders.Source("prelude.cuh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prelude.cuh"), []byte(prelude), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "quant.cu")
	if err := os.WriteFile(path, []byte(strings.Replace(src, from, "return float(h & mask);", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ptx, err := tools.CompilePTX(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		paths int
	}{{"qmatvec_4_f16", 5}, {"qmatvec_8_bf16", 5}, {"qmatvec1_4_f32", 2}} {
		cvts, fmas := qmatvecCodeOps(entryPTX(t, string(ptx), c.name))
		t.Logf("%s with float(h & mask): %d integer-to-float conversions, %d f32 fmas", c.name, cvts, fmas)
		if want := 4 * c.paths * 16; cvts < want {
			t.Errorf("%s with codes converted by float(): the check finds %d conversions, want at least %d", c.name, cvts, want)
		}
	}
}
