package metal

import (
	"flag"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/emu"
	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// seed returns the random seed of this run (testenv.Seed: logged, and
// $REDRAFTER_SEED replays one).
func seed(t *testing.T) uint64 { return testenv.Seed(t) }

// kernelModes are the emulator modes TestKernels runs every case in: the
// kernels compiled with FMA contraction off and fast (Apple's compiler may
// fuse a multiply and an add or not, as it sees fit, so a kernel must be
// within tolerance of the reference either way), each dispatch run in the
// default thread orders (forward, reverse, random), whose results must
// agree bit for bit.
//
// make test runs contraction off only (the programs the emulated
// generations build anyway); make test-all (REDRAFTER_TEST_FULL) adds fast,
// every file compiled a second time (a minute of a 2-core machine).
var kernelModes = testenv.Subset([]emuMode{{contract: emu.ContractOff}, {contract: emu.ContractFast}}, 0)

// TestKernels runs every op case through the Metal backend's encoder and
// the emulated kernels, against the CPU reference backend, in each of
// kernelModes, and then checks that the cases ran every kernel of the
// library in each mode.
func TestKernels(t *testing.T) {
	t.Parallel()
	s := seed(t)
	lib, err := msl.Library()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range lib {
		names = append(names, k.Name)
	}
	sort.Strings(names)
	for _, m := range kernelModes {
		t.Run(m.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(s, 5))
			be, x := newEmuBackendMode(t, nil, m)
			ref := cpu.NewReference()
			for _, c := range allCases(r) {
				t.Run(c.Name, func(t *testing.T) {
					if diff, err := opcases.Check(be, ref, c); err != nil {
						t.Fatal(err)
					} else if diff != "" {
						t.Errorf("metal: %s", diff)
					}
				})
			}
			if f := flag.Lookup("test.run"); t.Failed() || (f != nil && strings.Count(f.Value.String(), "/") > 1) {
				return // a failed or case-filtered run covers part of the library
			}
			if ran := x.names(); !slices.Equal(ran, names) {
				t.Errorf("the cases ran %d kernels %v; the library has %d: %v", len(ran), ran, len(names), names)
			}
			t.Logf("%d of %d kernels in the library run against the CPU reference (%v)", len(x.names()), len(names), m)
		})
	}
}

// TestHarnessCatchesPlantedBug plants a wrong index in a copy of a kernel
// and checks that the same cases now fail (every third bug in make test,
// all of them in make test-all).
func TestHarnessCatchesPlantedBug(t *testing.T) {
	t.Parallel()
	bugs := []struct{ file, from, to, cases, header string }{
		// The w tile is staged from x's tile rows.
		{"matmul.metal", "matmul_stage<T>(w, args.N, args.K, n0, k0, vec4, ws, tiitg);", "matmul_stage<T>(w, args.N, args.K, m0, k0, vec4, ws, tiitg);", "MatMul/f16/M70_K132_N130", ""},
		// qmm takes the scale of the wrong group.
		{"quant.metal", "const ulong g = ulong(n) * ulong(K / GS) + ulong(k0 / GS);", "const ulong g = ulong(n) * ulong(K / GS);", "QMatMul/4-bit/g64/f32/M40_K256_N19", ""},
		// matvec's 4-wide path reads the first row of x for every row.
		{"matvec.metal", "load4(xr[j] + k, xv[j]);", "load4(xr[0] + k, xv[j]);", "MatMul/f16/M4_K260_N11", ""},
		// Attention forgets to rescale the values when a block raises the maximum.
		{"attention.metal", "acc[t][e] = fma(acc[t][e], corr, pv[t][e]);", "acc[t][e] = acc[t][e] + pv[t][e];", "Attention/f32/decode/N1_H4_KVH2_D64_past300", ""},
		// Attention takes the new tokens' rows as if the tree were a chain.
		{"attention.metal", "rows[past + rank - c0] = past + j;", "rows[past + rank - c0] = past + rank;", "Attention/f32/tree/N9_H4_KVH2_D40_past270", ""},
		// The sliding window keeps one key too many (its first is one position early).
		{"attention.metal", "const int lo = args.window > 0 ? max(0, L - args.window) : 0; // the window's first visible key\n\tfor",
			"const int lo = args.window > 0 ? max(0, L - args.window - 1) : 0;\n\tfor", "Attention/f16/chain/N128_H4_KVH1_D8_past300_window200", ""},
		// The split kernel reads the whole chunk the window starts in.
		{"attention.metal", "const int c0 = max(z0, lo);\n\tconst int c1 = min(z0 + ATTN_CHUNK, L);\n\tfloat qv", "const int c0 = z0;\n\tconst int c1 = min(z0 + ATTN_CHUNK, L);\n\tfloat qv",
			"Attention/f16/decode/N1_H4_KVH2_D64_past600_window300", ""},
		// Concat reads b with a's row stride.
		{"elementwise.metal", "b[r * uint(args.Db) + c - uint(args.Da)]", "b[r * uint(args.Da) + c - uint(args.Da)]", "Concat/M3_5+9", ""},
		// The RNN step reads the state where it should read the embedding.
		{"drafter.metal", "ev[j] = e[xrow[j] + ulong(k)];", "ev[j] = s[xrow[j] + ulong(k)];", "RNNStep/bf16/M9_K100_N37", ""},
		// The warp leaves the K-th largest value's repeats out of the sum.
		{"reduce.metal", "if (!(y < kth)) {", "if (y > kth) {", "WarpLogSoftmax/M3_V64_K7_masked-3_tiestrue", ""},
		// BeamTop reads every beam's continuations from row 0.
		{"reduce.metal", "const int row = one_row ? 0 : b;", "const int row = 0;", "BeamTop/B4_R4_V257_W4_tiesfalse", ""},
		// BeamChains copies each beam's own chain instead of the one it extends.
		{"chains.metal", "int src = int(sel[i]);", "int src = i;", "BeamChains/W4_L5_depth4", ""},
		// AcceptChains breaks ties between threads toward the higher beam.
		{"chains.metal", "(sn == n && sb < b)", "(sn == n && sb > b)", "AcceptChains/W70_L3_top1_tiestrue", ""},
		// AcceptChains compares a draft with the argmax after it, not before.
		{"chains.metal", "== int(argmax[prev])", "== int(argmax[1 + i * c + k])", "AcceptChains/W4_L5_top4_tiesfalse", ""},
		// The quantized matvec forgets to multiply the bias by the x sum.
		{"quant.metal", "acc[r][j] += fma(s[r], d, b[r] * xsum);", "acc[r][j] += fma(s[r], d, b[r]);", "QMatMul/4-bit/g32/f16/M3_K96_N9", ""},
		// The pre-scaled x of qmv is off by one place in a 16-bit half.
		{"quant.metal", "xs[i] = v * (1.0f / float(1u << uint(BITS * (i % PER_HALF))));", "xs[i] = v * (1.0f / float(1u << uint(BITS * ((i + 1) % PER_HALF))));", "QMatMul/4-bit/g64/bf16/M1_K128_N5", ""},
		// The fused matvec's norm sums the squares of x after the gain.
		{"matvec.metal", "ss[j] = fma(xv[j][i], xv[j][i], ss[j]);\n\t\t\t\t\txv[j][i] *= gv[i];", "xv[j][i] *= gv[i];\n\t\t\t\t\tss[j] = fma(xv[j][i], xv[j][i], ss[j]);", "Linear/norm/f32/M5_K70_N9", ""},
		// The fused matvec's SwiGLU takes the gate for the up half too.
		{"matvec.metal", "const float up = glu ? sums[up_slot][j] : 0.0f;", "const float up = glu ? sums[r][j] : 0.0f;", "Linear/all/f32/M1_K136_N24", ""},
		// SwiGLU reads its up rows from the gate half of the weight.
		{"quant.metal", "return r < half_rows ? min(n0 + r, N - 1) : N + min(n0 + r - half_rows, N - 1);", "return r < half_rows ? min(n0 + r, N - 1) : min(n0 + r - half_rows, N - 1);", "Linear/all/8-bit/g32/f16/M5_K128_N10", "common.h"},
		// qmv folds the first gain of a lane's values into all of them.
		{"quant.metal", "v *= g[i];", "v *= g[0];", "Linear/norm/4-bit/g64/f16/M1_K256_N17", ""},
		// The residual of row 0 is added to every row.
		{"matvec.metal", "y = res[ulong(m) * ulong(N) + ulong(n)] + y;", "y = res[ulong(n)] + y;", "Linear/residual/f16/M5_K70_N9", "common.h"},
		// The up half takes the gate half's bias.
		{"matvec.metal", "up += bias[N + n];", "up += bias[n];", "Linear/all/f32/M5_K64_N9", "common.h"},
		// The bias is added before the norm's scale.
		{"quant.metal", "y *= scale;\n\t\tup *= scale;\n\t}\n\tif ((fuse & LINEAR_BIAS) != 0) {\n\t\ty += bias[n];", "y *= scale;\n\t\tup *= scale;\n\t}\n\tif ((fuse & LINEAR_BIAS) != 0) {\n\t\ty += bias[n] * scale;", "Linear/all/4-bit/g64/f16/M1_K256_N17", "common.h"},
		// RoPEKVWrite writes the keys into the value cache.
		{"kv.metal", "device T *cache = key ? kcache : vcache;", "device T *cache = vcache;", "RoPEKVWrite/f16/neox=true/M1_H4_KVH2_D16_P8_at9", ""},
		// RoPEKVWrite caches the keys unrotated.
		{"kv.metal", "if (h < args.H + args.KVH && i < 2 * args.P) {", "if (h < args.H && i < 2 * args.P) {", "RoPEKVWrite/f32/neox=false/M5_H6_KVH2_D64_P32_at40", ""},
		// The shared rotation pairs NeoX halves with the wrong offset (rope_at, common.h).
		{"kv.metal", "i1 = j + P;", "i1 = j + P - 1;", "RoPEKVWrite/f32/neox=true/M6_H2_KVH1_D18_P6_at0", "common.h"},
		// GeGLU's GELU drops a power of x from the cubic term.
		{"elementwise.metal", "0.044715f * x * x * x", "0.044715f * x * x", "GeGLU/n257", "common.h"},
		// Attention forgets the soft-cap.
		{"attention.metal", "sc[i] = vi < c1 ? attn_softcap(dot, args.softcap) : -FLT_MAX;", "sc[i] = vi < c1 ? dot : -FLT_MAX;", "Attention/f32/tree/N9_H4_KVH2_D40_past270_softcap0.8", ""},
		// SoftCap leaves the factor 2 out of the exponent.
		{"elementwise.metal", "exp(2.0f * float(x[tpig.x]) / c)", "exp(float(x[tpig.x]) / c)", "SoftCap/n257", ""},
		// The fused GeGLU epilogue takes SiLU for GELU.
		{"quant.metal", "} else if ((fuse & LINEAR_GEGLU) != 0) {\n\t\ty = gelu(y) * up;", "} else if ((fuse & LINEAR_GEGLU) != 0) {\n\t\ty = silu(y) * up;",
			"Linear/norm+bias+geglu/4-bit/g32/bf16/M5_K128_N10", "common.h"},
		// A GeGLU product is read as a plain one: no up rows.
		{"matvec.metal", "return (fuse & (LINEAR_SWIGLU | LINEAR_GEGLU)) != 0;", "return (fuse & LINEAR_SWIGLU) != 0;", "Linear/norm+geglu/f16/M1_K136_N24", "common.h"},
	}
	// Every bug's text must still be in its file, the ones make test does
	// not plant too (a kernel edit otherwise shows only in make test-all).
	names := map[string]bool{}
	for _, c := range allCases(rand.New(rand.NewPCG(1, 2))) {
		names[c.Name] = true
	}
	for _, bug := range bugs {
		file := bug.file
		if bug.header != "" {
			file = bug.header
		}
		raw, err := msl.Raw(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(raw, bug.from) {
			t.Errorf("%s no longer contains %q; update the planted bug", file, bug.from)
		}
		if !names[bug.cases] {
			t.Errorf("no case %s", bug.cases)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// make test plants every third bug (each variant is a file rebuilt for
	// the emulator, a minute of a 2-core machine for the larger ones);
	// make test-all plants them all.
	var every3 []int
	for i := 0; i < len(bugs); i += 3 {
		every3 = append(every3, i)
	}
	for _, bug := range testenv.Subset(bugs, every3...) {
		raw, err := msl.Raw(bug.file)
		if err != nil {
			t.Fatal(err)
		}
		src := strings.Replace(raw, bug.from, bug.to, 1)
		if bug.header != "" {
			// The bug is in a header the file includes (maybe through
			// another): the file with its includes inlined, the planted
			// header among them, is the override.
			planted := false
			src, err = msl.Inline(bug.file, raw, func(name string) (string, error) {
				s, err := msl.Raw(name)
				if err == nil && name == bug.header && strings.Contains(s, bug.from) {
					s, planted = strings.Replace(s, bug.from, bug.to, 1), true
				}
				return s, err
			})
			if err != nil {
				t.Fatal(err)
			}
			if !planted {
				t.Fatalf("%s (through %s) no longer contains %q; update the planted bug", bug.header, bug.file, bug.from)
			}
		} else if !strings.Contains(raw, bug.from) {
			t.Fatalf("%s no longer contains %q; update the planted bug", bug.file, bug.from)
		}
		be, _ := newEmuBackend(t, map[string]string{bug.file: src})
		ref := cpu.NewReference()
		found := false
		for _, c := range allCases(rand.New(rand.NewPCG(1, 2))) {
			if c.Name != bug.cases {
				continue
			}
			found = true
			msg, err := opcases.Check(be, ref, c)
			if err != nil {
				t.Fatal(err)
			}
			if msg == "" {
				t.Errorf("%s: the planted bug in %s (%q → %q) went unnoticed", c.Name, bug.file, bug.from, bug.to)
			} else {
				t.Logf("%s with the planted bug: %s", c.Name, msg)
			}
		}
		if !found {
			t.Fatalf("no case %s", bug.cases)
		}
	}
}

// TestOrdersCatchMissingBarrier plants a missing threadgroup_barrier in a
// copy of a kernel, one that running threads in index order hides: the
// case passes with the forward order alone and fails under the default
// orders (forward, reverse, random), whose results disagree.
func TestOrdersCatchMissingBarrier(t *testing.T) {
	const file, cases = "attention.metal", "Attention/f32/decode/N1_H2_KVH2_D8_past0"
	// The barrier between each simdgroup writing its partial (maximum, sum,
	// values) and every thread reading all of them.
	const from = `				os[int(sgitg) * D + d] = acc[t][e];
			}
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);`
	raw, err := msl.Raw(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(raw, from) != 1 {
		t.Fatalf("%s no longer contains one %q; update the planted bug", file, from)
	}
	override := map[string]string{file: strings.Replace(raw, from, strings.TrimSuffix(from, "threadgroup_barrier(mem_flags::mem_threadgroup);"), 1)}
	ref := cpu.NewReference()
	for _, tc := range []struct {
		mode   emuMode
		caught bool
	}{
		{emuMode{orders: []core.Order{core.Forward}}, false},
		{emuMode{}, true},
	} {
		be, _ := newEmuBackendMode(t, override, tc.mode)
		found := false
		for _, c := range opcases.All(rand.New(rand.NewPCG(1, 2))) {
			if c.Name != cases {
				continue
			}
			found = true
			msg, err := opcases.Check(be, ref, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s without the barrier (%v): %q", c.Name, tc.mode, msg)
			if caught := msg != ""; caught != tc.caught {
				t.Errorf("%s without the barrier (%v): caught %v, want %v", c.Name, tc.mode, caught, tc.caught)
			}
			if tc.caught && !strings.Contains(msg, "results differ between thread orders") {
				t.Errorf("%s: caught as %q, want as results that differ between thread orders", c.Name, msg)
			}
		}
		if !found {
			t.Fatalf("no case %s", cases)
		}
	}
}
