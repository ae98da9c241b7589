// Package hostmath is float32 linear algebra over Go slices, for code that
// computes outside a graph: the draft-head trainer's hand-written forward
// and backward passes (internal/tools/train). It has three operations, the ones that
// code needs, and imports nothing of ours.
//
// The functions here are plain Go. A backend that has faster loops for the
// host CPU installs them with Install when it registers (backend/cpu does,
// with its AVX-512/AVX2 kernels), so the trainer runs at the speed of the
// machine's kernels without importing a backend. Every implementation
// computes the same values up to float32 rounding; which one runs can change
// the last bits of a trained head, never its meaning.
//
// Install is meant for init functions; the operations may be called from many
// goroutines at once.
package hostmath

import (
	"fmt"
	"sync/atomic"
)

// Kernels are implementations of the operations; see the functions of the
// same names for their contracts.
type Kernels struct {
	Name   string // e.g. "cpu (avx512)", for logs
	MatMul func(y []float32, ldy int, x []float32, m int, w []float32)
	Axpy   func(y []float32, a float32, x []float32)
	Scale  func(x []float32, a float32)
}

var active atomic.Pointer[Kernels]

func init() { active.Store(&Reference) }

// Reference is the plain-Go implementation, the one in use until a backend
// installs another.
var Reference = Kernels{Name: "go", MatMul: matMul, Axpy: axpy, Scale: scale}

// Install makes k the implementation used from now on. Every field must be
// set.
func Install(k Kernels) {
	if k.MatMul == nil || k.Axpy == nil || k.Scale == nil {
		panic(fmt.Sprintf("hostmath: Install(%q) with a missing operation", k.Name))
	}
	active.Store(&k)
}

// Active is the name of the implementation in use.
func Active() string { return active.Load().Name }

// MatMul sets y[i*ldy+j] = Σ_kk x[i*k+kk]·w[j*k+kk] for i < m, j < n: y = x·wᵀ
// with x [m, k] (k = len(x)/m) and w [n, k] (n = len(w)/k), both row-major,
// and y's rows ldy apart (ldy ≥ n). It panics when the lengths do not fit
// those shapes. With m == 0 or k == 0 it does nothing.
func MatMul(y []float32, ldy int, x []float32, m int, w []float32) {
	active.Load().MatMul(y, ldy, x, m, w)
}

// Axpy sets y[i] += a·x[i]. It panics unless len(y) == len(x).
func Axpy(y []float32, a float32, x []float32) { active.Load().Axpy(y, a, x) }

// Scale sets x[i] *= a.
func Scale(x []float32, a float32) { active.Load().Scale(x, a) }

func matMul(y []float32, ldy int, x []float32, m int, w []float32) {
	if m == 0 || len(x) == 0 {
		return
	}
	if len(x)%m != 0 {
		panic(fmt.Sprintf("hostmath: MatMul: len(x) = %d is not a multiple of m = %d", len(x), m))
	}
	k := len(x) / m
	if len(w)%k != 0 {
		panic(fmt.Sprintf("hostmath: MatMul: len(w) = %d is not a multiple of k = %d", len(w), k))
	}
	n := len(w) / k
	if ldy < n || len(y) < (m-1)*ldy+n {
		panic(fmt.Sprintf("hostmath: MatMul: y of %d values with stride %d cannot hold %d×%d", len(y), ldy, m, n))
	}
	for i := range m {
		xi := x[i*k : (i+1)*k]
		yi := y[i*ldy : i*ldy+n]
		for j := range n {
			wj := w[j*k : (j+1)*k]
			// Four partial sums: the dependency chain of one sum would make
			// this loop latency-bound.
			var s0, s1, s2, s3 float32
			kk := 0
			for ; kk+4 <= k; kk += 4 {
				s0 += xi[kk] * wj[kk]
				s1 += xi[kk+1] * wj[kk+1]
				s2 += xi[kk+2] * wj[kk+2]
				s3 += xi[kk+3] * wj[kk+3]
			}
			for ; kk < k; kk++ {
				s0 += xi[kk] * wj[kk]
			}
			yi[j] = (s0 + s1) + (s2 + s3)
		}
	}
}

func axpy(y []float32, a float32, x []float32) {
	if len(y) != len(x) {
		panic(fmt.Sprintf("hostmath: Axpy: len(y) = %d, len(x) = %d", len(y), len(x)))
	}
	for i, v := range x {
		y[i] += a * v
	}
}

func scale(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}
