package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// TestAddMulBroadcast: AddOp and MulOp against the definition, y[i] = a[i]
// op b[i mod len(b)], for b as long as a, one row of a, and one element, in
// place too.
func TestAddMulBroadcast(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][2]int{{1, 1}, {12, 12}, {15, 5}, {5 * 2048, 2048}, {7, 1}, {2048, 2048}, {33, 33}} {
		a, b := randF32(r, s[0]), randF32(r, s[1])
		for _, op := range []struct {
			name string
			run  func(y, a, b []float32)
			f    func(a, b float32) float32
		}{{"add", add, func(a, b float32) float32 { return a + b }}, {"mul", mul, func(a, b float32) float32 { return a * b }}} {
			y := make([]float32, len(a))
			op.run(y, a, b)
			inPlace := append([]float32(nil), a...)
			op.run(inPlace, inPlace, b)
			intoB := append([]float32(nil), a...) // y is b when the shapes match
			if len(a) == len(b) {
				intoB = append(intoB[:0], b...)
				op.run(intoB, a, intoB)
			} else {
				op.run(intoB, a, b)
			}
			for i := range a {
				want := op.f(a[i], b[i%len(b)])
				if y[i] != want || inPlace[i] != want || intoB[i] != want {
					t.Fatalf("%s %v: y[%d] = %g (in place %g, into b %g), want %g", op.name, s, i, y[i], inPlace[i], intoB[i], want)
				}
			}
		}
	}
}

// TestRMSNormRowsSplit: rows normalized across workers equal, bit for bit,
// the formula applied row by row on one thread (the rounding of the sum must
// not depend on the thread count, or greedy decoding would): with the
// vector kernel's sum on the fast backend, in index order on the reference.
func TestRMSNormRowsSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const eps = 1e-5
	for _, d := range []int{64, 2048, 100} {
		w := randF32(r, d)
		for _, threads := range []int{1, 2, 3, 8} {
			for _, ref := range []bool{false, true} {
				b := New(threads)
				b.reference = ref
				for _, rows := range []int{1, 2, 3, 4, 5, 7, 33} {
					x := randF32(r, rows*d)
					y := make([]float32, rows*d)
					b.rmsnorm(y, x, w, d, eps)
					for row := range rows {
						xr := x[row*d : (row+1)*d]
						ss := kernels.SumSquares(xr)
						if ref {
							ss = 0
							for _, v := range xr {
								ss += v * v
							}
						}
						scale := float32(1 / math.Sqrt(float64(ss/float32(d)+eps)))
						for i, v := range xr {
							if want := v * scale * w[i]; y[row*d+i] != want {
								t.Fatalf("d %d threads %d reference %v rows %d: y[%d][%d] = %g, want %g", d, threads, ref, rows, row, i, y[row*d+i], want)
							}
						}
					}
				}
			}
		}
	}
}

// TestSplitOpsMatchOneThread: SiLU, SwiGLU, GeGLU and RoPE split across workers
// give the single-thread result bit for bit, at sizes with a scalar tail and
// with rows of both RoPE layouts; RoPE's vector kernels give the
// reference's bits.
func TestSplitOpsMatchOneThread(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	one, many, ref := New(1), New(3), NewReference()
	for _, n := range []int{7, 8192, 5*5632 + 7, 70000} {
		x, u := randF32(r, n), randF32(r, n)
		for _, op := range []struct {
			name string
			run  func(b *Backend, y []float32)
		}{{"silu", func(b *Backend, y []float32) { b.silu(y, x) }}, {"swiglu", func(b *Backend, y []float32) { b.swiglu(y, x, u) }},
			{"geglu", func(b *Backend, y []float32) { b.geglu(y, x, u) }}} {
			want, got := make([]float32, n), make([]float32, n)
			op.run(one, want)
			op.run(many, got)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s n=%d: [%d] = %g on 3 threads, %g on 1", op.name, n, i, got[i], want[i])
				}
			}
		}
	}
	const heads = 4
	for _, d := range []int{16, 64, 72} {
		inv := make([]float32, d/2)
		for j := range inv {
			inv[j] = float32(math.Pow(10000, -2*float64(j)/float64(d)))
		}
		for _, rows := range []int{1, 5, 33} {
			for _, neox := range []bool{false, true} {
				x := randF32(r, rows*heads*d)
				pos := make([]int32, rows)
				for i := range pos {
					pos[i] = int32(r.IntN(4096))
				}
				op := graph.RoPEOp{InvFreq: inv, NeoX: neox}
				want, got := make([]float32, len(x)), make([]float32, len(x))
				if err := one.rope(want, x, pos, graph.Shape{rows, heads, d}, op); err != nil {
					t.Fatal(err)
				}
				if err := many.rope(got, x, pos, graph.Shape{rows, heads, d}, op); err != nil {
					t.Fatal(err)
				}
				refOut := make([]float32, len(x))
				if err := ref.rope(refOut, x, pos, graph.Shape{rows, heads, d}, op); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got[i] != want[i] || refOut[i] != want[i] {
						t.Fatalf("rope d %d rows %d neox %v: [%d] = %g on 3 threads, %g on 1, %g on the reference", d, rows, neox, i, got[i], want[i], refOut[i])
					}
				}
				pos[rows-1] = -1
				if err := many.rope(got, x, pos, graph.Shape{rows, heads, d}, op); err == nil {
					t.Errorf("rope rows %d: a negative position gave no error", rows)
				}
			}
		}
	}
}

// BenchmarkAdd is AddOp on the residual stream of a 7-row verification pass
// of a 2048-wide model.
func BenchmarkAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	a, x, y := randF32(r, 7*2048), randF32(r, 7*2048), make([]float32, 7*2048)
	for b.Loop() {
		add(y, a, x)
	}
}

// BenchmarkRMSNorm is RMSNormOp on 1 and 7 rows of 2048, on 2 threads: a
// decode step's and a W=1 L=7 verification pass's.
func BenchmarkRMSNorm(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	w := randF32(r, 2048)
	for _, rows := range []int{1, 7} {
		x, y := randF32(r, rows*2048), make([]float32, rows*2048)
		be := New(2)
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			for b.Loop() {
				be.rmsnorm(y, x, w, 2048, 1e-5)
			}
		})
	}
}

// BenchmarkRoPE is RoPEOp on TinyLlama's queries (32 heads of 64) and keys
// (4 heads), 1 and 7 rows, GGUF's layout, on 2 threads.
func BenchmarkRoPE(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	inv := make([]float32, 32)
	for j := range inv {
		inv[j] = float32(math.Pow(10000, -2*float64(j)/64))
	}
	be := New(2)
	for _, rows := range []int{1, 7} {
		for _, heads := range []int{32, 4} {
			x := randF32(r, rows*heads*64)
			pos := make([]int32, rows)
			for i := range pos {
				pos[i] = int32(100 + i)
			}
			b.Run(fmt.Sprintf("rows=%d/heads=%d", rows, heads), func(b *testing.B) {
				for b.Loop() {
					if err := be.rope(x, x, pos, graph.Shape{rows, heads, 64}, graph.RoPEOp{InvFreq: inv}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestAddNormFused: a residual add and the norm of its sum, run as one loop
// over rows (addNorm), give the bits of the two steps run apart, for the
// sum kept alive after the norm and for a sum that dies there (its buffer
// free for the norm's output), in a chain of two layers, on 1 to 7 rows;
// and the pair is fused in each of these graphs.
func TestAddNormFused(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, d := range []int{64, 2048} {
		for _, rows := range []int{1, 3, 7} {
			x, y := randF32(r, rows*d), randF32(r, rows*d)
			w1, w2 := randF32(r, d), randF32(r, d)
			wm := randF32(r, d*d)
			for _, shape := range []string{"kept", "dies", "chain"} {
				build := func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
					xa, ya, w1a := g.Input("x", graph.F32, rows, d), g.Input("y", graph.F32, rows, d), g.Input("w1", graph.F32, d)
					in := map[*graph.Array]any{xa: x, ya: y, w1a: w1}
					h := graph.Add(xa, ya)
					n := graph.RMSNorm(h, w1a, 1e-5)
					if shape == "kept" {
						return in, graph.Mul(h, n)
					}
					wma := g.Input("wm", graph.F32, d, d)
					in[wma] = wm
					if shape == "dies" {
						return in, graph.MatMul(n, wma)
					}
					w2a := g.Input("w2", graph.F32, d)
					in[w2a] = w2
					h2 := graph.Add(h, graph.MatMul(n, wma))
					return in, graph.Add(h2, graph.RMSNorm(h2, w2a, 1e-5))
				}
				fused, apart := New(2), New(2)
				apart.noFusion = true
				got, want := evalOn(t, fused, build), evalOn(t, apart, build)
				if fused.fused.Load() == 0 || apart.fused.Load() != 0 {
					t.Fatalf("d %d rows %d %s: %d pairs fused (%d with fusion off)", d, rows, shape, fused.fused.Load(), apart.fused.Load())
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("d %d rows %d %s: [%d] = %g fused, %g apart", d, rows, shape, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// BenchmarkAddNorm is a TinyLlama layer's attention output product (4-bit,
// 2048×2048), the residual add and the next norm, on 2 threads, the add and
// the norm as one loop and as two steps, for 1 and 7 rows.
func BenchmarkAddNorm(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 14))
	const d = 2048
	wo := newQWeight(b, r, d, d, 4, 32, graph.F16)
	w := randF32(r, d)
	for _, m := range []int{1, 7} {
		for _, fuse := range []bool{false, true} {
			be := New(2)
			be.noFusion = !fuse
			g := graph.New()
			xa, ha, wa := g.Input("x", graph.F32, m, d), g.Input("h", graph.F32, m, d), g.Input("w", graph.F32, d)
			sum := graph.Add(ha, graph.MatMul(xa, wo.array(b, be, g)))
			out := graph.RMSNorm(sum, wa, 1e-5)
			p, err := graph.Compile(be, out, sum)
			if err != nil {
				b.Fatal(err)
			}
			for a, v := range map[*graph.Array][]float32{xa: randF32(r, m*d), ha: randF32(r, m*d), wa: w} {
				if err := p.Write(a, v); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(fmt.Sprintf("m=%d/fused=%v", m, fuse), func(b *testing.B) {
				for b.Loop() {
					if err := p.Run(); err != nil {
						b.Fatal(err)
					}
				}
			})
			p.Free()
		}
	}
}

// TestGELUMatchesDefinition: GeGLU's GELU is PyTorch's tanh approximation,
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) taken in float64, within a few
// float32 roundings (4e-7 relative, and 1e-6 absolute for the far negative
// tail, where 1 + tanh is below float32's resolution at 1 and comes out 0),
// and GeGLU multiplies it by up; the values at ±1 and 3
// are that formula in float64 (PyTorch computes gelu(x, approximate="tanh") by it).
func TestGELUMatchesDefinition(t *testing.T) {
	for x, want := range map[float32]float64{1: 0.8411919906082768, -1: -0.15880800939172324, 3: 2.996362607918227} {
		if got := gelu(x); math.Abs(float64(got)-want) > 1e-6*math.Abs(want) {
			t.Errorf("gelu(%g) = %.9g, PyTorch's is %.9g", x, got, want)
		}
	}
	def := func(x float64) float64 {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	r := rand.New(rand.NewPCG(7, 8))
	n := 4096
	gate, up := randF32(r, n), randF32(r, n)
	for i := range gate {
		gate[i] *= 8 // beyond tanh's bend both ways
	}
	for _, b := range []*Backend{NewReference(), New(2)} {
		y := make([]float32, n)
		b.geglu(y, gate, up)
		for i := range y {
			want := def(float64(gate[i])) * float64(up[i])
			if math.Abs(float64(y[i])-want) > (4e-7*math.Abs(def(float64(gate[i])))+1e-6)*math.Abs(float64(up[i])) {
				t.Fatalf("geglu(%g, %g) = %.9g, the definition gives %.9g", gate[i], up[i], y[i], want)
			}
		}
	}
}
