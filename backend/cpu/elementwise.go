package cpu

import (
	"math"

	"github.com/seed9b8f47b1/redrafter/backend/cpu/kernels"
)

// SiLUOp, SwiGLUOp, AddOp, MulOp, ConcatOp; mirrors backend/metal/elementwise.go.

// sigmoid is 1/(1+e^-x) with math.Exp, for the reference backend.
func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

func (b *Backend) silu(y, x []float32) {
	if !b.reference {
		kernels.SiLU(y, x)
		return
	}
	for i, v := range x {
		y[i] = v * sigmoid(v)
	}
}

func (b *Backend) swiglu(y, gate, up []float32) {
	if !b.reference {
		kernels.SwiGLU(y, gate, up[:len(gate)])
		return
	}
	for i, g := range gate {
		y[i] = g * sigmoid(g) * up[i]
	}
}

// broadcast applies f elementwise, repeating b over a's leading dimensions.
func broadcast(y, a, b []float32, f func(a, b float32) float32) {
	n := len(b)
	for i, v := range a {
		y[i] = f(v, b[i%n])
	}
}

func concat(y, a, b []float32, rows int) {
	da, db := len(a)/rows, len(b)/rows
	for r := range rows {
		copy(y[r*(da+db):], a[r*da:(r+1)*da])
		copy(y[r*(da+db)+da:], b[r*db:(r+1)*db])
	}
}
