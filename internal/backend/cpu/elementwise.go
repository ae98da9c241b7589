package cpu

import (
	"math"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
)

// SiLUOp, SwiGLUOp, GeGLUOp, AddOp, MulOp, ConcatOp; mirrors internal/backend/metal/elementwise.go.

// sigmoid is 1/(1+e^-x) with math.Exp, for the reference backend.
func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// elementwiseMin is the fewest elements of SiLU or SwiGLU worth a worker:
// ~6 µs of the vector kernels, several times a fork and join. Chunks start
// at multiples of 64, a multiple of every kernel set's vector width, so each
// element takes the same code path (vector body or scalar tail) whatever
// the split, and rounds alike.
const elementwiseMin = 8192

func (b *Backend) silu(y, x []float32) {
	if !b.reference {
		b.pool.parallel(len(x), 64, elementwiseMin, func(lo, hi int) { kernels.SiLU(y[lo:hi], x[lo:hi]) })
		return
	}
	for i, v := range x {
		y[i] = v * sigmoid(v)
	}
}

func (b *Backend) swiglu(y, gate, up []float32) {
	if !b.reference {
		b.pool.parallel(len(gate), 64, elementwiseMin, func(lo, hi int) { kernels.SwiGLU(y[lo:hi], gate[lo:hi], up[lo:hi]) })
		return
	}
	for i, g := range gate {
		y[i] = g * sigmoid(g) * up[i]
	}
}

// gelu is GELU with the tanh approximation (PyTorch's approximate="tanh"),
// in float32 but for the tanh, taken in float64 and rounded: GeGLUOp's
// reference, for every path of this backend.
func gelu(x float32) float32 {
	const k = 0.7978845608028654 // √(2/π)
	u := k * (x + 0.044715*x*x*x)
	return 0.5 * x * (1 + float32(math.Tanh(float64(u))))
}

// geglu is GeGLUOp: y = GELU(gate)·up. Gemma's MLP runs it once a layer
// over [n, ffn], a small part of a pass beside the products, so the fast
// path is the reference's loop split over the workers (no vector kernel).
func (b *Backend) geglu(y, gate, up []float32) {
	run := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] = gelu(gate[i]) * up[i]
		}
	}
	if !b.reference {
		b.pool.parallel(len(gate), 64, elementwiseMin, run)
		return
	}
	run(0, len(gate))
}

// add and mul are AddOp and MulOp: y = a+b and y = a·b elementwise,
// repeating b over a's leading dimensions. A verification pass adds rows of
// the residual stream ~45 times, serially on the caller's thread (a
// function value per element once cost 4 ns an element: ~2 ms of a 5-token
// pass), so add is a copy and the vector kernels' y += 1·b, which rounds
// as a+b does (1·b is exact, then one rounding of the sum, fused or not).
func add(y, a, b []float32) {
	if len(b) == 0 {
		return
	}
	for r := 0; r < len(a); r += len(b) {
		yr, ar := y[r:r+len(b)], a[r:r+len(b)]
		if overlapF32(yr, b) {
			// The copy would overwrite b before it is read.
			for i, v := range b {
				yr[i] = ar[i] + v
			}
			continue
		}
		copy(yr, ar)
		kernels.Axpy(yr, 1, b)
	}
}

// overlapF32 reports whether a and b share memory.
func overlapF32(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(4*len(b)) && pb < pa+uintptr(4*len(a))
}

func mul(y, a, b []float32) {
	if len(b) == 0 {
		return
	}
	for r := 0; r < len(a); r += len(b) {
		yr, ar := y[r:r+len(b)], a[r:r+len(b)]
		for i, v := range b {
			yr[i] = ar[i] * v
		}
	}
}

func concat(y, a, b []float32, rows int) {
	da, db := len(a)/rows, len(b)/rows
	for r := range rows {
		copy(y[r*(da+db):], a[r*da:(r+1)*da])
		copy(y[r*(da+db)+da:], b[r*db:(r+1)*db])
	}
}
