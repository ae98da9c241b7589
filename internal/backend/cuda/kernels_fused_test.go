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
)

// fusedKernelCases are the cases of the fused layer kernels (LinearOp,
// RoPEKVWriteOp) against the CPU's composition of the unfused ops: every
// fold on every weight type, matvec8's kernels (k a multiple of 8, rows of
// 4 then a tail, a column tail) and the warp-per-column ones (k not), a
// norm over values small enough that eps matters, and RoPEKVWrite into
// both cache types with partial rotary and grouped heads.
func fusedKernelCases(r *rand.Rand) []kcase {
	var cs []kcase
	add := func(name string, tol float64, ref func(be graph.Backend) ([]any, error), gpu func(d *emuDevice) ([]any, error)) {
		cs = append(cs, kcase{name, tol, ref, gpu})
	}
	b := graph.AsBytes
	zeros := func(n int) []byte { return make([]byte, 4*n) }
	type variant struct {
		name                         string
		norm, bias, swiglu, residual bool
	}
	variants := []variant{
		{"norm", true, false, false, false}, {"norm+bias", true, true, false, false}, {"norm+swiglu", true, false, true, false},
		{"norm+bias+swiglu", true, true, true, false}, {"residual", false, false, false, true}, {"bias+residual", false, true, false, true},
	}
	linear := func(name string, v variant, dt graph.DType, m, k, n int, xScale float32) {
		rows := n
		if v.swiglu {
			rows = 2 * n
		}
		x, gain, w := opcases.RandF32(r, m*k, xScale), opcases.RandF32(r, k, 1), opcases.ScaledWeights(r, dt, rows*k, 1)
		bias, res := opcases.RandF32(r, rows, 1), opcases.RandF32(r, m*n, 4)
		const eps = 1e-5
		add(name, opcases.TolFor(dt), func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, wa := g.Input("x", graph.F32, m, k), g.Input("w", dt, rows, k)
				in := map[*graph.Array]any{xa: x, wa: w}
				f := graph.Fusion{Eps: eps, SwiGLU: v.swiglu}
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
			out, xp, wp := d.alloc(zeros(m*n)), d.alloc(b(x)), d.alloc(b(w))
			gp, bp, rp, flags := xp, xp, xp, 0
			if v.norm {
				gp, flags = d.alloc(b(gain)), flags|linNorm
			}
			if v.bias {
				bp, flags = d.alloc(b(bias)), flags|linBias
			}
			if v.swiglu {
				flags |= linSwiGLU
			}
			if v.residual {
				rp, flags = d.alloc(b(res)), flags|linResidual
			}
			err := d.run(linearLaunch(out, xp, gp, wp, bp, rp, dt, vecWeights(wp, dt, k), flags, m, k, n, eps))
			return []any{d.f32s(out)}, err
		})
	}
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, v := range variants {
			shapes := [][3]int{{3, 70, 6}} // not matvec8's: the warp-per-column kernel
			if dt != graph.F32 {
				shapes = append(shapes, [3]int{5, 264, 9}) // matvec8's 8-row kernels (linear8x8_*): verification, a column tail
				shapes = append(shapes, [3]int{3, 264, 9}) // matvec8's 4-row kernels (linear8_*)
				shapes = append(shapes, [3]int{1, 264, 9}) // matvec8's one-row kernels (linear8x1_*): decoding
			}
			for _, s := range shapes {
				linear(fmt.Sprintf("Linear/%s/%v/M%d_K%d_N%d", v.name, dt, s[0], s[1], s[2]), v, dt, s[0], s[1], s[2], 2)
			}
		}
	}
	// Rows whose mean square is below eps: a norm that forgot eps is off.
	linear("Linear/norm/f32/M2_K40_N5_tiny", variants[0], graph.F32, 2, 40, 5, 0.003)
	linear("Linear/norm/f16/M2_K264_N5_tiny", variants[0], graph.F16, 2, 264, 5, 0.003)

	// Quantized weights (qlinear*): every fold, bits and scale type, one
	// row (qlinear1_*) and 4 + 1 (qlinear_*), every group size, a column
	// tail (and with SwiGLU a block past n's gate and up rows).
	qlinear := func(name string, v variant, bits, gs int, sdt graph.DType, m, k, n int, xScale float32, sc int) {
		rows := n
		if v.swiglu {
			rows = 2 * n
		}
		q := opcases.RandQuant(r, rows, k, bits, gs, sdt)
		codes, scales, biases := q.Parts()
		x, gain := opcases.RandF32(r, m*k, xScale), opcases.RandF32(r, k, 1)
		bias, res := opcases.RandF32(r, rows, 1), opcases.RandF32(r, m*n, 4)
		const eps = 1e-5
		add(name, tolF16, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, k)
				in := map[*graph.Array]any{xa: x}
				f := graph.Fusion{Eps: eps, SwiGLU: v.swiglu}
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
			out, xp := d.alloc(zeros(m*n)), d.alloc(b(x))
			wp, sp, bip := d.alloc(b(codes)), d.alloc(b(scales)), d.alloc(b(biases))
			gp, bp, rp, flags := xp, xp, xp, 0
			if v.norm {
				gp, flags = d.alloc(b(gain)), flags|linNorm
			}
			if v.bias {
				bp, flags = d.alloc(b(bias)), flags|linBias
			}
			if v.swiglu {
				flags |= linSwiGLU
			}
			if v.residual {
				rp, flags = d.alloc(b(res)), flags|linResidual
			}
			err := d.run(qlinearColsLaunch(out, xp, gp, wp, sp, bip, bp, rp, bits, sdt, flags, m, k, n, gs, eps, sc))
			return []any{d.f32s(out)}, err
		})
	}
	for _, bits := range []int{4, 8} {
		for si, sdt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
			for vi, v := range variants {
				for i, s := range [][3]int{{1, 256, 9}, {5, 384, 7}} {
					gs := []int{32, 64, 128}[(si+vi+i)%3]
					m, k, n := s[0], s[1], s[2]
					// One row: with sets of every width qmv1Cols may choose.
					widths := []int{qmvSetColumns(m)}
					if m == 1 {
						widths = qmv1Widths
					}
					for _, sc := range widths {
						qlinear(fmt.Sprintf("Linear/%s/%d-bit/g%d/%v/M%d_K%d_N%d%s", v.name, bits, gs, sdt, m, k, n, widthSuffix(m, sc)), v, bits, gs, sdt, m, k, n, 2, sc)
					}
				}
			}
		}
	}
	qlinear("Linear/norm/4-bit/g64/f16/M1_K256_N9_tiny", variants[0], 4, 64, graph.F16, 1, 256, 9, 0.003, qmv1SetCols)
	qlinear("Linear/norm/8-bit/g32/bf16/M5_K384_N7_tiny", variants[0], 8, 32, graph.BF16, 5, 384, 7, 0.003, qmvSetCols)

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
