package opcases

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// QuantWeight is a random affine-quantized [n,k] matrix: packed codes and
// scales and biases in dt (as []float32 or []uint16 bits).
type QuantWeight struct {
	codes          []uint32
	scales, biases any
}

func RandQuant(r *rand.Rand, n, k, bits, gs int, dt graph.DType) QuantWeight {
	codes, s, b, err := quant.QuantizeAffine(RandF32(r, n*k, 1), k, bits, gs)
	if err != nil {
		panic(err)
	}
	enc := func(v []float32) any {
		switch dt {
		case graph.F16, graph.BF16:
			h := make([]uint16, len(v))
			for i, x := range v {
				if dt == graph.F16 {
					h[i] = quant.F32ToF16(x)
				} else {
					h[i] = quant.F32ToBF16(x)
				}
			}
			return h
		}
		return v
	}
	return QuantWeight{codes: codes, scales: enc(s), biases: enc(b)}
}

// Parts returns the codes, scales and biases (scales and biases []float32
// or, for f16 and bf16, the []uint16 of their bits), for a backend's own
// kernel tests.
func (q QuantWeight) Parts() (codes []uint32, scales, biases any) { return q.codes, q.scales, q.biases }

// Inputs declares the weight as inputs of g and returns the quantized array.
func (q QuantWeight) Inputs(g *graph.Graph, in map[*graph.Array]any, n, k, bits, gs int, dt graph.DType) *graph.Array {
	w := g.Input("w", graph.U32, n, k*bits/32)
	s, b := g.Input("scales", dt, n, k/gs), g.Input("biases", dt, n, k/gs)
	in[w], in[s], in[b] = q.codes, q.scales, q.biases
	return graph.Quantized(w, s, b, bits, gs)
}

// quantCases cover every quant kernel: qmv (M up to MatvecMaxRows: the 1-,
// 4- and 8-row variants of every group size) and qmm shapes with row tails,
// K not a multiple of a qmv step (512 codes) or of 128, every group size,
// and the three scale types.
func quantCases(r *rand.Rand) []Case {
	var cs []Case
	add := func(name string, floor float64, build func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any)) {
		cs = append(cs, Case{Name: name, Tol: TolF32, Floor: floor, Build: build})
	}
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, bits := range []int{4, 8} {
			for _, s := range [][4]int{{1, 32, 1, 32}, {3, 96, 9, 32}, {8, 544, 13, 32}, {1, 1024, 17, 128}, {2, 640, 9, 128}, {7, 1152, 6, 128}, {1, 128, 5, 64}, {4, 256, 11, 64}, {5, 192, 33, 64}, {9, 64, 7, 64}, {33, 160, 41, 32}, {40, 256, 19, 64}, {20, 384, 70, 128}} {
				m, k, n, gs := s[0], s[1], s[2], s[3]
				x, q := RandF32(r, m*k, 1), RandQuant(r, n, k, bits, gs, dt)
				// Dequantized weights lie within [-1, 1] (quantized from
				// RandF32), so max_i Σ_k |x_ik| bounds Σ|x·w| for every output.
				add(fmt.Sprintf("QMatMul/%d-bit/g%d/%v/M%d_K%d_N%d", bits, gs, dt, m, k, n), maxRowAbsSum(x, k), func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					xa := g.Input("x", graph.F32, m, k)
					in := map[*graph.Array]any{xa: x}
					return []*graph.Array{graph.MatMul(xa, q.Inputs(g, in, n, k, bits, gs, dt))}, in
				})
			}
			v, k, gs, n := 50, 96, 32, 7
			q, ids := RandQuant(r, v, k, bits, gs, dt), RandInts(r, n, 0, v)
			add(fmt.Sprintf("QEmbed/%d-bit/g%d/%v/V%d_K%d_N%d", bits, gs, dt, v, k, n), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ia := g.Input("ids", graph.I32, n)
				in := map[*graph.Array]any{ia: ids}
				return []*graph.Array{graph.Embed(q.Inputs(g, in, v, k, bits, gs, dt), ia)}, in
			})
			dn, dk, dgs := 5, 256, 128
			dq := RandQuant(r, dn, dk, bits, dgs, dt)
			add(fmt.Sprintf("Dequantize/%d-bit/g%d/%v/N%d_K%d", bits, dgs, dt, dn, dk), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				in := map[*graph.Array]any{}
				return []*graph.Array{dq.Inputs(g, in, dn, dk, bits, dgs, dt)}, in
			})
		}
	}
	return cs
}

// maxRowAbsSum is max over the rows of x ([*, k]) of Σ|x|.
func maxRowAbsSum(x []float32, k int) float64 {
	best := 0.0
	for i := 0; i+k <= len(x); i += k {
		s := 0.0
		for _, v := range x[i : i+k] {
			s += math.Abs(float64(v))
		}
		best = math.Max(best, s)
	}
	return best
}
