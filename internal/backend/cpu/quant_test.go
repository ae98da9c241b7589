package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// qweight is an affine-quantized [n,k] matrix in host memory, with its
// reference dequantization.
type qweight struct {
	n, k, bits, gs int
	codes          []uint32
	scales, biases []byte
	sdt            graph.DType
	dense          []float32 // quant.DequantizeAffine of the stored values
	biasVals       []float32 // each group's bias, as stored
}

// bias is the bias of element c of row j.
func (q *qweight) bias(j, c int) float32 { return q.biasVals[(j*q.k+c)/q.gs] }

func newQWeight(t testing.TB, r *rand.Rand, n, k, bits, gs int, sdt graph.DType) *qweight {
	w := randF32(r, n*k)
	codes, s, b, err := quant.QuantizeAffine(w, k, bits, gs)
	if err != nil {
		t.Fatal(err)
	}
	q := &qweight{n: n, k: k, bits: bits, gs: gs, codes: codes, sdt: sdt, dense: make([]float32, n*k)}
	// Store the scales in sdt and dequantize from the stored values.
	store := func(v []float32) []byte {
		switch sdt {
		case graph.F16:
			h := make([]uint16, len(v))
			for i := range v {
				h[i] = quant.F32ToF16(v[i])
				v[i] = quant.F16ToF32(h[i])
			}
			return graph.AsBytes(h)
		case graph.BF16:
			h := make([]uint16, len(v))
			for i := range v {
				h[i] = quant.F32ToBF16(v[i])
				v[i] = quant.BF16ToF32(h[i])
			}
			return graph.AsBytes(h)
		}
		return append([]byte(nil), graph.AsBytes(v)...)
	}
	q.scales, q.biases = store(s), store(b)
	q.biasVals = b
	quant.DequantizeAffine(q.dense, codes, s, b, bits, gs)
	return q
}

// array declares the weight in g as a quantized array.
func (q *qweight) array(t testing.TB, be graph.Backend, g *graph.Graph) *graph.Array {
	wrap := func(b []byte) graph.Buffer {
		buf, err := be.WrapHost(b)
		if err != nil {
			t.Fatal(err)
		}
		return buf
	}
	w := g.Const("w", wrap(graph.AsBytes(q.codes)), 0, graph.U32, q.n, q.k*q.bits/32)
	s := g.Const("w.scales", wrap(q.scales), 0, q.sdt, q.n, q.k/q.gs)
	b := g.Const("w.biases", wrap(q.biases), 0, q.sdt, q.n, q.k/q.gs)
	return graph.Quantized(w, s, b, q.bits, q.gs)
}

func (q *qweight) String() string {
	return fmt.Sprintf("%d-bit g%d %v scales, n=%d k=%d", q.bits, q.gs, q.sdt, q.n, q.k)
}

var qShapes = [][3]int{{1, 32, 1}, {3, 64, 9}, {5, 256, 17}, {1, 384, 40}, {9, 1024, 33}, {2, 128, 100}}

// On the reference backend QMatMul is exactly MatMul with the dequantized
// weight, Dequantize is the package quant reference, and QEmbed gathers its
// rows.
func TestQuantReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	be := NewReference()
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, sdt := range []graph.DType{graph.F16, graph.BF16, graph.F32} {
				for _, sz := range qShapes {
					m, k, n := sz[0], sz[1], sz[2]
					if k%gs != 0 {
						continue
					}
					q := newQWeight(t, r, n, k, bits, gs, sdt)
					x := randF32(r, m*k)
					got := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
						xa := g.Input("x", graph.F32, m, k)
						return map[*graph.Array]any{xa: x}, graph.MatMul(xa, q.array(t, be, g))
					})
					want := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
						xa := g.Input("x", graph.F32, m, k)
						return map[*graph.Array]any{xa: x}, graph.MatMul(xa, constF32(t, be, g, "w", q.dense, n, k))
					})
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%v m=%d: QMatMul[%d] = %v, MatMul(dequantized) = %v", q, m, i, got[i], want[i])
						}
					}
					deq := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
						return nil, q.array(t, be, g)
					})
					for i := range deq {
						if deq[i] != q.dense[i] {
							t.Fatalf("%v: Dequantize[%d] = %v, quant reference %v", q, i, deq[i], q.dense[i])
						}
					}
					ids := []int32{int32(n - 1), 0, int32(n / 2), 0}
					emb := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
						ia := g.Input("ids", graph.I32, len(ids))
						return map[*graph.Array]any{ia: ids}, graph.Embed(q.array(t, be, g), ia)
					})
					for i, id := range ids {
						for c := range k {
							if emb[i*k+c] != q.dense[int(id)*k+c] {
								t.Fatalf("%v: QEmbed row %d col %d", q, i, c)
							}
						}
					}
				}
			}
		}
	}
}

// The fast backend agrees with the reference to float rounding, and its
// QEmbed is exact.
func TestQuantFast(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ref, fast := NewReference(), New(2)
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, sdt := range []graph.DType{graph.F16, graph.BF16, graph.F32} {
				for _, sz := range append(qShapes, [3]int{7, 4096, 70}) {
					m, k, n := sz[0], sz[1], sz[2]
					if k%gs != 0 {
						continue
					}
					q := newQWeight(t, r, n, k, bits, gs, sdt)
					x := randF32(r, m*k)
					build := func(be graph.Backend) func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
						return func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
							xa := g.Input("x", graph.F32, m, k)
							return map[*graph.Array]any{xa: x}, graph.MatMul(xa, q.array(t, be, g))
						}
					}
					want, got := evalOn(t, ref, build(ref)), evalOn(t, fast, build(fast))
					// Rounding error scales with Σ|x·w| of each output; with int8
					// activations (VNNI) add their rounding, half a step of
					// max|x|/127 per block of 32, times |s·q|.
					vnni := kernels.AffineImpl() == "avx512vnni"
					for i := range m {
						for j := range n {
							var mag, qerr float64
							for c := range k {
								mag += math.Abs(float64(x[i*k+c] * q.dense[j*k+c]))
								if vnni {
									var bmax float64
									for _, v := range x[i*k+c/32*32 : i*k+c/32*32+32] {
										bmax = max(bmax, math.Abs(float64(v)))
									}
									qerr += math.Abs(float64(q.dense[j*k+c]-q.bias(j, c))) * bmax / 254
								}
							}
							if e := math.Abs(float64(got[i*n+j] - want[i*n+j])); e > 2e-6*mag+1.0001*qerr+1e-6 {
								t.Fatalf("%v m=%d: [%d,%d] fast %v, reference %v (Σ|xw| %g)", q, m, i, j, got[i*n+j], want[i*n+j], mag)
							}
						}
					}
				}
			}
		}
	}
}

// A row's quantized matmul result does not depend on how many rows share
// the call (greedy ReDrafter must equal greedy decoding bit for bit).
func TestQMatMulRowsIndependentOfBatch(t *testing.T) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 4))
	be := New(2)
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, sz := range [][3]int{{2, 64, 64}, {5, 256, 33}, {9, 512, 100}, {17, 1024, 64}, {6, 4096, 12}, {40, 128, 24}} {
				m, k, n := sz[0], sz[1], sz[2]
				if k%gs != 0 {
					continue
				}
				q := newQWeight(t, r, n, k, bits, gs, graph.F16)
				x := randF32(r, m*k)
				run := func(rows int, xs []float32) []float32 {
					return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
						xa := g.Input("x", graph.F32, rows, k)
						return map[*graph.Array]any{xa: xs}, graph.MatMul(xa, q.array(t, be, g))
					})
				}
				all := run(m, x)
				for i := range m {
					one := run(1, x[i*k:(i+1)*k])
					for j := range n {
						if one[j] != all[i*n+j] {
							t.Fatalf("%v m=%d (seed %d): row %d col %d: batched %v != alone %v", q, m, seed, i, j, all[i*n+j], one[j])
						}
					}
				}
			}
		}
	}
}

// A 4-bit weight with f16 scales and K a multiple of 128 is repacked once
// for the tile kernel (on machines that have it), reused by later products,
// and forgotten when its bytes are written.
func TestQMatMulTiles(t *testing.T) {
	if tilesOff {
		t.Skip("REDRAFTER_CPU_TILES=off: no repacking")
	}
	r := rand.New(rand.NewPCG(9, 10))
	be := New(2)
	q := newQWeight(t, r, 40, 256, 4, 64, graph.F16)
	g := graph.New()
	xa := g.Input("x", graph.F32, 3, 256)
	wa := q.array(t, be, g)
	y := graph.MatMul(xa, wa)
	p, err := graph.Compile(be, y)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if err := p.Write(xa, randF32(r, 3*256)); err != nil {
		t.Fatal(err)
	}
	var codes *buffer
	for _, s := range p.Steps {
		if _, ok := s.Op.(graph.QMatMulOp); ok {
			codes = s.In[1].Buf.(*buffer)
		}
	}
	if codes == nil || !codes.weights {
		t.Fatalf("no QMatMul over a weight buffer in the plan")
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	first := codes.tiles
	if first == nil {
		t.Fatal("the weight was not looked at for repacking")
	}
	if want := kernels.PackAffineTiles(kernels.AffineRows{Bits: 4, GroupSize: 64, K: 256, Codes: q.codes,
		Scales: q.scales, Biases: q.biases, ScaleType: kernels.ScalesF16}) != nil; (first.t != nil) != want {
		t.Fatalf("repacked: %v, want %v (affine kernels: %s)", first.t != nil, want, kernels.AffineImpl())
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	if codes.tiles != first {
		t.Error("the weight was repacked again")
	}
	if err := be.Write(codes, 0, graph.AsBytes(q.codes[:1])); err != nil {
		t.Fatal(err)
	}
	if codes.tiles != nil {
		t.Error("a write kept the repacked copy")
	}
}

// A weight handed over with AdoptHost is repacked in place when its rows
// are whole tiles: the products have the bits of a repacked copy's,
// QEmbed and Dequantize still read its rows exactly, and its bytes can no
// longer be read or written as MLX's layout.
func TestQMatMulTilesInPlace(t *testing.T) {
	if tilesOff {
		t.Skip("REDRAFTER_CPU_TILES=off: no repacking")
	}
	if !kernels.TilesFit(kernels.AffineRows{Bits: 4, GroupSize: 64, K: 256, ScaleType: kernels.ScalesF16}) {
		t.Skipf("no tile kernel here (affine kernels: %s)", kernels.AffineImpl())
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, sdt := range []graph.DType{graph.F16, graph.F32} {
		for _, n := range []int{48, 40} { // whole tiles, and not
			q := newQWeight(t, r, n, 256, 4, 64, sdt)
			x := randF32(r, 3*256)
			ids := []int32{0, int32(n - 1), 17}
			run := func(be *Backend, adopt bool) (y, emb, deq []float32, bufs [3]*buffer) {
				wrap := func(b []byte) graph.Buffer {
					var buf graph.Buffer
					var err error
					if adopt {
						buf, err = be.AdoptHost(slices.Clone(b))
					} else {
						buf, err = be.WrapHost(slices.Clone(b))
					}
					if err != nil {
						t.Fatal(err)
					}
					return buf
				}
				bufs = [3]*buffer{wrap(graph.AsBytes(q.codes)).(*buffer), wrap(q.scales).(*buffer), wrap(q.biases).(*buffer)}
				g := graph.New()
				xa, ia := g.Input("x", graph.F32, 3, 256), g.Input("ids", graph.I32, len(ids))
				wa := graph.Quantized(g.Const("w", bufs[0], 0, graph.U32, n, 256*4/32),
					g.Const("s", bufs[1], 0, q.sdt, n, 4), g.Const("b", bufs[2], 0, q.sdt, n, 4), 4, 64)
				outs := []*graph.Array{graph.MatMul(xa, wa), graph.Embed(wa, ia), graph.SiLU(wa)}
				res := make([][]float32, 3)
				err := graph.Eval(be, map[*graph.Array]any{xa: x, ia: ids}, func(p *graph.Plan) error {
					for i, o := range outs {
						res[i] = make([]float32, o.Shape().Numel())
						if err := p.Read(o, res[i]); err != nil {
							return err
						}
					}
					return nil
				}, outs...)
				if err != nil {
					t.Fatal(err)
				}
				return res[0], res[1], res[2], bufs
			}
			be := New(2)
			want, wantEmb, wantDeq, _ := run(be, false)
			got, gotEmb, gotDeq, bufs := run(be, true)
			inPlace, copies := be.Repacked()
			whole := n%16 == 0
			if whole != bufs[0].repacked || (whole && (!bufs[1].repacked || !bufs[2].repacked)) {
				t.Fatalf("%v n=%d: repacked in place %v %v %v", sdt, n, bufs[0].repacked, bufs[1].repacked, bufs[2].repacked)
			}
			if wantIn := map[bool]int{true: 1}[whole]; inPlace != wantIn || copies != 2-wantIn {
				t.Errorf("%v n=%d: %d in place, %d copies", sdt, n, inPlace, copies)
			}
			if !slices.Equal(got, want) || !slices.Equal(gotEmb, wantEmb) || !slices.Equal(gotDeq, wantDeq) {
				t.Fatalf("%v n=%d: results differ from the copied tiles' and the MLX layout's", sdt, n)
			}
			for i, id := range ids {
				if !slices.Equal(gotEmb[i*256:(i+1)*256], q.dense[int(id)*256:(int(id)+1)*256]) {
					t.Fatalf("%v n=%d: QEmbed row %d is not the reference dequantization", sdt, n, id)
				}
			}
			if whole {
				if err := be.Read(bufs[0], 0, make([]byte, 4)); err == nil {
					t.Error("read the bytes of a weight repacked in place")
				}
				if err := be.Write(bufs[1], 0, make([]byte, 2)); err == nil {
					t.Error("wrote the bytes of a weight repacked in place")
				}
			}
		}
	}
}

// Consecutive products with one x (q, k and v; gate and up) share its
// preparation; a product after another step prepares its x again. Every
// product gives the bits it gives alone, at one row (prepared on the
// caller's thread) and several (rows prepared across the workers).
func TestQMatMulSharedX(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 11))
	be := New(2)
	const k = 256
	ws := []*qweight{newQWeight(t, r, 48, k, 4, 32, graph.F16), newQWeight(t, r, 40, k, 4, 32, graph.F16),
		newQWeight(t, r, 33, k, 8, 64, graph.F16), newQWeight(t, r, 16, k, 4, 32, graph.F16)}
	for _, m := range []int{1, 5} {
		x := randF32(r, m*k)
		alone := func(w *qweight, xs []float32) []float32 {
			return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				xa := g.Input("x", graph.F32, m, k)
				return map[*graph.Array]any{xa: xs}, graph.MatMul(xa, w.array(t, be, g))
			})
		}
		silu := make([]float32, len(x))
		g := graph.New()
		xa := g.Input("x", graph.F32, m, k)
		y0 := graph.MatMul(xa, ws[0].array(t, be, g))
		y1 := graph.MatMul(xa, ws[1].array(t, be, g)) // x prepared for y0
		x2 := graph.SiLU(xa)
		y2 := graph.MatMul(x2, ws[2].array(t, be, g)) // another x, 8 bits
		y3 := graph.MatMul(xa, ws[3].array(t, be, g)) // x again, prepared again
		p, err := graph.Compile(be, y0, y1, y2, y3, x2)
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, s := range p.Steps {
			order = append(order, fmt.Sprintf("%T", s.Op))
		}
		if want := []string{"graph.QMatMulOp", "graph.QMatMulOp", "graph.SiLUOp", "graph.QMatMulOp", "graph.QMatMulOp"}; !slices.Equal(order, want) {
			t.Fatalf("plan %v, want %v: the test no longer covers a shared x", order, want)
		}
		if a, b := p.Steps[0].In[0], p.Steps[1].In[0]; a.Buf != b.Buf || a.Off != b.Off {
			t.Fatal("the first two products do not read one operand")
		}
		if err := p.Write(xa, x); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, m*k)
		if err := p.Read(x2, got); err != nil {
			t.Fatal(err)
		}
		copy(silu, got) // the backend's SiLU, the x of y2
		for i, c := range []struct {
			y  *graph.Array
			w  *qweight
			xs []float32
		}{{y0, ws[0], x}, {y1, ws[1], x}, {y2, ws[2], silu}, {y3, ws[3], x}} {
			got := make([]float32, m*c.w.n)
			if err := p.Read(c.y, got); err != nil {
				t.Fatal(err)
			}
			want := alone(c.w, c.xs)
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("m=%d product %d: element %d is %v, alone %v", m, i, j, got[j], want[j])
				}
			}
		}
		p.Free()
	}
}
