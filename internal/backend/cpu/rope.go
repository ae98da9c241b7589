package cpu

import (
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// RoPEOp; mirrors internal/backend/metal/rope.go.

// rope rotates each head of each row by its position. Rows are split
// across the workers (a verification pass ropes 5 or more rows 44 times);
// a row's angles are computed once for all its heads. The fast backend
// rotates with the vector kernels, which round as the reference's loops do.
func (b *Backend) rope(y, x []float32, pos []int32, shape graph.Shape, op graph.RoPEOp) error {
	heads, d := shape[1], shape[2]
	half := len(op.InvFreq)
	for _, p := range pos {
		if p < 0 {
			return fmt.Errorf("negative position %d", p)
		}
	}
	if &y[0] != &x[0] {
		copy(y, x)
	}
	b.pool.parallel(len(pos), 1, 2, func(lo, hi int) {
		cos := make([]float32, half)
		sin := make([]float32, half)
		for m := lo; m < hi; m++ {
			p := pos[m]
			for j, f := range op.InvFreq {
				s, c := math.Sincos(float64(p) * float64(f))
				cos[j], sin[j] = float32(c), float32(s)
			}
			for h := range heads {
				v := y[(m*heads+h)*d : (m*heads+h)*d+2*half]
				switch {
				case b.reference:
					rotateRef(v, cos, sin, op.NeoX)
				case op.NeoX:
					kernels.RotateHalves(v[:half], v[half:], cos, sin)
				default:
					kernels.RotatePairs(v, cos, sin)
				}
			}
		}
	})
	return nil
}

// rotateRef rotates the pairs of one head: (v[2j], v[2j+1]), or with neox
// (v[j], v[j+half]), by the angle whose cosine and sine are cos[j], sin[j].
func rotateRef(v, cos, sin []float32, neox bool) {
	half := len(cos)
	for j := range half {
		i0, i1 := 2*j, 2*j+1
		if neox {
			i0, i1 = j, j+half
		}
		v0, v1 := v[i0], v[i1]
		v[i0] = float32(v0*cos[j]) - float32(v1*sin[j])
		v[i1] = float32(v0*sin[j]) + float32(v1*cos[j])
	}
}
