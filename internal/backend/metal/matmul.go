package metal

import (
	"strconv"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// MatMul: out[M,N] = x[M,K] · w[N,K]ᵀ. Up to Policy.MatvecMaxRows rows of x
// go to matvec.metal (each simdgroup computes MATVEC_ROWS outputs for 1, 4
// or MATVEC_MAX_M rows of x, reading each weight once), more to matmul.metal
// (32×32 tiles of 8×8 simdgroup matrices).
func (e *encoder) matmul() error {
	x, w, out := e.step.In[0], e.step.In[1], e.step.Out
	if x.Shape[0] <= e.b.policy.MatvecMaxRows {
		return e.matvec(x, w, out, plain(x))
	}
	return e.matmulTiles(x, w, out)
}

// matvec launches matvec.metal for out [M,N] = x·wᵀ with f folded in
// (linear.go); N is out's columns (half w's rows with a GLU).
func (e *encoder) matvec(x, w, out graph.Operand, f fusion) error {
	m, k, n := x.Shape[0], x.Shape[1], out.Shape[1]
	aligned := []graph.Operand{x, w}
	if f.bits&linearNorm != 0 {
		aligned = append(aligned, f.gain)
	}
	args := MatmulArgs{M: i32(m), N: i32(n), K: i32(k), Vec4: e.vec4(k, aligned...), Fuse: f.bits, Eps: f.eps}
	rows := matvecRowsFor(m)
	per := f.outputsPer(matvecRows) * matvecSimdgroups
	return e.launch(kernelName("matvec", matvecVariant(rows), w.DType), args,
		[3]int{(n + per - 1) / per, (m + rows - 1) / rows, 1}, threads1D(32*matvecSimdgroups), nil,
		rd(x), rd(w), wr(out), rd(f.gain), rd(f.bias), rd(f.res))
}

// matmulTiles launches matmul.metal for out = x·wᵀ.
func (e *encoder) matmulTiles(x, w, out graph.Operand) error {
	m, k, n := x.Shape[0], x.Shape[1], w.Shape[0]
	args := MatmulArgs{M: i32(m), N: i32(n), K: i32(k), Vec4: e.vec4(k, x, w)}
	shared := sharedBytes(max((matmulBM+matmulBN)*matmulBK, matmulBM*matmulBN))
	return e.launch(kernelName("matmul", "nt", w.DType), args,
		[3]int{(n + matmulBN - 1) / matmulBN, (m + matmulBM - 1) / matmulBM, 1}, threads1D(matmulThreads),
		[]int{shared}, rd(x), rd(w), wr(out))
}

// matvecMs are the rows of x per threadgroup that matvec.metal is
// instantiated for: a decode step, a small tree, MATVEC_MAX_M.
var matvecMs = []int{1, 4, matvecMaxM}

// matvecRowsFor is the variant for m rows of x: the smallest that holds
// them all, or MATVEC_MAX_M per threadgroup for more.
func matvecRowsFor(m int) int {
	for _, r := range matvecMs {
		if m <= r {
			return r
		}
	}
	return matvecMaxM
}

func matvecVariant(rows int) string { return "nt" + strconv.Itoa(rows) }

// vec4 is MatmulArgs.Vec4: 1 when rows of k elements of every operand can
// be read 4 elements at a time, that is k is a multiple of 4 and each
// operand's address (device buffers start page-aligned) is a multiple of 4
// elements. The kernels read the same values either way.
func (e *encoder) vec4(k int, ops ...graph.Operand) int32 {
	if k%4 != 0 {
		return 0
	}
	for _, o := range ops {
		buf, err := e.b.own(o.Buf)
		if err != nil || (buf.base+o.Off)%(4*o.DType.Size()) != 0 {
			return 0
		}
	}
	return 1
}
