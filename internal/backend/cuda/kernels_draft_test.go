package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// draftCases are the kernel cases of the draft ops' launches (gather.go,
// drafter.go, reduce.go, chains.go, quant.go): GatherRows and
// TakeAlong, the draft head's RNN step, the beam search's warp log-softmax
// and selection (ties everywhere, the K-th value repeated, rows of at most
// K values, non-finite rows), the ReDrafter step's chains ops (sources out
// of range, ties for the longest beam across lanes), and Dequantize.
func draftCases(r *rand.Rand) []kcase {
	var cs []kcase
	add := func(name string, tol float64, ref func(be graph.Backend) ([]any, error), gpu func(d *emuDevice) ([]any, error)) {
		cs = append(cs, kcase{name, tol, ref, gpu})
	}
	b := graph.AsBytes
	zeros := func(n int) []byte { return make([]byte, 4*n) }

	// GatherRows: x [m,3,row], repeated indices, rows past one block.
	for _, dt := range []graph.DType{graph.F32, graph.I32} {
		for _, s := range [][3]int{{1, 1, 1}, {7, 15, 4}, {40, 33, 9}, {5, 301, 6}} {
			m, row, n := s[0], s[1], s[2]
			var x any = opcases.RandF32(r, m*3*row, 1)
			if dt == graph.I32 {
				x = opcases.RandInts(r, m*3*row, -1000, 1000)
			}
			idx := opcases.RandInts(r, n, 0, m)
			add(fmt.Sprintf("GatherRows/%v/M%d_row3x%d_n%d", dt, m, row, n), 0, func(be graph.Backend) ([]any, error) {
				return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					xa, ia := g.Input("x", dt, m, 3, row), g.Input("idx", graph.I32, n)
					return []*graph.Array{graph.GatherRows(xa, ia)}, map[*graph.Array]any{xa: x, ia: idx}
				})
			}, func(d *emuDevice) ([]any, error) {
				out := d.alloc(zeros(n * 3 * row))
				err := d.run(gatherRowsLaunch(out, d.alloc(b(x)), d.alloc(b(idx)), dt, m, n, 3*row))
				if dt == graph.I32 {
					return []any{d.i32s(out)}, err
				}
				return []any{d.f32s(out)}, err
			})
		}
	}
	// TakeAlong: more indices than values, and a tail past the block.
	for _, s := range [][3]int{{1, 1, 1}, {3, 1001, 5}, {4, 37, 70}} {
		m, v, k := s[0], s[1], s[2]
		x, idx := opcases.RandF32(r, m*v, 4), opcases.RandInts(r, m*k, 0, v)
		add(fmt.Sprintf("TakeAlong/M%d_V%d_K%d", m, v, k), 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, ia := g.Input("x", graph.F32, m, v), g.Input("idx", graph.I32, m, k)
				return []*graph.Array{graph.TakeAlong(xa, ia)}, map[*graph.Array]any{xa: x, ia: idx}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m * k))
			err := d.run(takeAlongLaunch(out, d.alloc(b(x)), d.alloc(b(idx)), m, v, k))
			return []any{d.f32s(out)}, err
		})
	}
	// RNNStep: one beam, a few, not a multiple of 4; tails in K and N. K
	// of whole 16-byte words (136, 64) takes the 16-byte kernels for 16-bit
	// weights (rnn_step8x1_* at one row, rnn_step8_* at more).
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, s := range [][3]int{{1, 1, 1}, {1, 33, 7}, {1, 136, 37}, {4, 64, 64}, {9, 100, 37}, {6, 65, 130}} {
			m, k, n := s[0], s[1], s[2]
			e, st, bias := opcases.RandF32(r, m*k, 1), opcases.RandF32(r, m*k, 1), opcases.RandF32(r, n, 1)
			w, u := opcases.ScaledWeights(r, dt, n*k, 1), opcases.ScaledWeights(r, dt, n*k, 1)
			add(fmt.Sprintf("RNNStep/%v/M%d_K%d_N%d", dt, m, k, n), opcases.TolFor(dt), func(be graph.Backend) ([]any, error) {
				return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					ea, sa, ba := g.Input("e", graph.F32, m, k), g.Input("s", graph.F32, m, k), g.Input("b", graph.F32, n)
					wa, ua := g.Input("w", dt, n, k), g.Input("u", dt, n, k)
					return []*graph.Array{graph.RNNStep(ea, sa, wa, ua, ba)}, map[*graph.Array]any{ea: e, sa: st, ba: bias, wa: w, ua: u}
				})
			}, func(d *emuDevice) ([]any, error) {
				out := d.alloc(zeros(m * n))
				err := d.run(rnnStepLaunch(out, d.alloc(b(e)), d.alloc(b(st)), d.alloc(b(w)), d.alloc(b(u)), d.alloc(b(bias)), dt, m, k, n))
				return []any{d.f32s(out)}, err
			})
		}
	}
	// WarpLogSoftmax: a masked value near the kept ones keeps the error
	// relative to the largest magnitude meaningful (the head uses -50000).
	for _, s := range []struct {
		m, v, k int
		masked  float32
		ties    bool
	}{{1, 1, 50, -3, false}, {2, 33, 5, -3, false}, {3, 1000, 50, -3, false}, {1, 3000, 50, -3, false},
		{2, 50, 50, -3, false}, {3, 64, 7, -3, true}, {2, 300, 50, -3, true}, {1, 777, 50, -50000, false}, {2, 257, 1, -3, true}} {
		x := opcases.RandF32(r, s.m*s.v, 2)
		if s.ties {
			for i := range x {
				x[i] = float32(r.IntN(4)) / 2 // the K-th value repeats: all of its copies are kept
			}
			x[0] = float32(math.Copysign(0, -1)) // -0 beside +0
		}
		add(fmt.Sprintf("WarpLogSoftmax/M%d_V%d_K%d_masked%g_ties%v", s.m, s.v, s.k, s.masked, s.ties), tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, s.m, s.v)
				return []*graph.Array{graph.WarpLogSoftmax(xa, s.k, s.masked)}, map[*graph.Array]any{xa: x}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(s.m * s.v))
			err := d.run(warpLogSoftmaxLaunch(out, d.alloc(b(x)), s.m, s.v, s.k, s.masked))
			return []any{d.f32s(out)}, err
		})
	}
	{ // A row with NaN and one with +Inf come out all NaN; the finite row does not.
		m, v, k := 3, 100, 10
		x := opcases.RandF32(r, m*v, 2)
		x[v+17] = float32(math.NaN())
		x[2*v+99] = float32(math.Inf(1))
		add("WarpLogSoftmax/M3_V100_K10_nonfinite", tolF32, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, v)
				return []*graph.Array{graph.WarpLogSoftmax(xa, k, -3)}, map[*graph.Array]any{xa: x}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(m * v))
			err := d.run(warpLogSoftmaxLaunch(out, d.alloc(b(x)), m, v, k, -3))
			return []any{d.f32s(out)}, err
		})
	}
	// BeamTop: one row for every beam (a first step, dead beams) or a row
	// per beam; scores and log-probabilities full of ties, which go to the
	// lowest flat index; a width past the beams.
	for _, s := range []struct {
		beams, rows, v, w int
		ties              bool
	}{{1, 1, 1, 1, false}, {3, 1, 100, 3, false}, {4, 4, 257, 4, false}, {2, 2, 33, 5, false}, {5, 5, 31, 2, true},
		{3, 1, 40, 3, true}, {6, 6, 1000, 6, false}, {2, 2, 9, 18, true}, {4, 4, 300, 7, true}} {
		beams, lp := beamInputs(r, s.beams, s.rows, s.v, s.ties)
		add(fmt.Sprintf("BeamTop/B%d_R%d_V%d_W%d_ties%v", s.beams, s.rows, s.v, s.w, s.ties), 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ba, la := g.Input("beams", graph.I32, 3, s.beams), g.Input("lp", graph.F32, s.rows, s.v)
				return []*graph.Array{graph.BeamTop(ba, la, s.w)}, map[*graph.Array]any{ba: beams, la: lp}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(3 * s.w))
			err := d.run(beamTopLaunch(out, d.alloc(b(beams)), d.alloc(b(lp)), s.beams, s.rows, s.v, s.w))
			return []any{d.i32s(out)}, err
		})
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		// Non-finite log-probabilities: every score is NaN (rows and tokens
		// are undefined, so only the scores are compared).
		nb, v, w := 3, 50, 4
		beams, lp := beamInputs(r, nb, nb, v, false)
		lp[v+r.IntN(v)] = bad
		scores := func(out []int32) []float32 {
			f := make([]float32, w)
			for i := range f {
				f[i] = math.Float32frombits(uint32(out[2*w+i]))
			}
			return f
		}
		add(fmt.Sprintf("BeamTop/B%d_R%d_V%d_W%d_lp%v", nb, nb, v, w, bad), 0, func(be graph.Backend) ([]any, error) {
			res, err := evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ba, la := g.Input("beams", graph.I32, 3, nb), g.Input("lp", graph.F32, nb, v)
				return []*graph.Array{graph.BeamTop(ba, la, w)}, map[*graph.Array]any{ba: beams, la: lp}
			})
			if err != nil {
				return nil, err
			}
			return []any{scores(res[0].([]int32))}, nil
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(3 * w))
			err := d.run(beamTopLaunch(out, d.alloc(b(beams)), d.alloc(b(lp)), nb, nb, v, w))
			return []any{scores(d.i32s(out))}, err
		})
	}
	// BeamChains at every depth, with sources permuted, repeated and out of
	// range (-1 and W: the beam keeps its chain); past one block.
	for _, s := range []struct{ w, l, depth int }{{1, 2, 1}, {1, 5, 3}, {3, 4, 1}, {3, 4, 2}, {4, 5, 4}, {7, 3, 2}, {50, 6, 5}, {70, 5, 1}} {
		n := 1 + s.w*(s.l-1)
		tree, sel := opcases.RandInts(r, n, 0, 1000), opcases.RandInts(r, 3*s.w, 0, 1000)
		for i := range s.w {
			sel[i] = int32(r.IntN(s.w+2) - 1)
		}
		add(fmt.Sprintf("BeamChains/W%d_L%d_depth%d", s.w, s.l, s.depth), 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ta, sa := g.Input("tree", graph.I32, n), g.Input("sel", graph.I32, 3, s.w)
				return []*graph.Array{graph.BeamChains(ta, sa, s.depth)}, map[*graph.Array]any{ta: tree, sa: sel}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(n))
			err := d.run(beamChainsLaunch(out, d.alloc(b(tree)), d.alloc(b(sel)), s.w, s.l, s.depth))
			return []any{d.i32s(out)}, err
		})
	}
	// AcceptChains: beams agreeing to chosen depths, ties for the longest
	// (the lowest beam wins, across lanes too: W above 32), none agreeing,
	// all agreeing to the end.
	for _, s := range []struct {
		w, l, top int
		ties      bool
	}{{1, 2, 1, false}, {1, 5, 2, false}, {2, 3, 2, true}, {4, 5, 3, true}, {4, 5, 4, false}, {9, 4, 0, true},
		{50, 5, 4, true}, {70, 3, 1, true}, {40, 6, 2, false}} {
		tokens, argmax := opcases.AgreeingChains(r, s.w, s.l, s.top, s.ties)
		n := len(tokens)
		add(fmt.Sprintf("AcceptChains/W%d_L%d_top%d_ties%v", s.w, s.l, s.top, s.ties), 0, func(be graph.Backend) ([]any, error) {
			return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ta, aa := g.Input("tokens", graph.I32, n), g.Input("argmax", graph.I32, n)
				return []*graph.Array{graph.AcceptChains(ta, aa, s.w)}, map[*graph.Array]any{ta: tokens, aa: argmax}
			})
		}, func(d *emuDevice) ([]any, error) {
			out := d.alloc(zeros(3 * s.l))
			err := d.run(acceptChainsLaunch(out, d.alloc(b(tokens)), d.alloc(b(argmax)), s.w, s.l))
			return []any{d.i32s(out)}, err
		})
	}
	// Dequantize: every bits × scale dtype, groups of 32, 64 and 128; bit
	// for bit (float(s·q) + b, the same two roundings).
	for _, bits := range []int{4, 8} {
		for _, sdt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
			for _, s := range [][3]int{{5, 256, 128}, {3, 96, 32}, {7, 64, 64}} {
				n, k, gs := s[0], s[1], s[2]
				words := make([]uint32, n*k*bits/32)
				for i := range words {
					words[i] = r.Uint32()
				}
				scales, biases := opcases.ScaledWeights(r, sdt, n*k/gs, 0.1), opcases.ScaledWeights(r, sdt, n*k/gs, 0.5)
				add(fmt.Sprintf("Dequantize/%d-bit/g%d/%v/N%d_K%d", bits, gs, sdt, n, k), 0, func(be graph.Backend) ([]any, error) {
					return evalRef(be, func(g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
						wa, sa, ba := g.Input("w", graph.U32, n, k*bits/32), g.Input("s", sdt, n, k/gs), g.Input("b", sdt, n, k/gs)
						return []*graph.Array{graph.Quantized(wa, sa, ba, bits, gs)}, map[*graph.Array]any{wa: words, sa: scales, ba: biases}
					})
				}, func(d *emuDevice) ([]any, error) {
					out := d.alloc(zeros(n * k))
					err := d.run(dequantLaunch(out, d.alloc(b(words)), d.alloc(b(scales)), d.alloc(b(biases)), bits, sdt, n, k, gs))
					return []any{d.f32s(out)}, err
				})
			}
		}
	}
	return cs
}

// beamInputs returns BeamTop's sources: beams [3,nb] (rows 0 and 1 are not
// read; row 2 the scores' bits) and lp [rows,v]. With ties, scores and
// log-probabilities take a few values; without, beams past the first of a
// one-row search are dead (-50000), as on the first step.
func beamInputs(r *rand.Rand, nb, rows, v int, ties bool) ([]int32, []float32) {
	beams := make([]int32, 3*nb)
	lp := opcases.RandF32(r, rows*v, 5)
	for b := range nb {
		beams[b] = int32(r.IntN(nb))
		beams[nb+b] = int32(r.IntN(v))
		score := float32(-r.Float64() * 10)
		if ties {
			score = float32(r.IntN(2))
		}
		if b > 0 && rows == 1 && !ties {
			score = -50000
		}
		beams[2*nb+b] = int32(math.Float32bits(score))
	}
	if ties {
		for i := range lp {
			lp[i] = -float32(r.IntN(3))
		}
	}
	return beams, lp
}

// TestRNNStepEqualsUnfused checks that rnn_step equals the unfused launches
// of the same graph (matvec twice, add, add of the bias, silu) bit for bit,
// so a backend may fuse the step or not without changing a greedy token.
func TestRNNStepEqualsUnfused(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(seed(t), 15))
	d := newEmuDevice(t, nil)
	b := graph.AsBytes
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		m, k, n := 5, 97, 11
		e, st, bias := opcases.RandF32(r, m*k, 1), opcases.RandF32(r, m*k, 1), opcases.RandF32(r, n, 1)
		w, u := opcases.ScaledWeights(r, dt, n*k, 1), opcases.ScaledWeights(r, dt, n*k, 1)
		d.bufs = d.bufs[:0]
		ep, sp, wp, up, bp := d.alloc(b(e)), d.alloc(b(st)), d.alloc(b(w)), d.alloc(b(u)), d.alloc(b(bias))
		fused, ew, su, sum := d.alloc(make([]byte, 4*m*n)), d.alloc(make([]byte, 4*m*n)), d.alloc(make([]byte, 4*m*n)), d.alloc(make([]byte, 4*m*n))
		if err := d.runAll(rnnStepLaunch(fused, ep, sp, wp, up, bp, dt, m, k, n),
			matvecLaunch(ew, ep, wp, dt, m, k, n), matvecLaunch(su, sp, up, dt, m, k, n),
			binaryLaunch("add_f32", sum, ew, su, m*n, m*n), binaryLaunch("add_f32", sum, sum, bp, m*n, n),
			siluLaunch(sum, sum, m*n)); err != nil {
			t.Fatal(err)
		}
		if got, want := d.f32s(fused), d.f32s(sum); !slices.Equal(got, want) {
			t.Errorf("%v: rnn_step %v, the unfused launches %v", dt, got, want)
		}
	}
}

// TestRNNStep8EqualsUnfused checks that rnn_step8_*, which the backend
// picks for 16-bit weights of whole 16-byte rows, equals the launches of
// the unfused graph over the same weights (matvec8 twice, add, add of the
// bias, silu) bit for bit, at one row (decoding's draft step) and at 6
// (a 4-row pass, then 2), with e and s 16-byte aligned and not: so the
// head's rows keep their bits whether it runs fused, and at any beam
// count.
func TestRNNStep8EqualsUnfused(t *testing.T) {
	r := rand.New(rand.NewPCG(seed(t), 16))
	d := newEmuDevice(t, nil)
	b := graph.AsBytes
	for _, dt := range []graph.DType{graph.F16, graph.BF16} {
		for _, m := range []int{1, 6} {
			for _, off := range []int{0, 4} { // e and s 16-byte aligned, then 4 bytes past
				k, n := 136, 11 // 17 words a row: thread 0 reads two, the rest one; a tail block of 3 columns
				e, st, bias := opcases.RandF32(r, m*k+1, 1), opcases.RandF32(r, m*k+1, 1), opcases.RandF32(r, n, 1)
				w, u := opcases.ScaledWeights(r, dt, n*k, 1), opcases.ScaledWeights(r, dt, n*k, 1)
				d.bufs = d.bufs[:0]
				ep, sp := d.alloc(b(e))+devptr(off), d.alloc(b(st))+devptr(off)
				wp, up, bp := d.alloc(b(w)), d.alloc(b(u)), d.alloc(b(bias))
				fused, ew, su, sum := d.alloc(make([]byte, 4*m*n)), d.alloc(make([]byte, 4*m*n)), d.alloc(make([]byte, 4*m*n)), d.alloc(make([]byte, 4*m*n))
				l := rnnStepLaunch(fused, ep, sp, wp, up, bp, dt, m, k, n)
				want := "rnn_step8_" + dt.String()
				if m == 1 {
					want = "rnn_step8x1_" + dt.String()
				}
				if l.kernel != want {
					t.Fatalf("%v: the step runs %s, want %s", dt, l.kernel, want)
				}
				if err := d.runAll(l, matvec8Launch(ew, ep, wp, dt, m, k, n), matvec8Launch(su, sp, up, dt, m, k, n),
					binaryLaunch("add_f32", sum, ew, su, m*n, m*n), binaryLaunch("add_f32", sum, sum, bp, m*n, n),
					siluLaunch(sum, sum, m*n)); err != nil {
					t.Fatal(err)
				}
				if got, want := d.f32s(fused), d.f32s(sum); !slices.Equal(got, want) {
					t.Errorf("%v m=%d offset %d: rnn_step8 %v, the unfused launches %v", dt, m, off, got, want)
				}
			}
		}
	}
}
