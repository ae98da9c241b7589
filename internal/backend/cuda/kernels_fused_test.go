package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// linVariant is the folds of a LinearOp case.
type linVariant struct {
	name                 string
	norm, bias, residual bool
	glu                  graph.GLU
}

// rows is the rows of w for n outputs: gate and up rows with a GLU.
func (v linVariant) rows(n int) int {
	if v.glu != graph.NoGLU {
		return 2 * n
	}
	return n
}

// flags is v's linear launch flags.
func (v linVariant) flags() int {
	flags := 0
	if v.norm {
		flags |= linNorm
	}
	if v.bias {
		flags |= linBias
	}
	switch v.glu {
	case graph.GLUSiLU:
		flags |= linSwiGLU
	case graph.GLUGELU:
		flags |= linGeGLU
	}
	if v.residual {
		flags |= linResidual
	}
	return flags
}

// linVariants are the folds a layer uses (norm before Q·K·V, with or
// without Qwen's bias; norm and SwiGLU over gate·up; the residual after
// the O and down products) and one more (bias and residual);
// gegluVariants Gemma's gate·up (gegluKernelCases).
var (
	linVariants = []linVariant{
		{"norm", true, false, false, graph.NoGLU}, {"norm+bias", true, true, false, graph.NoGLU}, {"norm+swiglu", true, false, false, graph.GLUSiLU},
		{"norm+bias+swiglu", true, true, false, graph.GLUSiLU}, {"residual", false, false, true, graph.NoGLU}, {"bias+residual", false, true, true, graph.NoGLU},
	}
	gegluVariants = []linVariant{{"norm+geglu", true, false, false, graph.GLUGELU}, {"norm+bias+geglu", true, true, false, graph.GLUGELU}}
)

// linearKCase is a LinearOp case of variant v over x [m,k] (values up to
// xScale) and a float w of dt with n outputs, against the CPU's
// composition of the unfused ops.
func linearKCase(r *rand.Rand, name string, v linVariant, dt graph.DType, m, k, n int, xScale float32) kcase {
	b := graph.AsBytes
	rows := v.rows(n)
	x, gain, w := opcases.RandF32(r, m*k, xScale), opcases.RandF32(r, k, 1), opcases.ScaledWeights(r, dt, rows*k, 1)
	bias, res := opcases.RandF32(r, rows, 1), opcases.RandF32(r, m*n, 4)
	const eps = 1e-5
	return kcase{name, opcases.TolFor(dt), func(be graph.Backend) ([]any, error) {
		return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			xa, wa := g.Input("x", graph.F32, m, k), g.Input("w", dt, rows, k)
			in := map[*graph.Array]any{xa: x, wa: w}
			f := graph.Fusion{Eps: eps, GLU: v.glu}
			if v.norm {
				f.Norm = g.Input("gain", graph.F32, k)
				in[f.Norm] = gain
			}
			if v.bias {
				f.Bias = g.Input("bias", graph.F32, rows)
				in[f.Bias] = bias
			}
			if v.residual {
				f.Residual = g.Input("res", graph.F32, m, n)
				in[f.Residual] = res
			}
			return []*graph.Array{graph.Linear(xa, wa, f)}, in
		})
	}, func(d *emuDevice) ([]any, error) {
		out, xp, wp := d.alloc(make([]byte, 4*m*n)), d.alloc(b(x)), d.alloc(b(w))
		gp, bp, rp := xp, xp, xp
		if v.norm {
			gp = d.alloc(b(gain))
		}
		if v.bias {
			bp = d.alloc(b(bias))
		}
		if v.residual {
			rp = d.alloc(b(res))
		}
		err := d.run(linearLaunch(out, xp, gp, wp, bp, rp, dt, vecWeights(wp, dt, k), v.flags(), m, k, n, eps))
		return []any{d.f32s(out)}, err
	}}
}

// qlinearKCase is linearKCase over a quantized w (bits, groups of gs,
// scales and biases of sdt) with sets of sc columns.
func qlinearKCase(r *rand.Rand, name string, v linVariant, bits, gs int, sdt graph.DType, m, k, n int, xScale float32, sc int) kcase {
	b := graph.AsBytes
	rows := v.rows(n)
	q := opcases.RandQuant(r, rows, k, bits, gs, sdt)
	codes, scales, biases := q.Parts()
	x, gain := opcases.RandF32(r, m*k, xScale), opcases.RandF32(r, k, 1)
	bias, res := opcases.RandF32(r, rows, 1), opcases.RandF32(r, m*n, 4)
	const eps = 1e-5
	return kcase{name, tolF16, func(be graph.Backend) ([]any, error) {
		return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			xa := g.Input("x", graph.F32, m, k)
			in := map[*graph.Array]any{xa: x}
			f := graph.Fusion{Eps: eps, GLU: v.glu}
			if v.norm {
				f.Norm = g.Input("gain", graph.F32, k)
				in[f.Norm] = gain
			}
			wa := q.Inputs(g, in, rows, k, bits, gs, sdt)
			if v.bias {
				f.Bias = g.Input("bias", graph.F32, rows)
				in[f.Bias] = bias
			}
			if v.residual {
				f.Residual = g.Input("res", graph.F32, m, n)
				in[f.Residual] = res
			}
			return []*graph.Array{graph.Linear(xa, wa, f)}, in
		})
	}, func(d *emuDevice) ([]any, error) {
		out, xp := d.alloc(make([]byte, 4*m*n)), d.alloc(b(x))
		wp, sp, bip := d.alloc(b(codes)), d.alloc(b(scales)), d.alloc(b(biases))
		gp, bp, rp := xp, xp, xp
		if v.norm {
			gp = d.alloc(b(gain))
		}
		if v.bias {
			bp = d.alloc(b(bias))
		}
		if v.residual {
			rp = d.alloc(b(res))
		}
		err := d.run(qlinearColsLaunch(out, xp, gp, wp, sp, bip, bp, rp, bits, sdt, v.flags(), m, k, n, gs, eps, sc))
		return []any{d.f32s(out)}, err
	}}
}

// floatLinearShapes are the [m,k,n] of the float LinearOp cases of dt:
// the warp-per-column kernel (k not a multiple of 8), and for f16 and
// bf16 matvec8's 8-row kernels (linear8x8_*: verification, a column
// tail), its 4-row kernels (linear8_*) and its one-row kernels
// (linear8x1_*: decoding).
func floatLinearShapes(dt graph.DType) [][3]int {
	if dt == graph.F32 {
		return [][3]int{{3, 70, 6}}
	}
	return [][3]int{{3, 70, 6}, {5, 264, 9}, {3, 264, 9}, {1, 264, 9}}
}

// qlinearCases are the quantized LinearOp cases of v (vi its index) with
// bits and scales of sdt (si its index): one row (qlinear1_*, with sets of
// every width qmv1Cols may choose) and 4 + 1 (qlinear_*), the group size
// rotating with vi and si, a column tail (and with a GLU a block past n's
// gate and up rows).
func qlinearCases(r *rand.Rand, v linVariant, vi, bits, si int, sdt graph.DType) []kcase {
	var cs []kcase
	for i, s := range [][3]int{{1, 256, 9}, {5, 384, 7}} {
		gs := []int{32, 64, 128}[(si+vi+i)%3]
		m, k, n := s[0], s[1], s[2]
		widths := []int{qmvSetColumns(m)}
		if m == 1 {
			widths = qmv1Widths
		}
		for _, sc := range widths {
			name := fmt.Sprintf("Linear/%s/%d-bit/g%d/%v/M%d_K%d_N%d%s", v.name, bits, gs, sdt, m, k, n, widthSuffix(m, sc))
			cs = append(cs, qlinearKCase(r, name, v, bits, gs, sdt, m, k, n, 2, sc))
		}
	}
	return cs
}

// fusedKernelCases are the cases of the fused layer kernels (LinearOp,
// RoPEKVWriteOp) against the CPU's composition of the unfused ops: every
// fold on every weight type, matvec8's kernels (k a multiple of 8, rows of
// 4 then a tail, a column tail) and the warp-per-column ones (k not), a
// norm over values small enough that eps matters, and RoPEKVWrite into
// both cache types with partial rotary and grouped heads. GeGLU's are
// gegluKernelCases.
func fusedKernelCases(r *rand.Rand) []kcase {
	var cs []kcase
	add := func(name string, tol float64, ref func(be graph.Backend) ([]any, error), gpu func(d *emuDevice) ([]any, error)) {
		cs = append(cs, kcase{name, tol, ref, gpu})
	}
	b := graph.AsBytes
	zeros := func(n int) []byte { return make([]byte, 4*n) }
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, v := range linVariants {
			for _, s := range floatLinearShapes(dt) {
				cs = append(cs, linearKCase(r, fmt.Sprintf("Linear/%s/%v/M%d_K%d_N%d", v.name, dt, s[0], s[1], s[2]), v, dt, s[0], s[1], s[2], 2))
			}
		}
	}
	// Rows whose mean square is below eps: a norm that forgot eps is off.
	cs = append(cs, linearKCase(r, "Linear/norm/f32/M2_K40_N5_tiny", linVariants[0], graph.F32, 2, 40, 5, 0.003),
		linearKCase(r, "Linear/norm/f16/M2_K264_N5_tiny", linVariants[0], graph.F16, 2, 264, 5, 0.003))

	// Quantized weights (qlinear*): every fold, bits and scale type.
	for _, bits := range []int{4, 8} {
		for si, sdt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
			for vi, v := range linVariants {
				cs = append(cs, qlinearCases(r, v, vi, bits, si, sdt)...)
			}
		}
	}
	cs = append(cs, qlinearKCase(r, "Linear/norm/4-bit/g64/f16/M1_K256_N9_tiny", linVariants[0], 4, 64, graph.F16, 1, 256, 9, 0.003, qmv1SetCols),
		qlinearKCase(r, "Linear/norm/8-bit/g32/bf16/M5_K384_N7_tiny", linVariants[0], 8, 32, graph.BF16, 5, 384, 7, 0.003, qmvSetCols))

	for _, dt := range []graph.DType{graph.F32, graph.F16} {
		for _, neox := range []bool{true, false} {
			m, h, kvh, dd, p, past := 5, 4, 2, 20, 8, 13 // 2p < d: partial rotary
			c := past + m + 2
			qkv, pos := opcases.RandF32(r, m*(h+2*kvh)*dd, 1), opcases.RandInts(r, m, 0, 3000)
			kc, vc := opcases.RandF32(r, kvh*c*dd, 1), opcases.RandF32(r, kvh*c*dd, 1)
			var kd, vd any = kc, vc
			if dt == graph.F16 {
				kd, vd = quant.F32sToF16(kc), quant.F32sToF16(vc)
			}
			inv := make([]float32, p)
			for j := range inv {
				inv[j] = float32(math.Pow(10000, -float64(2*j)/float64(dd)))
			}
			tol := tolF32
			if dt == graph.F16 {
				// A rotated key an f32 rounding away from a halfway point
				// rounds to the neighbouring f16: one f16 step, 2^-10 of the
				// value at most (REDRAFTER_SEED=1795884526656874173 hit 3.6e-4).
				tol = 1e-3
			}
			add(fmt.Sprintf("RoPEKVWrite/%v/neox%v/M%d_H%d_KVH%d_D%d_P%d_at%d", dt, neox, m, h, kvh, dd, p, past), tol, func(be graph.Backend) ([]any, error) {
				return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					ka, va := cpuVar(be, g, kd, dt, kvh, c, dd), cpuVar(be, g, vd, dt, kvh, c, dd)
					xa, pa, la := g.Input("qkv", graph.F32, m, (h+2*kvh)*dd), g.Input("pos", graph.I32, m), g.Input("kvlen", graph.I32, 1)
					q := graph.RoPEKVWrite(xa, pa, ka, va, la, h, kvh, inv, neox)
					return []*graph.Array{q, ka, va}, map[*graph.Array]any{xa: qkv, pa: pos, la: []int32{int32(past)}}
				})
			}, func(d *emuDevice) ([]any, error) {
				out, kp, vp := d.alloc(zeros(m*h*dd)), d.alloc(b(kd)), d.alloc(b(vd))
				err := d.run(ropeKVWriteLaunch(out, kp, vp, d.alloc(b(qkv)), d.alloc(b(pos)), d.alloc(b([]int32{int32(past)})), d.alloc(b(inv)),
					dt, neox, m, h, kvh, dd, c, p))
				return []any{d.f32s(out), d.cache(kp, dt), d.cache(vp, dt)}, err
			})
		}
	}
	return cs
}

// gegluKernelCases are the fused products' cases with Gemma's GeGLU
// (gegluVariants), last among kernelCases so that the cases before them
// keep their inputs: in make test a decoding row over f16 weights
// (linear8x1_norm_*), a verification pass over bf16 ones (linear8x8_*)
// and one of each quantized kernel (qlinear1_norm_*, qlinear_norm_*); in
// make test-all every shape, weight type and bits that SwiGLU's cases
// have. Every case draws its inputs either way, so that make test's have
// the inputs they have in make test-all.
func gegluKernelCases(r *rand.Rand) []kcase {
	var cs []kcase
	keep := func(c kcase, picked bool) {
		if picked || testenv.Full() {
			cs = append(cs, c)
		}
	}
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for vi, v := range gegluVariants {
			for _, s := range floatLinearShapes(dt) {
				name := fmt.Sprintf("Linear/%s/%v/M%d_K%d_N%d", v.name, dt, s[0], s[1], s[2])
				picked := (vi == 0 && dt == graph.F16 && s[0] == 1) || (vi == 1 && dt == graph.BF16 && s[0] == 5)
				keep(linearKCase(r, name, v, dt, s[0], s[1], s[2], 2), picked)
			}
		}
	}
	for _, bits := range []int{4, 8} {
		for si, sdt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
			for vi, v := range gegluVariants {
				for _, c := range qlinearCases(r, v, len(linVariants)+vi, bits, si, sdt) {
					picked := (vi == 0 && bits == 4 && sdt == graph.F16 && strings.Contains(c.name, "/M1_") && !strings.Contains(c.name, "/c")) ||
						(vi == 1 && bits == 8 && sdt == graph.BF16 && strings.Contains(c.name, "/M5_"))
					keep(c, picked)
				}
			}
		}
	}
	return cs
}

// TestLinearRowsSameBitsAtAnyM: a fused product's row has the same bits
// whether it is computed alone or among others (greedy ReDrafter's
// verification pass must equal decoding), with x aligned or not (a view
// into a buffer), in matvec8's kernels with the norm and every epilogue and
// in the warp-per-column one. Alone, a row goes to the one-row kernels
// (linear8x1_*, 8 columns a block); among 5 to 16 to the 8-row ones
// (linear8x8_*, 4 columns a block, 8 rows a pass: 5 and 8 in one pass, 9,
// 11 and 16 in two); among 2 to 4 and past 16 to the 4-row ones
// (linear8_*, 8 columns, 4 rows a pass: 17 in 5, the last a 1-row pass).
func TestLinearRowsSameBitsAtAnyM(t *testing.T) {
	if err := linearRowsSameBits(t, newEmuDevice(t, nil), false); err != nil {
		t.Fatal(err)
	}
}

// TestLinearRowsSameBitsCatchesOrder: TestLinearRowsSameBitsAtAnyM fails
// where the 8-row kernels (passes of 5 to 8 rows) sum a column in another
// order than the one-row kernel: the warps in reverse, or a thread's 16-byte
// word's elements in reverse. Each is as accurate, so only the bits show it.
func TestLinearRowsSameBitsCatchesOrder(t *testing.T) {
	t.Parallel()
	raw, err := shaders.Source("matvec.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, bug := range []struct{ name, from, to string }{
		{"warps reversed",
			"const float y = ((part[0][i] + part[1][i]) + part[2][i]) + part[3][i];",
			"const float y = R > 4 ? ((part[3][i] + part[2][i]) + part[1][i]) + part[0][i] : ((part[0][i] + part[1][i]) + part[2][i]) + part[3][i];"},
		{"word's elements reversed",
			"\t\t\tfor (int e = 0; e < 8; e++) {\n#pragma unroll\n\t\t\t\tfor (int c = 0; c < COLS; c++) acc[r][c] = cu_fma(xs[e],",
			"\t\t\tfor (int e0 = 0; e0 < 8; e0++) {\n\t\t\t\tconst int e = R > 4 ? 7 - e0 : e0;\n#pragma unroll\n\t\t\t\tfor (int c = 0; c < COLS; c++) acc[r][c] = cu_fma(xs[e],"},
		{"a block's later column groups with their warps reversed",
			"const float y = ((part[0][i] + part[1][i]) + part[2][i]) + part[3][i];",
			"const float y = cb != int(blockIdx.x) ? ((part[3][i] + part[2][i]) + part[1][i]) + part[0][i] : ((part[0][i] + part[1][i]) + part[2][i]) + part[3][i];"},
	} {
		if !strings.Contains(raw, bug.from) {
			t.Fatalf("matvec.cu no longer contains %q; update the planted order", bug.from)
		}
		d := newEmuDevice(t, map[string]string{"matvec.cu": strings.Replace(raw, bug.from, bug.to, 1)})
		if err := linearRowsSameBits(t, d, true); err == nil {
			t.Errorf("%s: not caught", bug.name)
		} else {
			t.Logf("%s: %v", bug.name, err)
		}
	}
}

// linearRowsSameBits is TestLinearRowsSameBitsAtAnyM on d: the first row
// whose bits depend on m, or nil. first: the first case alone (every fold,
// a pass of each kernel).
func linearRowsSameBits(t *testing.T, d *emuDevice, first bool) error {
	r := rand.New(rand.NewPCG(7, 8))
	b, zeros := graph.AsBytes, func(n int) []byte { return make([]byte, 4*n) }
	const n, eps = 11, 1e-5
	for ci, c := range []struct {
		k     int
		ms    []int // row counts of the joint passes; each row also alone
		flags int
	}{
		{1032, []int{5, 8, 9, 11, 16, 17}, linNorm | linBias | linSwiGLU}, // matvec8's: every thread has words, a column tail
		{1032, []int{3, 5, 8, 17}, linNorm | linResidual},
		{1032, []int{4, 7, 9}, linResidual | linBias},
		{2056, []int{5, 11}, 0},                              // 2 and 3 words a thread: sums over a thread's words
		{70, []int{7, 9}, linNorm | linSwiGLU | linResidual}, // the warp per column
	} {
		if first && ci > 0 {
			break
		}
		m := slices.Max(c.ms)
		d.bufs = d.bufs[:0] // the emulator takes 30 buffers a launch
		k, rows := c.k, n
		if c.flags&linSwiGLU != 0 {
			rows = 2 * n
		}
		x := b(opcases.RandF32(r, m*k, 2))
		w := d.alloc(b(opcases.ScaledWeights(r, graph.F16, rows*k, 1)))
		gain, bias := d.alloc(b(opcases.RandF32(r, k, 1))), d.alloc(b(opcases.RandF32(r, rows, 1)))
		res := b(opcases.RandF32(r, m*n, 4))
		w8 := vecWeights(w, graph.F16, k)
		if w8 != (k%8 == 0) {
			t.Fatalf("k=%d: vecWeights %v", k, w8)
		}
		run := func(xp, rp devptr, mm, g int) []float32 {
			out := d.alloc(zeros(mm * n))
			l := linearGroupsLaunch(out, xp, gain, w, bias, rp, graph.F16, w8, c.flags, mm, k, n, eps, g)
			want := "linear8_"
			switch {
			case mm == 1:
				want = "linear8x1_"
			case mm >= 5 && mm <= 16:
				want = "linear8x8_"
			}
			if w8 && !strings.HasPrefix(l.kernel, want) {
				t.Fatalf("k=%d m=%d launches %s, not %s*", k, mm, l.kernel, want)
			}
			if err := d.run(l); err != nil {
				t.Fatal(err)
			}
			return d.f32s(out)
		}
		keep := len(d.bufs)
		alone := make([]float32, 0, m*n)
		for i := range m {
			// Row i alone, 4 bytes off 16-byte alignment.
			d.bufs = d.bufs[:keep]
			xp := d.alloc(append(make([]byte, 4), x[4*i*k:4*(i+1)*k]...)) + 4
			alone = append(alone, run(xp, d.alloc(res[4*i*n:4*(i+1)*n]), 1, 1)...)
		}
		for j, mm := range c.ms {
			// 1, 2 or all column groups a block (the 8-row kernels'
			// REDRAFTER_CUDA_VERIFY_GROUPS), in turn: the same bits.
			g := []int{1, 2, 8}[j%3]
			d.bufs = d.bufs[:keep]
			all := run(d.alloc(x[:4*mm*k]), d.alloc(res[:4*mm*n]), mm, g)
			for i := range mm * n {
				if math.Float32bits(alone[i]) != math.Float32bits(all[i]) {
					return fmt.Errorf("k=%d flags=%d: row %d column %d is %v alone, %v among %d rows (%d groups a block)", k, c.flags, i/n, i%n, alone[i], all[i], mm, g)
				}
			}
		}
	}
	return nil
}
