package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// TestHarnessCatchesPlantedBugs plants bugs in copies of the kernels and
// checks that the cases that reach them now fail: a missing
// __syncthreads (the emulator runs each block's threads as fibers, so a
// read of shared memory before the other warps wrote it shows), wrong
// indices, and wrong tie rules and counts in the beam search's kernels.
//
// Each bug recompiles its .cu file for the emulator (10–20 s for the
// larger ones), so `make test` plants every third, always the same ones,
// and `make test-all` (REDRAFTER_TEST_FULL) plants them all.
func TestHarnessCatchesPlantedBugs(t *testing.T) {
	t.Parallel()
	bugs := []struct{ file, from, to, cases string }{
		// The warps' softmax states are merged before every warp stored its own.
		{"attention.cu", "\tsync_threads();\n\tm = ATT_NEG;", "\tm = ATT_NEG;", "Attention/f32/tree/N9_H6_KVH2_D33_past20"},
		// A tree token sees its new keys as if the tree were a chain.
		{"attention.cu", "count += end[j] >= qi ? 1 : 0;", "count += 1;", "Attention/f16/tree/N9_H6_KVH2_D33_past20"},
		// The split's merge drops the last chunk.
		{"attention.cu", "if (cb + j < np) att_merge(", "if (cb + j < np - 1) att_merge(", "Attention/f32/decode/N1_H4_KVH2_D40_past1000_split"},
		// The blocks count to the grid's chunks, not the query's non-empty ones: no block is last.
		{"attention.cu", "sh.last = done == np - 1;", "sh.last = done == p - 1;", "Attention/f16/tree/N6_H4_KVH1_D64_past255_cap1024_split"},
		// A chunk that starts past the cache but among the query's ancestors is taken for empty.
		{"attention.cu", "if (z0 >= kvlen + qi + 1) return;", "if (z0 >= kvlen + 1) return;", "Attention/f32/tree/N6_H4_KVH1_D64_past255_cap1024_split"},
		// The 16-byte path adds only the first 5 of a warp's 6 V row groups (d = 40).
		{"attention.cu", "for (int j = 1; j < rg; j++) a +=", "for (int j = 1; j < rg - 1; j++) a +=", "Attention/f16/decode/N1_H4_KVH2_D40_past1000_split"},
		// The 16-byte path weighs each V row with its own lane's key, not the row's key.
		{"attention.cu", "shfl_idx(p, kk < ATT_TILE ? kk : 0)", "shfl_idx(p, kk < ATT_TILE ? lane : 0)", "Attention/f32/decode/N1_H32_KVH4_D64_past100_cap2048_split"},
		// Merging chunks, the running sum is not rescaled to the new maximum.
		{"attention.cu", "l = cu_fma(l, a, lp * b);", "l = l + lp;", "Attention/f16/decode/N1_H4_KVH2_D40_past2100_walk"},
		// The last block leaves the counts as they are: the next run's never reach p.
		{"attention.cu", "if (sh.last) count[pair] = 0;", "", "Attention/f16/tree/N6_H4_KVH1_D64_past2046_split"},
		// A chunk that starts inside the new keys takes them as a chain.
		{"attention.cu", "sh.rows[kvlen + rank - c0] = kvlen + j;", "sh.rows[kvlen + rank - c0] = kvlen + rank;", "Attention/f32/tree/N6_H4_KVH1_D64_past2046_split"},
		// The quantized matvec takes the scale of the row's first group.
		{"quant.cu", "const u64 g = j * u64(4 * per) / u64(gs);", "const u64 g = 0;", "QMatMul/4-bit/g32/f16/M3_K96_N9"},
		// The quantized matvec pre-scales x for the third code of a 16-bit half by 2^-7, not 2^-8.
		{"quant.cu", "i == 2 ? 0.00390625f", "i == 2 ? 0.0078125f", "QMatMul/4-bit/g32/f16/M3_K96_N9"},
		// The quantized matvec adds a column set's first warp twice, not its two warps.
		{"quant.cu", "part[ws][r][c] + part[ws + 1][r][c]", "part[ws][r][c] + part[ws][r][c]", "QMatMul/8-bit/g64/bf16/M5_K2048_N9"},
		// Top-k forgets that an equal value after the previous choice is next.
		{"reduce.cu", "(e == pv && i > pi)", "(e == pv && i < pi)", "TopK/M3_V1001_K5_ties"},
		// Beam top forgets that an equal score after the previous choice is next.
		{"reduce.cu", "(sc == pv && f > pi)", "(sc == pv && f < pi)", "BeamTop/B2_R2_V9_W18_tiestrue"},
		// The warp's radix select finds the (k+1)-th largest value, keeping one too many.
		{"reduce.cu", "if (block_count(c, counts) >= k) t = cand;", "if (block_count(c, counts) > k) t = cand;", "WarpLogSoftmax/M3_V1000_K50_masked-3_tiesfalse"},
		// The warps' counts of a radix round are added before every warp stored its own.
		{"reduce.cu", "\tif (lane == 0) scratch[warp] = v;\n\tsync_threads();\n\tint s = 0;", "\tif (lane == 0) scratch[warp] = v;\n\tint s = 0;", "WarpLogSoftmax/M3_V1000_K50_masked-3_tiesfalse"},
		// The 16-byte weight words are paired with x one element off.
		{"matvec.cu", "acc[r][c] = cu_fma(xs[e], w8_at<BF16>(v[c], e), acc[r][c]);", "acc[r][c] = cu_fma(xs[e], w8_at<BF16>(v[c], e ^ 1), acc[r][c]);", "MatVec8/bf16/M5_K512_N7"},
		// The tensor-core fragments of A swap rows g+8 and columns 2t+8.
		{"matmul.cu", "pack(xhi[r + 8][2 * t], xhi[r + 8][2 * t + 1]),\n\t\t                         pack(xhi[r][2 * t + 8], xhi[r][2 * t + 9])",
			"pack(xhi[r][2 * t + 8], xhi[r][2 * t + 9]),\n\t\t                         pack(xhi[r + 8][2 * t], xhi[r + 8][2 * t + 1])", "MatMulMMA/f16/M70_K37_N33"},
		// Without the low half of x, the tensor cores see x rounded to bf16.
		{"matmul.cu", "mma_bf16(acc[j], alo, b, acc[j]);", "", "MatMulMMA/bf16/M130_K100_N70"},
		// The fused norm forgets eps (rows whose mean square is below it).
		{"matvec.cu", "ss / float(a.k) + a.eps", "ss / float(a.k)", "Linear/norm/f16/M2_K264_N5_tiny"},
		{"matvec.cu", "ss / float(a.k) + a.eps", "ss / float(a.k)", "Linear/norm/f32/M2_K40_N5_tiny"},
		// The fused norm forgets the gain, in matvec8's loop and in the warp's.
		{"matvec.cu", "xs[e] *= gs[e];", "", "Linear/norm/bf16/M5_K264_N9"},
		{"matvec.cu", "xv *= g;", "", "Linear/norm/f32/M3_K70_N6"},
		// SwiGLU's gate columns read the up rows and the up columns the gate rows.
		{"matvec.cu", "u64(glu && c >= per ? n + jc : jc)", "u64(glu && c < per ? n + jc : jc)", "Linear/norm+swiglu/f16/M5_K264_N9"},
		{"matvec.cu", "urow = u64(n + (glu ? col : 0))", "urow = u64(glu ? col : 0)", "Linear/norm+swiglu/bf16/M3_K70_N6"},
		// The up half's bias is the gate's.
		{"matvec.cu", "u += a.bias[a.n + j];", "u += a.bias[j];", "Linear/norm+bias+swiglu/f16/M5_K264_N9"},
		// The residual of row 0 is added to every row.
		{"matvec.cu", "a.res[u64(row) * u64(a.n) + u64(j)]", "a.res[u64(j)]", "Linear/residual/bf16/M5_K264_N9"},
		// The one-row fused kernel (decoding) forgets its norm prologue.
		{"matvec.cu", "linear8x1_norm_##NAME(LIN_PARAMS(T)) { linear8<BF16, true, 1>", "linear8x1_norm_##NAME(LIN_PARAMS(T)) { linear8<BF16, false, 1>", "Linear/norm+bias/bf16/M1_K264_N9"},
		// The quantized norm leaves the gain out of Σx (the biases' term): x·g
		// meets the scales, raw x the biases.
		{"quant.cu", "\t\t\t\t\t\tif constexpr (NORM) {\n\t\t\t\t\t\t\tss[r] = cu_fma(a[e], a[e], ss[r]);\n\t\t\t\t\t\t\ta[e] *= gn[e0 + e];\n\t\t\t\t\t\t}\n\t\t\t\t\t\txsum[r] += a[e];",
			"\t\t\t\t\t\txsum[r] += a[e];\n\t\t\t\t\t\tif constexpr (NORM) {\n\t\t\t\t\t\t\tss[r] = cu_fma(a[e], a[e], ss[r]);\n\t\t\t\t\t\t\ta[e] *= gn[e0 + e];\n\t\t\t\t\t\t}",
			"Linear/norm/4-bit/g64/f16/M1_K256_N9"},
		{"quant.cu", "\t\t\t\t\t\tif constexpr (NORM) {\n\t\t\t\t\t\t\tss[r] = cu_fma(a[e], a[e], ss[r]);\n\t\t\t\t\t\t\ta[e] *= gn[e0 + e];\n\t\t\t\t\t\t}\n\t\t\t\t\t\txsum[r] += a[e];",
			"\t\t\t\t\t\txsum[r] += a[e];\n\t\t\t\t\t\tif constexpr (NORM) {\n\t\t\t\t\t\t\tss[r] = cu_fma(a[e], a[e], ss[r]);\n\t\t\t\t\t\t\ta[e] *= gn[e0 + e];\n\t\t\t\t\t\t}",
			"Linear/norm/8-bit/g64/f32/M5_K384_N7"},
		// The quantized norm's Σx² is the set's first warp's, twice.
		{"quant.cu", "NORM ? sqs[ws][r] + sqs[ws + 1][r] : 0.0f", "NORM ? sqs[ws][r] + sqs[ws][r] : 0.0f", "Linear/norm/4-bit/g128/f16/M5_K384_N7"},
		// SwiGLU's up rows take the scales of the gate rows.
		{"quant.cu", "s[c] = load_w(scales, col[c] * groups + g);", "s[c] = load_w(scales, (glu && set == 1 ? col[c] - u64(n) : col[c]) * groups + g);",
			"Linear/norm+swiglu/4-bit/g32/f16/M1_K256_N9"},
		{"quant.cu", "s[c] = load_w(scales, col[c] * groups + g);", "s[c] = load_w(scales, (glu && set == 1 ? col[c] - u64(n) : col[c]) * groups + g);",
			"Linear/norm+swiglu/8-bit/g64/f16/M5_K384_N7"},
		// The quantized SwiGLU's up half takes the gate's bias.
		{"quant.cu", "u += f.bias[n + j];", "u += f.bias[j];", "Linear/norm+bias+swiglu/4-bit/g64/f16/M1_K256_N9"},
		// The quantized residual of row 0 is added to every row.
		{"quant.cu", "f.res[u64(row) * u64(n) + u64(j)]", "f.res[u64(j)]", "Linear/residual/8-bit/g32/f16/M5_K384_N7"},
		// RoPEKVWrite writes the rotated keys into the value cache.
		{"rope.cu", "store(kc + (u64(head - h)", "store(vc + (u64(head - h)", "RoPEKVWrite/f16/neoxtrue/M5_H4_KVH2_D20_P8_at13"},
		// RoPEKVWrite writes at position 0 rather than kvLen.
		{"rope.cu", "const u64 at = u64(kvlen[0]) + row;", "const u64 at = row;", "RoPEKVWrite/f32/neoxfalse/M5_H4_KVH2_D20_P8_at13"},
		// Accepting chains, lanes tied for the longest beam keep the higher one.
		{"chains.cu", "(on == bn && ob < bb)", "(on == bn && ob > bb)", "AcceptChains/W50_L5_top4_tiestrue"},
		// (Those from here on are appended so that make test's every third stays the bugs it was.)
		// The one-row kernels with narrow sets write their outputs where 16-column blocks would.
		{"quant.cu", "const int oc = int(blockIdx.x) * (2 * SC) + cc;", "const int oc = int(blockIdx.x) * (2 * QMV1_SET_COLS) + cc;", "QMatMul/4-bit/g64/f16/M1_K256_N5/c2"},
		// The 16-byte recurrent step reads every column's weights from the block's first column.
		{"drafter.cu", "row[c] = u64(col0 + c < n ? col0 + c : n - 1) * words;", "row[c] = u64(col0 < n ? col0 : n - 1) * words;", "RNNStep/bf16/M4_K64_N64"},
		// The sliding window's first key is one position late (walked chunks).
		{"attention.cu", "const int lo = window > 0 ? att_max(0, vis - window) : 0; // the window's first visible key\n\tfor",
			"const int lo = window > 0 ? att_max(0, vis - window + 1) : 0;\n\tfor", "Attention/f16/decode/N1_H4_KVH2_D64_past2100_window700_walk"},
		// The split's merge reads the partials from chunk 0, not from the window's first chunk.
		{"attention.cu", "part + (pair * u64(p) + u64(za)) * u64(d + 2)", "part + pair * u64(p) * u64(d + 2)", "Attention/f32/tree/N6_H4_KVH1_D64_past2046_window260_split"},
		// The blocks count to the chunks from 0, not from the window's: no block is last.
		{"attention.cu", "const int np = (vis + ATT_CHUNK - 1) / ATT_CHUNK - za;", "const int np = (vis + ATT_CHUNK - 1) / ATT_CHUNK;", "Attention/f16/decode/N1_H4_KVH2_D40_past1000_window300_split"},
		// GeGLU's GELU drops a power of x from the cubic term.
		{"elementwise.cu", "0.044715f * x * x * x", "0.044715f * x * x", "GeGLU/N999"},
		// The element path forgets the soft-cap.
		{"attention.cu", "sc[i] = x < c1 ? att_softcap(dot, sh.softcap) : ATT_NEG;", "sc[i] = x < c1 ? dot : ATT_NEG;", "Attention/f32/tree/N9_H6_KVH2_D33_past20_window5_softcap0.5"},
		// The 16-byte path caps with tanh(s·cap)/cap.
		{"attention.cu", "const float sc = in ? att_softcap(dot, sh.softcap) : ATT_NEG;", "const float sc = in ? att_softcap(dot * sh.softcap * sh.softcap, sh.softcap) / (sh.softcap * sh.softcap) : ATT_NEG;", "Attention/f16/decode/N1_H4_KVH2_D64_past1000_softcap0.5_split"},
		// SoftCap divides by the cap once too often.
		{"elementwise.cu", "cu_exp(2.0f * x[i] / cap)", "cu_exp(2.0f * x[i] / cap / cap)", "SoftCap/N999"},
		// The fused GeGLU epilogue takes SiLU for GELU.
		{"matvec.cu", "else if (f & LIN_GEGLU) y = lin_gelu(y) * u;", "else if (f & LIN_GEGLU) y = lin_silu(y) * u;", "Linear/norm+geglu/f16/M1_K264_N9"},
		// The quantized GeGLU product is read as a plain one: no up rows.
		{"quant.cu", "#define QLIN_GLU (QLIN_SWIGLU | QLIN_GEGLU)", "#define QLIN_GLU QLIN_SWIGLU", "Linear/norm+bias+geglu/8-bit/g64/bf16/M5_K384_N7"},
	}
	// Every bug's text must still be in its file, the ones make test does
	// not plant too (a kernel edit otherwise shows only in make test-all).
	names := map[string]bool{}
	for _, c := range kernelCases(rand.New(rand.NewPCG(1, 2))) {
		names[c.name] = true
	}
	for _, bug := range bugs {
		raw, err := shaders.Source(bug.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(raw, bug.from) {
			t.Errorf("%s no longer contains %q; update the planted bug", bug.file, bug.from)
		}
		if !names[bug.cases] {
			t.Errorf("no case %s", bug.cases)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	var every3 []int
	for i := 0; i < len(bugs); i += 3 {
		every3 = append(every3, i)
	}
	for _, bug := range testenv.Subset(bugs, every3...) {
		raw, err := shaders.Source(bug.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(raw, bug.from) {
			t.Fatalf("%s no longer contains %q; update the planted bug", bug.file, bug.from)
		}
		d := newEmuDevice(t, map[string]string{bug.file: strings.Replace(raw, bug.from, bug.to, 1)})
		found := false
		for _, c := range kernelCases(rand.New(rand.NewPCG(1, 2))) {
			if c.name != bug.cases {
				continue
			}
			found = true
			want, err := c.ref(cpu.NewReference())
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.gpu(d)
			if err != nil {
				t.Logf("%s with the planted bug: %v", c.name, err)
				continue
			}
			if msg := compare(got, want, c.tol); msg == "" {
				t.Errorf("%s: the planted bug in %s (%q → %q) went unnoticed", c.name, bug.file, bug.from, bug.to)
			} else {
				t.Logf("%s with the planted bug: %s", c.name, msg)
			}
		}
		if !found {
			t.Fatalf("no case %s", bug.cases)
		}
	}
}
