//go:build amd64 && !noasm

package kernels

import (
	"math"

	"golang.org/x/sys/cpu"
)

var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL
)

// archSets returns the assembly Sets this CPU supports, narrowest first.
func archSets() []Set {
	var s []Set
	if hasAVX2 {
		s = append(s, avx2Set)
	}
	if hasAVX512 {
		s = append(s, avx512Set)
	}
	return s
}

type elem interface{ float32 | uint16 }

// tileFunc is the signature of the generated tile kernels: the mr×nr block
// y[i*ldy+j] = Σ_{kk<k} x[i*ldx+kk]*w[j*ldw+kk].
type tileFunc[T elem] = func(x *float32, ldx int, w *T, ldw int, k int, y *float32, ldy int)

// tiler drives one family of tile kernels over a whole product.
type tiler[T elem] struct {
	fn    [][5]tileFunc[T] // fn[mr][nr], 1 ≤ mr ≤ mrMax, 1 ≤ nr ≤ 4
	mrMax int
	align int // the kernels handle k rounded down to a multiple of align
	cvt   func(T) float32
	dotFn func(x *float32, w *T, n int) float32
}

const nrMax = 4

// xBlockBytes is how much of x a product keeps in L2 at a time.
const xBlockBytes = 256 << 10

// axpyRowsMax is the most rows of y one generated axpyRows kernel updates
// (internal/asmgen's constant of the same name).
const axpyRowsMax = 4

// matMul computes y = x·wᵀ for x [m, k] and w [n, k] with row strides ldx
// and ldw (see MatMulF32 and MatMulStridedF32); the arguments have been
// checked. Tiles cover w in blocks of nrMax rows (the kernels prefetch the
// next block) and, within a block, all m rows of x. Every output is one
// accumulator of its tile, so its bits do not depend on the tile's shape.
func (t *tiler[T]) matMul(y []float32, ldy int, x []float32, ldx, m int, w []T, ldw, k, n int) {
	ka := k &^ (t.align - 1)
	// Rows of x go in blocks that stay in L2 while every block of w runs
	// past them; a tile streams its rows of x once per block of w.
	rb := max(24, xBlockBytes/(4*max(k, 1))/t.mrMax*t.mrMax)
	for r0 := 0; r0 < m; r0 += rb {
		mm := min(rb, m-r0)
		nt := (mm + t.mrMax - 1) / t.mrMax // tiles along the block, as even as possible
		for j0 := 0; ka > 0 && j0 < n; j0 += nrMax {
			nb := min(nrMax, n-j0)
			i0 := r0
			for it := 0; it < nt; it++ {
				mb := mm / nt
				if it < mm%nt {
					mb++
				}
				t.fn[mb][nb](&x[i0*ldx], ldx, &w[j0*ldw], ldw, ka, &y[i0*ldy+j0], ldy)
				i0 += mb
			}
		}
	}
	if ka == 0 {
		for i := range m {
			clear(y[i*ldy : i*ldy+n])
		}
	}
	if ka == k {
		return
	}
	for i := range m {
		xt := x[i*ldx+ka : i*ldx+k]
		for j := range n {
			wt := w[j*ldw+ka : j*ldw+k]
			s := y[i*ldy+j]
			for kk, v := range xt {
				s += v * t.cvt(wt[kk])
			}
			y[i*ldy+j] = s
		}
	}
}

func (t *tiler[T]) dot(w []T, x []float32) float32 {
	n := len(x)
	na := n &^ (t.align - 1)
	var r float32
	if na > 0 {
		r = t.dotFn(&x[0], &w[0], na)
	}
	for i := na; i < n; i++ {
		r += x[i] * t.cvt(w[i])
	}
	return r
}

func (t *tiler[T]) matVec(y []float32, w []T, x []float32) {
	k := len(x)
	if k == 0 {
		clear(y)
		return
	}
	if len(y) > 0 {
		t.matMul(y, len(y), x, k, 1, w, k, k, len(y))
	}
}

func (t *tiler[T]) matMulChecked(op string, y []float32, ldy int, x []float32, m int, w []T) {
	k, n := checkMatMul(op, len(y), ldy, len(x), m, len(w))
	if k > 0 {
		t.matMul(y, ldy, x, k, m, w, k, k, n)
	}
}

func identity(v float32) float32 { return v }

var (
	f32AVX512  = tiler[float32]{fn: tilesF32_avx512[:], dotFn: dotF32_avx512, mrMax: 6, align: 1, cvt: identity}
	f16AVX512  = tiler[uint16]{fn: tilesF16_avx512[:], dotFn: dotF16_avx512, mrMax: 6, align: 1, cvt: f16ToF32}
	bf16AVX512 = tiler[uint16]{fn: tilesBF16_avx512[:], dotFn: dotBF16_avx512, mrMax: 6, align: 1, cvt: bf16ToF32}
	f32AVX2    = tiler[float32]{fn: tilesF32_avx2[:], dotFn: dotF32_avx2, mrMax: 3, align: 8, cvt: identity}
	f16AVX2    = tiler[uint16]{fn: tilesF16_avx2[:], dotFn: dotF16_avx2, mrMax: 3, align: 8, cvt: f16ToF32}
	bf16AVX2   = tiler[uint16]{fn: tilesBF16_avx2[:], dotFn: dotBF16_avx2, mrMax: 3, align: 8, cvt: bf16ToF32}

	// The hot tilers are f32AVX512's and f32AVX2's one-row tiles without
	// prefetching, for weights already in L1: the same bits.
	f32hotAVX512 = tiler[float32]{fn: tilesF32hot_avx512[:], dotFn: dotF32_avx512, mrMax: 1, align: 1, cvt: identity}
	f32hotAVX2   = tiler[float32]{fn: tilesF32hot_avx2[:], dotFn: dotF32_avx2, mrMax: 1, align: 8, cvt: identity}
)

// matVecF32Hot is MatMulF32 for one row of x, with the same bits, over w
// already in the L1 cache (MatMulBlocks' scratch): the active set's tiles
// without their prefetches of the rows after w. It reports false, doing
// nothing, when the active set has no such tiles.
func matVecF32Hot(y []float32, x []float32, w []float32) bool {
	var t *tiler[float32]
	switch active.Name {
	case "avx512":
		t = &f32hotAVX512
	case "avx2":
		t = &f32hotAVX2
	default:
		return false
	}
	t.matMulChecked("MatMulF32", y, len(y), x, 1, w)
	return true
}

// vecKernels are the element-wise kernels of one ISA level; each handles n
// rounded down to a multiple of align.
type vecKernels struct {
	align     int
	axpy      func(y *float32, x *float32, n int, a float32)
	axpyRows  *[axpyRowsMax + 1]func(y *float32, ldy int, p *float32, ldp int, v *float32, ldv int, rows int, n int)
	axpyRowsH *[axpyRowsMax + 1]func(y *float32, ldy int, p *float32, ldp int, v *uint16, ldv int, rows int, n int)
	scale     func(x *float32, n int, a float32)
	expSum    func(x *float32, n int, mx float32) float32
	silu      func(y, x *float32, n int)
	swiglu    func(y, gate, up *float32, n int)
	cvtF16F32 func(dst *float32, src *uint16, n int)
	cvtBF16   func(dst *float32, src *uint16, n int)
	cvtF32F16 func(dst *uint16, src *float32, n int)
	max       func(x *float32, n int) float32
	rotPairs  func(v, c, s *float32, n int)
	rotHalves func(x, y, c, s *float32, n int)
	lanes     int // float32s in a vector: the rotations' body is a multiple of it
}

func (v *vecKernels) body(n int) int { return n &^ (v.align - 1) }

// axpyRowsWith runs the generated AxpyRows kernels fn, up to axpyRowsMax
// rows of y at a time, over the first body columns, and tail (as Axpy does
// its tail) over the rest; the arguments have been checked.
func axpyRowsWith[T elem](fn *[axpyRowsMax + 1]func(y *float32, ldy int, p *float32, ldp int, v *T, ldv int, rows int, n int),
	tail func(y []float32, a float32, x []T), body int, y []float32, ldy, m, d int, p []float32, ldp, rows int, vs []T, ldv int) {
	for i0 := 0; i0 < m && body > 0; i0 += axpyRowsMax {
		mr := min(axpyRowsMax, m-i0)
		fn[mr](&y[i0*ldy], ldy, &p[i0*ldp], ldp, &vs[0], ldv, rows, body)
	}
	if body < d {
		for i := range m {
			for r, a := range p[i*ldp : i*ldp+rows] {
				tail(y[i*ldy+body:i*ldy+d], a, vs[r*ldv+body:r*ldv+d])
			}
		}
	}
}

func makeSet(name string, f32 *tiler[float32], f16t, bf16t *tiler[uint16], v *vecKernels) Set {
	return Set{
		Name: name,
		DotF32: func(a, b []float32) float32 {
			checkSameLen("DotF32", len(a), len(b))
			return f32.dot(b, a)
		},
		DotF16: func(w []uint16, x []float32) float32 {
			checkSameLen("DotF16", len(w), len(x))
			return f16t.dot(w, x)
		},
		DotBF16: func(w []uint16, x []float32) float32 {
			checkSameLen("DotBF16", len(w), len(x))
			return bf16t.dot(w, x)
		},
		MatVecF32: func(y, w, x []float32) {
			checkMatVec("MatVecF32", len(y), len(w), len(x))
			f32.matVec(y, w, x)
		},
		MatVecF16: func(y []float32, w []uint16, x []float32) {
			checkMatVec("MatVecF16", len(y), len(w), len(x))
			f16t.matVec(y, w, x)
		},
		MatVecBF16: func(y []float32, w []uint16, x []float32) {
			checkMatVec("MatVecBF16", len(y), len(w), len(x))
			bf16t.matVec(y, w, x)
		},
		MatMulF32: func(y []float32, ldy int, x []float32, m int, w []float32) {
			f32.matMulChecked("MatMulF32", y, ldy, x, m, w)
		},
		MatMulStridedF32: func(y []float32, ldy int, x []float32, ldx, m int, w []float32, ldw, n, k int) {
			if checkStrided(len(y), ldy, len(x), ldx, m, len(w), ldw, n, k) {
				f32.matMul(y, ldy, x, ldx, m, w, ldw, k, n)
			}
		},
		MatMulStridedF16: func(y []float32, ldy int, x []float32, ldx, m int, w []uint16, ldw, n, k int) {
			if checkStrided(len(y), ldy, len(x), ldx, m, len(w), ldw, n, k) {
				f16t.matMul(y, ldy, x, ldx, m, w, ldw, k, n)
			}
		},
		MatMulF16: func(y []float32, ldy int, x []float32, m int, w []uint16) {
			f16t.matMulChecked("MatMulF16", y, ldy, x, m, w)
		},
		MatMulBF16: func(y []float32, ldy int, x []float32, m int, w []uint16) {
			bf16t.matMulChecked("MatMulBF16", y, ldy, x, m, w)
		},
		Axpy: func(y []float32, a float32, x []float32) {
			checkSameLen("Axpy", len(y), len(x))
			b := v.body(len(y))
			if b > 0 {
				v.axpy(&y[0], &x[0], b, a)
			}
			axpy(y[b:], a, x[b:])
		},
		AxpyRows: func(y []float32, ldy, m, d int, p []float32, ldp, rows int, vs []float32, ldv int) {
			if checkAxpyRows(len(y), ldy, m, d, len(p), ldp, rows, len(vs), ldv) {
				axpyRowsWith(v.axpyRows, axpy, v.body(d), y, ldy, m, d, p, ldp, rows, vs, ldv)
			}
		},
		ExpSum: func(x []float32, mx float32) float32 {
			b := v.body(len(x))
			var sum float32
			if b > 0 {
				sum = v.expSum(&x[0], b, mx)
			}
			return sum + expSumGeneric(x[b:], mx)
		},
		SiLU: func(y, x []float32) {
			checkSameLen("SiLU", len(y), len(x))
			b := v.body(len(x))
			if b > 0 {
				v.silu(&y[0], &x[0], b)
			}
			siluGeneric(y[b:], x[b:])
		},
		SwiGLU: func(y, gate, up []float32) {
			checkSameLen("SwiGLU", len(y), len(gate))
			checkSameLen("SwiGLU", len(y), len(up))
			b := v.body(len(y))
			if b > 0 {
				v.swiglu(&y[0], &gate[0], &up[0], b)
			}
			swigluGeneric(y[b:], gate[b:], up[b:])
		},
		AxpyRowsF16: func(y []float32, ldy, m, d int, p []float32, ldp, rows int, vs []uint16, ldv int) {
			if checkAxpyRows(len(y), ldy, m, d, len(p), ldp, rows, len(vs), ldv) {
				axpyRowsWith(v.axpyRowsH, axpyF16, v.body(d), y, ldy, m, d, p, ldp, rows, vs, ldv)
			}
		},
		Scale: func(x []float32, a float32) {
			b := v.body(len(x))
			if b > 0 {
				v.scale(&x[0], b, a)
			}
			scaleGeneric(x[b:], a)
		},
		SumSquares: func(x []float32) float32 { return f32.dot(x, x) },
		Max: func(x []float32) float32 {
			b := x[:v.body(len(x))]
			mx := float32(math.Inf(-1))
			if len(b) > 0 {
				mx = v.max(&b[0], len(b))
			}
			return max(mx, maxGeneric(x[len(b):]))
		},
		RotatePairs: func(vs, c, s []float32) {
			b := len(vs) &^ (v.lanes - 1)
			if b > 0 && len(vs) == 2*len(c) && len(s) == len(c) {
				v.rotPairs(&vs[0], &c[0], &s[0], b)
			} else {
				b = 0
			}
			rotatePairsGeneric(vs[b:], c[b/2:], s[b/2:])
		},
		RotateHalves: func(x, y, c, s []float32) {
			b := len(x) &^ (v.lanes - 1)
			if b > 0 && len(y) == len(x) && len(c) == len(x) && len(s) == len(x) {
				v.rotHalves(&x[0], &y[0], &c[0], &s[0], b)
			} else {
				b = 0
			}
			rotateHalvesGeneric(x[b:], y[b:], c[b:], s[b:])
		},
		ConvertF16ToF32: func(dst []float32, src []uint16) {
			checkSameLen("ConvertF16ToF32", len(dst), len(src))
			b := v.body(len(src))
			if b > 0 {
				v.cvtF16F32(&dst[0], &src[0], b)
			}
			for i := b; i < len(src); i++ {
				dst[i] = f16ToF32(src[i])
			}
		},
		ConvertF32ToF16: func(dst []uint16, src []float32) {
			checkSameLen("ConvertF32ToF16", len(dst), len(src))
			b := v.body(len(src))
			if b > 0 {
				v.cvtF32F16(&dst[0], &src[0], b)
			}
			convertF32ToF16Generic(dst[b:], src[b:])
		},
		ConvertBF16ToF32: func(dst []float32, src []uint16) {
			checkSameLen("ConvertBF16ToF32", len(dst), len(src))
			b := v.body(len(src))
			if b > 0 {
				v.cvtBF16(&dst[0], &src[0], b)
			}
			convertBF16ToF32Generic(dst[b:], src[b:])
		},
	}
}

var (
	avx512Set = makeSet("avx512", &f32AVX512, &f16AVX512, &bf16AVX512, &vecKernels{
		align: 1, axpy: axpy_avx512, axpyRows: &axpyRows_avx512, axpyRowsH: &axpyRowsF16_avx512, expSum: expSum_avx512, silu: silu_avx512, swiglu: swiglu_avx512, scale: scale_avx512,
		cvtF16F32: cvtF16F32_avx512, cvtBF16: cvtBF16F32_avx512, cvtF32F16: cvtF32F16_avx512,
		max: max_avx512, rotPairs: rotatePairs_avx512, rotHalves: rotateHalves_avx512, lanes: 16,
	})
	avx2Set = makeSet("avx2", &f32AVX2, &f16AVX2, &bf16AVX2, &vecKernels{
		align: 8, axpy: axpy_avx2, axpyRows: &axpyRows_avx2, axpyRowsH: &axpyRowsF16_avx2, expSum: expSum_avx2, silu: silu_avx2, swiglu: swiglu_avx2, scale: scale_avx2,
		cvtF16F32: cvtF16F32_avx2, cvtBF16: cvtBF16F32_avx2, cvtF32F16: cvtF32F16_avx2,
		max: max_avx2, rotPairs: rotatePairs_avx2, rotHalves: rotateHalves_avx2, lanes: 8,
	})
)
