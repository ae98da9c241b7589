package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// bweight is a block-quantized [n,k] matrix in host memory with its
// reference dequantization.
type bweight struct {
	typ   quant.GGML
	n, k  int
	data  []byte
	dense []float32
}

func newBWeight(t testing.TB, r *rand.Rand, typ quant.GGML, n, k int) *bweight {
	data, err := quant.QuantizeGGML(typ, randF32(r, n*k))
	if err != nil {
		t.Fatal(err)
	}
	w := &bweight{typ: typ, n: n, k: k, data: data, dense: make([]float32, n*k)}
	if err := quant.DequantizeGGML(typ, w.dense, data); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *bweight) array(t testing.TB, be graph.Backend, g *graph.Graph) *graph.Array {
	buf, err := be.WrapHost(w.data)
	if err != nil {
		t.Fatal(err)
	}
	return graph.Blocks(g.Const("w", buf, 0, graph.U8, w.n, len(w.data)/w.n), w.typ.String(), w.k)
}

// blockFormats are the formats that run as blocks on the CPU.
var blockFormats = []quant.GGML{quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q2_K, quant.Q3_K, quant.Q5_K, quant.Q6_K, quant.IQ4_NL, quant.IQ4_XS}

// Every block format, on the reference and the fast backend: BlockMatMul
// equals MatMul over the dequantized weight (bit for bit on the reference;
// on the fast backend bit for bit with kernels.MatMulF32 over it, and within
// float rounding of the reference, or for the formats it multiplies by int8
// x (BlocksInt8: Q6_K and Q5_K on AVX-512 VNNI machines) within x's
// rounding of the reference), BlockEmbed and DequantizeBlocks give
// quant's values, and each row's product is the same bits whatever the
// batch.
func TestBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 33))
	ref, fast := NewReference(), New(2)
	for _, typ := range blockFormats {
		k := 512
		if typ.BlockElems() == 32 {
			k = 160
		}
		const n, m = 37, 5
		w := newBWeight(t, r, typ, n, k)
		x := randF32(r, m*k)
		product := func(be graph.Backend, x []float32) []float32 {
			rows := len(x) / k
			return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				xa := g.Input("x", graph.F32, rows, k)
				return map[*graph.Array]any{xa: x}, graph.MatMul(xa, w.array(t, be, g))
			})
		}
		dense := func(be graph.Backend) []float32 {
			return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				xa := g.Input("x", graph.F32, m, k)
				return map[*graph.Array]any{xa: x}, graph.MatMul(xa, constF32(t, be, g, "w", w.dense, n, k))
			})
		}
		want, got := dense(ref), product(ref, x)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v reference: BlockMatMul[%d] = %v, MatMul(dequantized) = %v", typ, i, got[i], want[i])
			}
		}
		fastWant := make([]float32, m*n)
		kernels.MatMulF32(fastWant, n, x, m, w.dense)
		fastGot := product(fast, x)
		for i := range m {
			for j := range n {
				var mag float64
				for c := range k {
					mag += math.Abs(float64(x[i*k+c] * w.dense[j*k+c]))
				}
				g := fastGot[i*n+j]
				if fast.BlocksInt8(typ.String()) {
					// x rounded to int8 per block of 32: off by at most
					// Σ|w|·max|x_block|/254, plus float rounding.
					var bound float64
					for c := range k {
						b := x[i*k+c/32*32 : i*k+c/32*32+32]
						var mx float64
						for _, v := range b {
							mx = max(mx, math.Abs(float64(v)))
						}
						bound += math.Abs(float64(w.dense[j*k+c])) * mx / 254
					}
					if e := math.Abs(float64(g - want[i*n+j])); e > bound+2e-6*mag+1e-6 {
						t.Fatalf("%v fast (int8 x): [%d,%d] = %v, reference %v (bound %g)", typ, i, j, g, want[i*n+j], bound)
					}
					continue
				}
				if g != fastWant[i*n+j] {
					t.Fatalf("%v fast: [%d,%d] = %v, MatMulF32 over the dequantized rows %v", typ, i, j, g, fastWant[i*n+j])
				}
				if e := math.Abs(float64(g - want[i*n+j])); e > 2e-6*mag+1e-6 {
					t.Fatalf("%v fast: [%d,%d] = %v, reference %v (Σ|xw| %g)", typ, i, j, g, want[i*n+j], mag)
				}
			}
		}
		for i := range m {
			one := product(fast, x[i*k:(i+1)*k])
			for j := range n {
				if one[j] != fastGot[i*n+j] {
					t.Fatalf("%v: row %d alone [%d] = %v, in a batch of %d %v", typ, i, j, one[j], m, fastGot[i*n+j])
				}
			}
		}
		for _, be := range []graph.Backend{ref, fast} {
			ids := []int32{n - 1, 0, n / 2, 0}
			emb := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				ia := g.Input("ids", graph.I32, len(ids))
				return map[*graph.Array]any{ia: ids}, graph.Embed(w.array(t, be, g), ia)
			})
			for i, id := range ids {
				for c := range k {
					if emb[i*k+c] != w.dense[int(id)*k+c] {
						t.Fatalf("%v %s: BlockEmbed row %d col %d = %v, want %v", typ, be.Name(), i, c, emb[i*k+c], w.dense[int(id)*k+c])
					}
				}
			}
			deq := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				return nil, w.array(t, be, g)
			})
			for i := range deq {
				if deq[i] != w.dense[i] {
					t.Fatalf("%v %s: DequantizeBlocks[%d] = %v, want %v", typ, be.Name(), i, deq[i], w.dense[i])
				}
			}
		}
	}
}

// A block operand whose rows do not match its format is an error, as is a
// format without kernels, and Supports says which formats run.
func TestBlocksErrors(t *testing.T) {
	be := New(1)
	if !be.Supports(graph.BlockMatMulOp{Type: "Q5_K"}, nil) || be.Supports(graph.BlockMatMulOp{Type: "IQ2_XXS"}, nil) {
		t.Error("Supports: Q5_K should run, IQ2_XXS should not")
	}
	x := randF32(rand.New(rand.NewPCG(1, 1)), 256)
	buf, _ := be.WrapHost(make([]byte, 2*100))
	g := graph.New()
	xa := g.Input("x", graph.F32, 1, 256)
	out := graph.MatMul(xa, graph.Blocks(g.Const("w", buf, 0, graph.U8, 2, 100), "Q5_K", 256))
	err := graph.Eval(be, map[*graph.Array]any{xa: x}, func(p *graph.Plan) error { return nil }, out)
	if err == nil {
		t.Fatal("Q5_K rows of 100 bytes for 256 elements accepted")
	}
}
