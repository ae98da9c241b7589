package cuda

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// A kernel case: the op on the CPU reference backend (ref) and the same
// computation as CUDA launches on the emulated device (gpu), on the same
// fresh random inputs. Float outputs are compared relative to the largest
// reference magnitude; integer outputs must be equal.
type kcase struct {
	name string
	tol  float64
	ref  func(be graph.Backend) ([]any, error)
	gpu  func(d *emuDevice) ([]any, error)
}

const (
	tolF32 = 1e-4
	tolF16 = 1e-2
)

// evalRef runs a one-op graph on be and reads its outputs (f16 as floats).
func evalRef(be graph.Backend, build func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any)) ([]any, error) {
	g := graph.New()
	outs, inputs := build(g)
	var res []any
	err := graph.Eval(be, inputs, func(p *graph.Plan) error {
		for _, o := range outs {
			n := o.Shape().Numel()
			switch o.DType() {
			case graph.I32:
				v := make([]int32, n)
				if err := p.Read(o, v); err != nil {
					return err
				}
				res = append(res, v)
			case graph.F16:
				h := make([]uint16, n)
				if err := p.Read(o, h); err != nil {
					return err
				}
				res = append(res, f16s(h))
			default:
				v := make([]float32, n)
				if err := p.Read(o, v); err != nil {
					return err
				}
				res = append(res, v)
			}
		}
		return nil
	}, outs...)
	return res, err
}

func f16s(h []uint16) []float32 {
	f := make([]float32, len(h))
	for i, x := range h {
		f[i] = quant.F16ToF32(x)
	}
	return f
}

// cpuVar is a Var array holding data on be (a KV cache).
func cpuVar(be graph.Backend, g *graph.Graph, data any, dt graph.DType, shape ...int) *graph.Array {
	b := graph.AsBytes(data)
	buf, err := be.Alloc(len(b))
	if err != nil {
		panic(err)
	}
	if err := be.Write(buf, 0, b); err != nil {
		panic(err)
	}
	return g.Var("cache", buf, 0, dt, shape...)
}

func (d *emuDevice) runAll(ls ...*launch) error {
	for _, l := range ls {
		if err := d.run(l); err != nil {
			return err
		}
	}
	return nil
}

func kernelCases(r *rand.Rand) []kcase {
	var cs []kcase
	add := func(name string, tol float64, ref func(be graph.Backend) ([]any, error), gpu func(d *emuDevice) ([]any, error)) {
		cs = append(cs, kcase{name, tol, ref, gpu})
	}
	b := graph.AsBytes
	zeros := func(n int) []byte { return make([]byte, 4*n) }
	floatDTs := []graph.DType{graph.F32, graph.F16, graph.BF16}

	for _, dt := range floatDTs {
		// Embed (rows of 33, one block, and of 300, over 3 blocks with a
		// tail), and MatMul at decode/verify shapes with tails in K and N.
		for _, dd := range []int{33, 300} {
			v, n := 50, 7
			table, ids := opcases.ScaledWeights(r, dt, v*dd, 1), opcases.RandInts(r, n, 0, v)
			add(fmt.Sprintf("Embed/%v/V%d_D%d_N%d", dt, v, dd, n), opcases.TolFor(dt), func(be graph.Backend) ([]any, error) {
				return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					ta, ia := g.Input("table", dt, v, dd), g.Input("ids", graph.I32, n)
					return []*graph.Array{graph.Embed(ta, ia)}, map[*graph.Array]any{ta: table, ia: ids}
				})
			}, func(d *emuDevice) ([]any, error) {
				out := d.alloc(zeros(n * dd))
				err := d.run(embedLaunch(out, d.alloc(b(table)), d.alloc(b(ids)), dt, n, dd, v))
				return []any{d.f32s(out)}, err
			})
		}
		for _, s := range [][3]int{{1, 1, 1}, {1, 33, 7}, {5, 129, 9}, {9, 64, 5}} {
			m, k, nn := s[0], s[1], s[2]
			x, w := opcases.RandF32(r, m*k, 1), opcases.ScaledWeights(r, dt, nn*k, 1)
			add(fmt.Sprintf("MatMul/%v/M%d_K%d_N%d", dt, m, k, nn), opcases.TolFor(dt), func(be graph.Backend) ([]any, error) {
				return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					xa, wa := g.Input("x", graph.F32, m, k), g.Input("w", dt, nn, k)
					return []*graph.Array{graph.MatMul(xa, wa)}, map[*graph.Array]any{xa: x, wa: w}
				})
			}, func(d *emuDevice) ([]any, error) {
				out := d.alloc(zeros(m * nn))
				err := d.run(matvecLaunch(out, d.alloc(b(x)), d.alloc(b(w)), dt, m, k, nn))
				return []any{d.f32s(out)}, err
			})
		}
	}
	// Quantized: every bits × scale dtype, groups of 32, 64 and 128; rows of
	// x 1 to 4 at a time (qmatvec's passes) and up to matvecMaxRows; k =
	// 2048, where every thread of a qmatvec block has chunks; odd n, past
	// one and two column sets of a block.
	for _, bits := range []int{4, 8} {
		for _, sdt := range floatDTs {
			for _, s := range [][4]int{{3, 96, 9, 32}, {1, 256, 5, 64}, {2, 1152, 3, 128}, {5, 2048, 9, 64}, {17, 256, 7, 32}, {matvecMaxRows, 128, 3, 128}} {
				m, k, n, gs := s[0], s[1], s[2], s[3]
				words := make([]uint32, n*k*bits/32)
				for i := range words {
					words[i] = r.Uint32()
				}
				scales, biases := opcases.ScaledWeights(r, sdt, n*k/gs, 0.1), opcases.ScaledWeights(r, sdt, n*k/gs, 0.5)
				x, ids := opcases.RandF32(r, m*k, 1), opcases.RandInts(r, m, 0, n)
				quantized := func(g *graph.Graph) (*graph.Array, map[*graph.Array]any) {
					wa, sa, ba := g.Input("w", graph.U32, n, k*bits/32), g.Input("s", sdt, n, k/gs), g.Input("b", sdt, n, k/gs)
					return graph.Quantized(wa, sa, ba, bits, gs), map[*graph.Array]any{wa: words, sa: scales, ba: biases}
				}
				// One row: with sets of every width qmv1Cols may choose.
				widths := []int{qmvSetColumns(m)}
				if m == 1 {
					widths = qmv1Widths
				}
				for _, sc := range widths {
					add(fmt.Sprintf("QMatMul/%d-bit/g%d/%v/M%d_K%d_N%d%s", bits, gs, sdt, m, k, n, widthSuffix(m, sc)), tolF16, func(be graph.Backend) ([]any, error) {
						return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
							q, in := quantized(g)
							xa := g.Input("x", graph.F32, m, k)
							in[xa] = x
							return []*graph.Array{graph.MatMul(xa, q)}, in
						})
					}, func(d *emuDevice) ([]any, error) {
						out := d.alloc(zeros(m * n))
						err := d.run(qmatvecColsLaunch(out, d.alloc(b(x)), d.alloc(b(words)), d.alloc(b(scales)), d.alloc(b(biases)), bits, sdt, m, k, n, gs, sc))
						return []any{d.f32s(out)}, err
					})
				}
				add(fmt.Sprintf("QEmbed/%d-bit/g%d/%v/V%d_D%d_N%d", bits, gs, sdt, n, k, m), tolF16, func(be graph.Backend) ([]any, error) {
					return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
						q, in := quantized(g)
						ia := g.Input("ids", graph.I32, m)
						in[ia] = ids
						return []*graph.Array{graph.Embed(q, ia)}, in
					})
				}, func(d *emuDevice) ([]any, error) {
					out := d.alloc(zeros(m * k))
					err := d.run(qembedLaunch(out, d.alloc(b(words)), d.alloc(b(scales)), d.alloc(b(biases)), d.alloc(b(ids)), bits, sdt, m, k, n, gs))
					return []any{d.f32s(out)}, err
				})
			}
		}
	}
	{ // RMSNorm with a tail past the block.
		m, dd := 3, 300
		x, w := opcases.RandF32(r, m*dd, 2), opcases.RandF32(r, dd, 1)
		add("RMSNorm/M3_D300", tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, wa := g.Input("x", graph.F32, m, dd), g.Input("w", graph.F32, dd)
				return []*graph.Array{graph.RMSNorm(xa, wa, 1e-5)}, map[*graph.Array]any{xa: x, wa: w}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m * dd))
			err := d.run(rmsNormLaunch(out, d.alloc(b(x)), d.alloc(b(w)), m, dd, 1e-5))
			return []any{d.f32s(out)}, err
		})
	}
	for _, neox := range []bool{true, false} { // RoPE: positions into the thousands, dims past 2P copied.
		m, h, dd, p := 5, 3, 40, 16
		x, pos := opcases.RandF32(r, m*h*dd, 1), opcases.RandInts(r, m, 0, 5000)
		freq := make([]float32, p)
		for j := range freq {
			freq[j] = float32(math.Pow(10000, -float64(2*j)/float64(2*p)))
		}
		add(fmt.Sprintf("RoPE/neox%v/M%d_H%d_D%d_P%d", neox, m, h, dd, p), tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, pa := g.Input("x", graph.F32, m, h, dd), g.Input("pos", graph.I32, m)
				return []*graph.Array{graph.RoPE(xa, pa, freq, neox)}, map[*graph.Array]any{xa: x, pa: pos}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m * h * dd))
			err := d.run(ropeLaunch(out, d.alloc(b(x)), d.alloc(b(pos)), d.alloc(b(freq)), neox, m, h, dd, p))
			return []any{d.f32s(out)}, err
		})
	}
	{ // Elementwise, with a tail past the last block.
		m, dd := 3, 333
		n := m * dd
		x, y, bias := opcases.RandF32(r, n, 4), opcases.RandF32(r, n, 4), opcases.RandF32(r, dd, 1)
		add("SiLU/N999", tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, dd)
				return []*graph.Array{graph.SiLU(xa)}, map[*graph.Array]any{xa: x}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(n))
			err := d.run(siluLaunch(out, d.alloc(b(x)), n))
			return []any{d.f32s(out)}, err
		})
		add("SwiGLU/N999", tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, ya := g.Input("x", graph.F32, m, dd), g.Input("y", graph.F32, m, dd)
				return []*graph.Array{graph.SwiGLU(xa, ya)}, map[*graph.Array]any{xa: x, ya: y}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(n))
			err := d.run(swigluLaunch(out, d.alloc(b(x)), d.alloc(b(y)), n))
			return []any{d.f32s(out)}, err
		})
		add("GeGLU/N999", tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, ya := g.Input("x", graph.F32, m, dd), g.Input("y", graph.F32, m, dd)
				return []*graph.Array{graph.GeGLU(xa, ya)}, map[*graph.Array]any{xa: x, ya: y}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(n))
			err := d.run(gegluLaunch(out, d.alloc(b(x)), d.alloc(b(y)), n))
			return []any{d.f32s(out)}, err
		})
		add("SoftCap/N999", tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, dd)
				return []*graph.Array{graph.SoftCap(xa, 1.5)}, map[*graph.Array]any{xa: x}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(n))
			err := d.run(softcapLaunch(out, d.alloc(b(x)), n, 1.5))
			return []any{d.f32s(out)}, err
		})
		for _, op := range []struct {
			name   string
			kernel string
			f      func(a, b *graph.Array) *graph.Array
		}{{"Add", "add_f32", graph.Add}, {"Mul", "mul_f32", graph.Mul}} {
			for _, bcast := range []bool{false, true} {
				bb, nb := y, n
				if bcast {
					bb, nb = bias, dd
				}
				add(fmt.Sprintf("%s/M%d_D%d_broadcast%v", op.name, m, dd, bcast), tolF32, func(be graph.Backend) ([]any, error) {
					return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
						xa := g.Input("x", graph.F32, m, dd)
						ya := g.Input("y", graph.F32, m, dd)
						if bcast {
							ya = g.Input("y", graph.F32, dd)
						}
						return []*graph.Array{op.f(xa, ya)}, map[*graph.Array]any{xa: x, ya: bb}
					})
				}, func(d *emuDevice) ([]any, error) {
					out := d.alloc(zeros(n))
					err := d.run(binaryLaunch(op.kernel, out, d.alloc(b(x)), d.alloc(b(bb)), n, nb))
					return []any{d.f32s(out)}, err
				})
			}
		}
		da, db := 5, 9
		ca, cb := opcases.RandF32(r, m*da, 1), opcases.RandF32(r, m*db, 1)
		add("Concat/M3_5+9", 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, ya := g.Input("a", graph.F32, m, da), g.Input("b", graph.F32, m, db)
				return []*graph.Array{graph.Concat(xa, ya)}, map[*graph.Array]any{xa: ca, ya: cb}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m * (da + db)))
			err := d.run(concatLaunch(out, d.alloc(b(ca)), d.alloc(b(cb)), m, da, db))
			return []any{d.f32s(out)}, err
		})
	}
	// attnCase adds an Attention case (the list below says which).
	attnCase := func(dt graph.DType, s attnKCase, softcap float32) {
		cc := s.pa + s.n + 3
		if s.cap > 0 {
			cc = s.cap
		}
		name := fmt.Sprintf("Attention/%v/%s/N%d_H%d_KVH%d_D%d_past%d", dt, s.kind, s.n, s.h, s.kvh, s.d, s.pa)
		if s.cap > 0 {
			name += fmt.Sprintf("_cap%d", s.cap)
		}
		if s.window > 0 {
			name += fmt.Sprintf("_window%d", s.window)
		}
		if softcap > 0 {
			name += fmt.Sprintf("_softcap%g", softcap)
		}
		if s.path != "" {
			name += "_" + s.path
		}
		k, v := opcases.RandF32(r, cc*s.kvh*s.d, 1), opcases.RandF32(r, cc*s.kvh*s.d, 1)
		var kd, vd any = k, v
		if dt == graph.F16 {
			kd, vd = quant.F32sToF16(k), quant.F32sToF16(v)
		}
		q := opcases.RandF32(r, s.n*s.h*s.d, 1)
		end := make([]int32, s.n)
		for i := range end {
			end[i] = int32(s.n - 1)
		}
		if s.kind == "tree" {
			end = opcases.RandomTree(r, s.n)
		}
		scale := float32(1 / math.Sqrt(float64(s.d)))
		add(name, tolF32, func(be graph.Backend) ([]any, error) {
			res, err := evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				qa := g.Input("q", graph.F32, s.n, s.h, s.d)
				ka, va := g.Input("k", dt, s.kvh, cc, s.d), g.Input("v", dt, s.kvh, cc, s.d)
				la, ea := g.Input("kvlen", graph.I32, 1), g.Input("end", graph.I32, s.n)
				return []*graph.Array{graph.AttentionWith(graph.AttentionOp{Scale: scale, Window: s.window, SoftCap: softcap}, qa, ka, va, la, ea)},
					map[*graph.Array]any{qa: q, ka: kd, va: vd, la: []int32{int32(s.pa)}, ea: end}
			})
			if s.path == "split" && err == nil {
				res = append(res, res...) // the split kernel's two runs, below
			}
			return res, err
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(s.n * s.h * s.d))
			qp, kp, vp := d.alloc(b(q)), d.alloc(b(kd)), d.alloc(b(vd))
			lp, ep := d.alloc(b([]int32{int32(s.pa)})), d.alloc(b(end))
			if s.path != "split" {
				l, err := attentionLaunch(out, qp, kp, vp, lp, ep, dt, s.n, s.h, s.kvh, s.d, cc, scale, s.window, softcap)
				if err != nil {
					return nil, err
				}
				err = d.run(l)
				return []any{d.f32s(out)}, err
			}
			scratch := d.alloc(make([]byte, attnScratchBytes(s.n, s.h, s.d, attnChunks(cc))))
			l, err := attentionSplitLaunch(out, qp, kp, vp, lp, ep, scratch, dt, s.n, s.h, s.kvh, s.d, cc, scale, s.window, softcap)
			if err != nil {
				return nil, err
			}
			// Twice, as a plan runs, both results checked: the first
			// run must find its last blocks (with stale counts or
			// partials of a previous run none could hide a miscount),
			// and leave the counts zero, or the second merges nothing.
			if err := d.run(l); err != nil {
				return nil, err
			}
			first := d.f32s(out)
			clear(d.bytes(out))
			err = d.run(l)
			return []any{first, d.f32s(out)}, err
		})
	}
	for _, dt := range []graph.DType{graph.F32, graph.F16} {
		// KV cache: write n rows at past; compact an accepted path.
		c, kvh, dd, past, n := 40, 2, 20, 13, 7
		rowlen := kvh * dd
		cache := opcases.RandF32(r, c*rowlen, 1)
		var cacheData any = cache
		if dt == graph.F16 {
			cacheData = quant.F32sToF16(cache)
		}
		rows := opcases.RandF32(r, n*rowlen, 1)
		add(fmt.Sprintf("KVWrite/%v/N%d_at%d", dt, n, past), 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ca := cpuVar(be, g, cacheData, dt, kvh, c, dd)
				ra, la := g.Input("rows", graph.F32, n, kvh, dd), g.Input("kvlen", graph.I32, 1)
				return []*graph.Array{graph.KVWrite(ca, ra, la)}, map[*graph.Array]any{ra: rows, la: []int32{int32(past)}}
			})
		}, func(d *emuDevice) ([]any, error) {
			cp := d.alloc(b(cacheData))
			err := d.run(kvWriteLaunch(cp, d.alloc(b(rows)), d.alloc(b([]int32{int32(past)})), dt, n, rowlen, c, dd))
			return []any{d.cache(cp, dt)}, err
		})
		idx := []int32{0, 2, 3, 6}
		add(fmt.Sprintf("KVCompact/%v/idx%v_at%d", dt, idx, past), 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ca := cpuVar(be, g, cacheData, dt, kvh, c, dd)
				la, ia := g.Input("kvlen", graph.I32, 1), g.Input("idx", graph.I32, len(idx))
				return []*graph.Array{graph.KVCompact(ca, la, ia)}, map[*graph.Array]any{la: []int32{int32(past)}, ia: idx}
			})
		}, func(d *emuDevice) ([]any, error) {
			cp := d.alloc(b(cacheData))
			err := d.run(kvCompactLaunch(cp, d.alloc(b([]int32{int32(past)})), d.alloc(b(idx)), dt, len(idx), rowlen, c, dd))
			return []any{d.cache(cp, dt)}, err
		})
		// Attention: decode, a causal chain, and a random tree in one chunk;
		// then decode and trees over long contexts, where the split kernel
		// (split) and the one that walks the chunks (walk) both run, with
		// the chunk boundaries inside the new keys, grouped-query heads, and
		// head dims for both chunk paths: multiples of 8 (att_chunk8: 40, 5
		// words a V row, 6 rows a step, two lanes idle; 64, 8 words, 4 rows;
		// 160 and 256, one row a step) and others (att_chunk1: 33, and 100
		// over several chunks).
		// The split cases over a cache of capacity cap with a short context
		// are decode and verification as a long cache starts: empty chunks'
		// blocks leave, and one chunk's block stores the result itself (the
		// first one the TinyLlama decode shape).
		for _, s := range []attnKCase{{"decode", 1, 4, 2, 40, 37, "", 0, 0}, {"chain", 6, 4, 4, 64, 5, "", 0, 0}, {"tree", 9, 6, 2, 33, 20, "", 0, 0},
			{"decode", 1, 4, 2, 40, 1000, "split", 0, 0}, {"decode", 1, 4, 2, 40, 2100, "walk", 0, 0},
			{"tree", 6, 4, 1, 64, 2046, "split", 0, 0}, {"tree", 6, 4, 1, 64, 1020, "walk", 0, 0},
			{"decode", 1, 2, 1, 160, 1030, "split", 0, 0}, {"decode", 1, 2, 1, 100, 700, "split", 0, 0},
			{"decode", 1, 2, 1, 256, 600, "split", 0, 0},
			{"decode", 1, 32, 4, 64, 100, "split", 2048, 0}, {"tree", 6, 4, 1, 64, 255, "split", 1024, 0}} {
			attnCase(dt, s, 0)
		}
	}
	{ // Row reductions, with repeated values for the ties.
		m, v, k := 3, 1001, 5
		x := opcases.RandF32(r, m*v, 8)
		for i := range x {
			x[i] = float32(math.Round(float64(x[i]) * 4))
		}
		add("LogSoftmax/M3_V1001", tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, v)
				return []*graph.Array{graph.LogSoftmax(xa)}, map[*graph.Array]any{xa: x}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m * v))
			err := d.run(logSoftmaxLaunch(out, d.alloc(b(x)), m, v))
			return []any{d.f32s(out)}, err
		})
		add("Argmax/M3_V1001_ties", 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, v)
				return []*graph.Array{graph.Argmax(xa)}, map[*graph.Array]any{xa: x}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m))
			err := d.run(argmaxLaunch(out, d.alloc(b(x)), m, v))
			return []any{d.i32s(out)}, err
		})
		add("TopK/M3_V1001_K5_ties", 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, v)
				return []*graph.Array{graph.TopK(xa, k)}, map[*graph.Array]any{xa: x}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m * k))
			err := d.run(topKLaunch(out, d.alloc(b(x)), m, v, k))
			return []any{d.i32s(out)}, err
		})
	}
	cs = append(cs, draftCases(r)...)       // kernels_draft_test.go
	cs = append(cs, fusedKernelCases(r)...) // kernels_fused_test.go
	// Decode with 16-byte weight loads: k a multiple of 8, with and
	// without a tail past the last full block step (1024 weights), n with
	// and without a tail past a block's 8 columns.
	for _, dt := range []graph.DType{graph.F16, graph.BF16} {
		for _, s := range [][3]int{{1, 8, 3}, {1, 264, 9}, {5, 512, 7}, {9, 64, 5}, {3, 2056, 17}, {6, 1024, 16}} {
			m, k, n := s[0], s[1], s[2]
			x, w := opcases.RandF32(r, m*k, 1), opcases.ScaledWeights(r, dt, n*k, 1)
			add(fmt.Sprintf("MatVec8/%v/M%d_K%d_N%d", dt, m, k, n), opcases.TolFor(dt), func(be graph.Backend) ([]any, error) {
				return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					xa, wa := g.Input("x", graph.F32, m, k), g.Input("w", dt, n, k)
					return []*graph.Array{graph.MatMul(xa, wa)}, map[*graph.Array]any{xa: x, wa: w}
				})
			}, func(d *emuDevice) ([]any, error) {
				out := d.alloc(zeros(m * n))
				err := d.run(matvec8Launch(out, d.alloc(b(x)), d.alloc(b(w)), dt, m, k, n))
				return []any{d.f32s(out)}, err
			})
		}
	}
	// Prefill on tensor cores: tails in every dimension, and f16/bf16 x
	// split in two (hi + lo) keeps the error at f32's tolerance.
	for _, dt := range []graph.DType{graph.F16, graph.BF16} {
		for _, s := range [][3]int{{65, 16, 8}, {70, 37, 33}, {130, 100, 70}} {
			m, k, n := s[0], s[1], s[2]
			x, w := opcases.RandF32(r, m*k, 4), opcases.ScaledWeights(r, dt, n*k, 1)
			add(fmt.Sprintf("MatMulMMA/%v/M%d_K%d_N%d", dt, m, k, n), tolF32, func(be graph.Backend) ([]any, error) {
				return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					xa, wa := g.Input("x", graph.F32, m, k), g.Input("w", dt, n, k)
					return []*graph.Array{graph.MatMul(xa, wa)}, map[*graph.Array]any{xa: x, wa: w}
				})
			}, func(d *emuDevice) ([]any, error) {
				out := d.alloc(zeros(m * n))
				err := d.run(matmulMMALaunch(out, d.alloc(b(x)), d.alloc(b(w)), dt, m, k, n))
				return []any{d.f32s(out)}, err
			})
		}
	}
	// The bandwidth probe: every block's XOR of the 16-byte words it read.
	{
		words, blocks := 4*(3*256+37), 3
		x := make([]uint32, words)
		for i := range x {
			x[i] = r.Uint32()
		}
		add(fmt.Sprintf("ReadXor/W%d_B%d", words, blocks), 0, func(be graph.Backend) ([]any, error) {
			want := make([]int32, blocks)
			for q := 0; q < words/4; q++ {
				b := (q / 256) % blocks
				want[b] ^= int32(x[4*q] ^ x[4*q+1] ^ x[4*q+2] ^ x[4*q+3])
			}
			return []any{want}, nil
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(blocks))
			err := d.run(readXorLaunch(out, d.alloc(b(x)), words, blocks))
			return []any{d.i32s(out)}, err
		})
	}
	// Sliding-window attention (last, so that the other cases' inputs stay
	// what they were): a window inside one chunk and cutting a tree; over
	// long caches, chunks wholly before the window (split: their blocks
	// leave, the merge starts at the window's chunk; walk: skipped), the
	// window starting inside a chunk and inside the new keys.
	for _, dt := range []graph.DType{graph.F32, graph.F16} {
		for _, s := range []attnKCase{{"decode", 1, 4, 2, 40, 37, "", 0, 9}, {"tree", 9, 6, 2, 33, 20, "", 0, 5},
			{"decode", 1, 4, 2, 40, 1000, "split", 0, 300}, {"decode", 1, 4, 2, 64, 2100, "walk", 0, 700},
			{"tree", 6, 4, 1, 64, 2046, "split", 0, 260}, {"tree", 6, 4, 1, 64, 1020, "walk", 0, 3},
			{"chain", 6, 4, 1, 33, 700, "split", 0, 400}, {"decode", 1, 32, 4, 64, 600, "split", 2048, 512}} {
			attnCase(dt, s, 0)
		}
	}
	// Soft-capped scores (Gemma 2; last too), caps low enough to bend most
	// of them: one chunk, split and walked, the 16-byte path (d = 64) and
	// the element path (d = 33), with and without a window.
	for _, dt := range []graph.DType{graph.F32, graph.F16} {
		for _, s := range []attnKCase{{"decode", 1, 4, 2, 40, 37, "", 0, 0}, {"tree", 9, 6, 2, 33, 20, "", 0, 5},
			{"decode", 1, 4, 2, 64, 1000, "split", 0, 0}, {"decode", 1, 4, 2, 64, 2100, "walk", 0, 700},
			{"tree", 6, 4, 1, 64, 1020, "walk", 0, 0}} {
			attnCase(dt, s, 0.5)
		}
	}
	cs = append(cs, gegluKernelCases(r)...) // fused products with GeGLU (last too; kernels_fused_test.go)
	return cs
}

// attnKCase is the shape of an Attention case of kernelCases.
type attnKCase struct {
	kind             string
	n, h, kvh, d, pa int
	path             string // "" (one chunk), "split" or "walk"
	cap              int    // the cache's capacity, if not pa + n + 3
	window           int    // sliding window; 0: none
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cache reads a KV cache as floats.
func (d *emuDevice) cache(p devptr, dt graph.DType) []float32 {
	if dt == graph.F16 {
		raw := d.bytes(p)
		h := make([]uint16, len(raw)/2)
		for i := range h {
			h[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		}
		return f16s(h)
	}
	return d.f32s(p)
}

// compare describes the first disagreement, or returns "".
func compare(got, want []any, tol float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		switch w := want[i].(type) {
		case []int32:
			if g := got[i].([]int32); !slices.Equal(g, w) {
				return fmt.Sprintf("output %d: got %v, want %v", i, g, w)
			}
		case []float32:
			g := got[i].([]float32)
			if len(g) != len(w) {
				return fmt.Sprintf("output %d: %d values, want %d", i, len(g), len(w))
			}
			var big, diff float64
			at := 0
			for j := range w {
				if math.IsNaN(float64(w[j])) {
					if !math.IsNaN(float64(g[j])) {
						return fmt.Sprintf("output %d: got %v at [%d], want NaN", i, g[j], j)
					}
					continue // NaN where the reference has NaN
				}
				big = math.Max(big, math.Abs(float64(w[j])))
				if dd := math.Abs(float64(g[j]) - float64(w[j])); dd > diff || math.IsNaN(dd) {
					diff, at = dd, j
					if math.IsNaN(dd) {
						diff = math.Inf(1)
					}
				}
			}
			if rel := diff / math.Max(big, 1e-30); rel > tol || (tol == 0 && diff != 0) {
				return fmt.Sprintf("output %d: error %.3g > %.3g at [%d]: got %v, want %v", i, rel, tol, at, g[at], w[at])
			}
		}
	}
	return ""
}

// widthSuffix ends the name of a quantized product's case: "/c4" and
// "/c2" for one row with sets of 4 and 2 columns, nothing for the default
// width (the cases' names before the narrow kernels existed).
func widthSuffix(m, sc int) string {
	if sc == qmvSetColumns(m) {
		return ""
	}
	return fmt.Sprintf("/c%d", sc)
}

// seed returns the random seed of this run (testenv.Seed: logged, and
// replayed from REDRAFTER_SEED).
func seed(t *testing.T) uint64 { return testenv.Seed(t) }

// TestKernels runs every case on the emulated device against the CPU
// reference backend, then checks that the cases ran every kernel the .cu
// files define (from their PTX): a kernel without a case fails the test.
func TestKernels(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(seed(t), 14))
	d := newEmuDevice(t, nil)
	ref := cpu.NewReference()
	for _, c := range kernelCases(r) {
		t.Run(c.name, func(t *testing.T) {
			want, err := c.ref(ref)
			if err != nil {
				t.Fatalf("cpu: %v", err)
			}
			d.bufs = d.bufs[:0]
			got, err := c.gpu(d)
			if err != nil {
				t.Fatalf("cuda: %v", err)
			}
			if msg := compare(got, want, c.tol); msg != "" {
				t.Error(msg)
			}
		})
	}
	if f := flag.Lookup("test.run"); t.Failed() || (f != nil && strings.Contains(f.Value.String(), "/")) {
		return // a failed or filtered run covers part of the kernels
	}
	var all []string
	for _, f := range shaders.Files() {
		names, err := shaders.Kernels(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, names...)
	}
	slices.Sort(all)
	if ran := d.ranNames(); !slices.Equal(ran, all) {
		var missing []string
		for _, k := range all {
			if !d.ran[k] {
				missing = append(missing, k)
			}
		}
		t.Errorf("no case runs %d of the %d kernels: %v", len(missing), len(all), missing)
	}
	t.Logf("%d kernels run against the CPU reference", len(d.ran))
}

// TestMatVecUnalignedXSameBits: matvec8 and qmatvec read x 16 bytes at a
// time where it is 16-byte aligned and one float at a time where it is not
// (a view into a buffer); the sums, and so the bits, are the same. For
// matvec8 each row is also computed alone (matvec8x1_*, the decoding
// kernel), aligned and not, and has the bits it has among 3 and 17
// (matvec8_*: 4 rows a pass) and among 5, 8, 9, 11 and 16 (matvec8x8_*:
// 8 rows a pass).
func TestMatVecUnalignedXSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	d := newEmuDevice(t, nil)
	const m, k, n = 17, 2112, 11 // every thread of a block has 2 or 3 words; a column tail
	const bits, gs = 4, 64
	b, zeros := graph.AsBytes, func(n int) []byte { return make([]byte, 4*n) }
	x := b(opcases.RandF32(r, m*k, 1))
	w := d.alloc(b(opcases.ScaledWeights(r, graph.F16, n*k, 1)))
	words := make([]uint32, n*k*bits/32)
	for i := range words {
		words[i] = r.Uint32()
	}
	qw := d.alloc(b(words))
	scales := d.alloc(b(opcases.ScaledWeights(r, graph.F16, n*k/gs, 0.1)))
	biases := d.alloc(b(opcases.ScaledWeights(r, graph.F16, n*k/gs, 0.5)))
	for _, kernel := range []string{"matvec8", "qmatvec"} {
		mm := m
		if kernel == "qmatvec" {
			mm = 5
		}
		var outs [2][]float32
		for i, off := range []int{0, 4} {
			xp := d.alloc(append(make([]byte, off), x[:4*mm*k]...)) + devptr(off)
			out := d.alloc(zeros(mm * n))
			l := matvec8Launch(out, xp, w, graph.F16, mm, k, n)
			if kernel == "qmatvec" {
				l = qmatvecLaunch(out, xp, qw, scales, biases, bits, graph.F16, mm, k, n, gs)
			}
			if err := d.run(l); err != nil {
				t.Fatal(err)
			}
			outs[i] = d.f32s(out)
		}
		for i := range outs[0] {
			if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
				t.Fatalf("%s: output %d is %v with x aligned, %v with x 4 bytes off", kernel, i, outs[0][i], outs[1][i])
			}
		}
		if kernel != "matvec8" {
			continue // qmatvec's rows alone: TestQMatVecRowsSameBitsAnyM
		}
		keep := len(d.bufs) // the emulator takes 30 buffers a launch: each launch's own only
		for _, mm := range []int{3, 5, 8, 9, 11, 16} {
			// 1, 2 or all 3 column groups a block (the 8-row kernels'
			// REDRAFTER_CUDA_VERIFY_GROUPS): the same bits.
			for _, g := range []int{1, 2, 8} {
				d.bufs = d.bufs[:keep]
				out := d.alloc(zeros(mm * n))
				l := matvec8GroupsLaunch(out, d.alloc(x[:4*mm*k]), w, graph.F16, mm, k, n, g)
				if want := map[bool]string{false: "matvec8_f16", true: "matvec8x8_f16"}[mm >= 5 && mm <= 16]; l.kernel != want {
					t.Fatalf("m = %d launches %s, not %s", mm, l.kernel, want)
				}
				if err := d.run(l); err != nil {
					t.Fatal(err)
				}
				for i, got := range d.f32s(out) {
					if want := outs[0][i]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("matvec8: row %d column %d is %v among %d rows (%d groups a block), %v among %d", i/n, i%n, got, mm, g, want, m)
					}
				}
			}
		}
		for row := range m {
			// Alone, x aligned for the even rows, 4 bytes off for the odd.
			off := 4 * (row % 2)
			d.bufs = d.bufs[:keep]
			xp := d.alloc(append(make([]byte, off), x[4*row*k:4*(row+1)*k]...)) + devptr(off)
			out := d.alloc(zeros(n))
			l := matvec8Launch(out, xp, w, graph.F16, 1, k, n)
			if l.kernel != "matvec8x1_f16" {
				t.Fatalf("m = 1 launches %s, not matvec8x1_f16", l.kernel)
			}
			if err := d.run(l); err != nil {
				t.Fatal(err)
			}
			for j, got := range d.f32s(out) {
				if want := outs[0][row*n+j]; math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("matvec8: row %d column %d is %v alone (x %d bytes off alignment), %v among %d rows", row, j, got, off, want, m)
				}
			}
		}
	}
}

// TestMatVec8ColsMatchSource: the launches' grids (matvec8Name's columns a
// block) are matvec.cu's: a grid for more columns a block than the kernel
// computes leaves columns unwritten (which the op cases see), one for fewer
// runs blocks past n that write nothing (which they would not).
func TestMatVec8ColsMatchSource(t *testing.T) {
	src, err := shaders.Source("matvec.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range []struct {
		name string
		cols int
	}{{"MV8_COLS", matvec8Cols}, {"MV8_COLS8", matvec8Cols8}} {
		if want := fmt.Sprintf("#define %s %d\n", def.name, def.cols); !strings.Contains(src, want) && !strings.Contains(src, want[:len(want)-1]+" ") {
			t.Errorf("matvec.cu does not define %s as %d", def.name, def.cols)
		}
	}
	for m, want := range map[int]int{1: 8, 2: 8, 4: 8, 5: 4, 11: 4, 16: 4, 17: 8, 256: 8} {
		if l := matvec8GroupsLaunch(0, 0, 0, graph.F16, m, 2048, 5632, 4); l.grid[0] != ceilDiv(5632/want, 4) {
			t.Errorf("m = %d: %d blocks of 4 column groups over 5632 columns, want %d", m, l.grid[0], ceilDiv(5632/want, 4))
		}
		if _, cols := matvec8Name("matvec8", m); cols != want {
			t.Errorf("m = %d: %d columns a block, want %d", m, cols, want)
		}
		if l := matvec8Launch(0, 0, 0, graph.F16, m, 2048, 5632); l.grid[0] != 5632/want {
			t.Errorf("m = %d: %d blocks over 5632 columns, want %d", m, l.grid[0], 5632/want)
		}
		if l := linearLaunch(0, 0, 0, 0, 0, 0, graph.F16, true, linSwiGLU, m, 2048, 5632, 1e-5); l.grid[0] != 5632/(want/2) {
			t.Errorf("m = %d: a SwiGLU launch has %d blocks over 5632 columns, want %d", m, l.grid[0], 5632/(want/2))
		}
	}
}

// TestVerifyGroups: REDRAFTER_CUDA_VERIFY_GROUPS's values, and auto's
// choice for the TinyLlama-shaped model's products on 132 SMs: the largest
// of 8, 4, 2 column groups a block that leaves a block for every slot.
func TestVerifyGroups(t *testing.T) {
	for v, want := range map[string]int{"": 1, "auto": 0, "1": 1, "2": 2, "4": 4, "8": 8} {
		t.Setenv("REDRAFTER_CUDA_VERIFY_GROUPS", v)
		if g, err := verifyGroupsEnv(); err != nil || g != want {
			t.Errorf("%q: %d, %v; want %d", v, g, err, want)
		}
	}
	for _, v := range []string{"0", "3", "16", "off", " 2"} {
		t.Setenv("REDRAFTER_CUDA_VERIFY_GROUPS", v)
		if _, err := verifyGroupsEnv(); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
	for _, c := range []struct {
		name             string
		groups, sms, bps int
		want             int
	}{
		{"Q·K·V with the norm", 2560 / 4, 132, 3, 1},   // 320 blocks at 2 < 396 slots
		{"gate·up with the norm", 5632 / 2, 132, 3, 4}, // 704 blocks; 352 at 8
		{"O with the residual", 2048 / 4, 132, 3, 1},
		{"down with the residual", 2048 / 4, 132, 3, 1},
		{"the head", 32000 / 4, 132, 3, 8},
		{"Q·K·V on 4 SMs", 2560 / 4, 4, 3, 8},
	} {
		if got := autoVerifyGroups(c.groups, c.sms*c.bps); got != c.want {
			t.Errorf("%s: %d groups a block, want %d", c.name, got, c.want)
		}
	}
}
