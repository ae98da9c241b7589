package kernels

import "fmt"

// Set is one implementation of every kernel. The package-level functions
// call the fields of [Active]; their documentation is the contract of the
// corresponding field in every Set.
type Set struct {
	Name string // "generic", "avx2" or "avx512"

	DotF32     func(a, b []float32) float32
	DotF16     func(w []uint16, x []float32) float32
	DotBF16    func(w []uint16, x []float32) float32
	MatVecF32  func(y, w, x []float32)
	MatVecF16  func(y []float32, w []uint16, x []float32)
	MatVecBF16 func(y []float32, w []uint16, x []float32)
	MatMulF32  func(y []float32, ldy int, x []float32, m int, w []float32)
	MatMulF16  func(y []float32, ldy int, x []float32, m int, w []uint16)
	MatMulBF16 func(y []float32, ldy int, x []float32, m int, w []uint16)
	// MatMulStridedF32 is documented at the package-level function.
	MatMulStridedF32 func(y []float32, ldy int, x []float32, ldx, m int, w []float32, ldw, n, k int)
	MatMulStridedF16 func(y []float32, ldy int, x []float32, ldx, m int, w []uint16, ldw, n, k int)
	Axpy             func(y []float32, a float32, x []float32)
	AxpyRows         func(y []float32, ldy, m, d int, p []float32, ldp, rows int, v []float32, ldv int)
	AxpyRowsF16      func(y []float32, ldy, m, d int, p []float32, ldp, rows int, v []uint16, ldv int)
	Scale            func(x []float32, a float32)
	ExpSum           func(x []float32, mx float32) float32
	SiLU             func(y, x []float32)
	SwiGLU           func(y, gate, up []float32)
	SumSquares       func(x []float32) float32
	Max              func(x []float32) float32
	RotatePairs      func(v, c, s []float32)
	RotateHalves     func(x, y, c, s []float32)

	ConvertF16ToF32  func(dst []float32, src []uint16)
	ConvertF32ToF16  func(dst []uint16, src []float32)
	ConvertBF16ToF32 func(dst []float32, src []uint16)
}

// Sets returns every Set the running CPU supports, Generic first and the
// preferred (Active) one last.
func Sets() []Set { return append([]Set{Generic}, archSets()...) }

var active = func() Set { s := Sets(); return s[len(s)-1] }()

// Active returns the Set used by the package-level functions.
func Active() Set { return active }

// DotF32 returns Σ a[i]*b[i]. It panics unless len(a) == len(b).
func DotF32(a, b []float32) float32 { return active.DotF32(a, b) }

// DotF16 returns Σ f16(w[i])*x[i], w holding IEEE half bits. It panics
// unless len(w) == len(x).
func DotF16(w []uint16, x []float32) float32 { return active.DotF16(w, x) }

// DotBF16 returns Σ bf16(w[i])*x[i]. It panics unless len(w) == len(x).
func DotBF16(w []uint16, x []float32) float32 { return active.DotBF16(w, x) }

// MatVecF32 sets y[r] = dot(w[r*k:(r+1)*k], x) for every r < len(y), with
// k = len(x). It panics unless len(w) == len(y)*k.
func MatVecF32(y, w, x []float32) { active.MatVecF32(y, w, x) }

// MatVecF16 is MatVecF32 with IEEE half weights.
func MatVecF16(y []float32, w []uint16, x []float32) { active.MatVecF16(y, w, x) }

// MatVecBF16 is MatVecF32 with bfloat16 weights.
func MatVecBF16(y []float32, w []uint16, x []float32) { active.MatVecBF16(y, w, x) }

// MatMulF32 sets y[i*ldy+j] = Σ_kk x[i*k+kk]*w[j*k+kk] for i < m, j < n,
// where x is [m, k] (k = len(x)/m) and w is [n, k] row-major (n = len(w)/k).
// To compute a column block of a wider output, pass that block's rows of the
// weight matrix and y sliced from the block's first column. It panics unless
// len(x) is a multiple of m, len(w) a multiple of k, ldy ≥ n and
// len(y) ≥ (m-1)*ldy+n. With m == 0 or k == 0 it does nothing (n is then
// undefined).
func MatMulF32(y []float32, ldy int, x []float32, m int, w []float32) {
	active.MatMulF32(y, ldy, x, m, w)
}

// MatMulF16 is MatMulF32 with IEEE half weights.
func MatMulF16(y []float32, ldy int, x []float32, m int, w []uint16) {
	active.MatMulF16(y, ldy, x, m, w)
}

// MatMulBF16 is MatMulF32 with bfloat16 weights.
func MatMulBF16(y []float32, ldy int, x []float32, m int, w []uint16) {
	active.MatMulBF16(y, ldy, x, m, w)
}

// MatMulStridedF32 is MatMulF32 over row-strided operands:
// y[i*ldy+j] = Σ_{kk<k} x[i*ldx+kk]*w[j*ldw+kk] for i < m, j < n. Every
// output has the bits MatMulF32 gives it, whatever m and n are and wherever
// it lies in y: attention scores a key the same way whichever keys share the
// call. It panics unless the strides are at least k (ldy at least n) and the
// slices hold the last row.
func MatMulStridedF32(y []float32, ldy int, x []float32, ldx, m int, w []float32, ldw, n, k int) {
	active.MatMulStridedF32(y, ldy, x, ldx, m, w, ldw, n, k)
}

// MatMulStridedF16 is MatMulStridedF32 with IEEE half w: every output has
// the bits MatMulF16 gives it alone.
func MatMulStridedF16(y []float32, ldy int, x []float32, ldx, m int, w []uint16, ldw, n, k int) {
	active.MatMulStridedF16(y, ldy, x, ldx, m, w, ldw, n, k)
}

// Axpy sets y[i] += a*x[i]. It panics unless len(y) == len(x).
func Axpy(y []float32, a float32, x []float32) { active.Axpy(y, a, x) }

// AxpyRows adds weighted rows of v to m rows of y: for r = 0, 1, ...,
// rows-1 in order, y[i*ldy+j] += p[i*ldp+r]*v[r*ldv+j] for i < m, j < d,
// each term rounded as Axpy rounds it, so every row of y ends as rows calls
// of Axpy would leave it (y stays in registers meanwhile, and each row of v
// is loaded once for several rows of y). It panics unless the strides are
// at least the widths and the slices hold their last rows.
func AxpyRows(y []float32, ldy, m, d int, p []float32, ldp, rows int, v []float32, ldv int) {
	active.AxpyRows(y, ldy, m, d, p, ldp, rows, v, ldv)
}

// AxpyRowsF16 is AxpyRows with IEEE half v: every row of y ends as
// AxpyRows over v converted to float32 leaves it.
func AxpyRowsF16(y []float32, ldy, m, d int, p []float32, ldp, rows int, v []uint16, ldv int) {
	active.AxpyRowsF16(y, ldy, m, d, p, ldp, rows, v, ldv)
}

// Scale sets x[i] *= a.
func Scale(x []float32, a float32) { active.Scale(x, a) }

// ExpSum sets x[i] = e^(x[i]-mx), within 3e-7 relative, or 0 where
// x[i]-mx < -87 or is NaN, and returns the sum of the results, added in an
// order that depends on len(x) alone (not on x's address): a softmax over
// the same values gives the same bits wherever they are stored. mx is
// meant to be max(x), so that every exponent is at most 0.
func ExpSum(x []float32, mx float32) float32 { return active.ExpSum(x, mx) }

// SiLU sets y[i] = x[i]·sigmoid(x[i]) (within 1e-6 relative). It panics
// unless len(y) == len(x); y may be x.
func SiLU(y, x []float32) { active.SiLU(y, x) }

// SwiGLU sets y[i] = SiLU(gate[i])·up[i]. It panics unless the lengths are
// equal; y may be gate or up.
func SwiGLU(y, gate, up []float32) { active.SwiGLU(y, gate, up) }

// SumSquares returns Σ x[i]*x[i].
func SumSquares(x []float32) float32 { return active.SumSquares(x) }

// Max returns the largest element of x, skipping NaNs; -Inf when x is
// empty or all NaN. Which zero it returns of +0 and -0 is unspecified.
func Max(x []float32) float32 { return active.Max(x) }

// RotatePairs rotates each interleaved pair (v[2i], v[2i+1]) by the angle
// whose cosine and sine are c[i] and s[i]: it becomes (v[2i]·c[i] −
// v[2i+1]·s[i], v[2i]·s[i] + v[2i+1]·c[i]), each product rounded to
// float32, then the sum (no fused multiply-add), in every Set: RoPE's
// layout in GGUF files. len(v) must be 2·len(c) and len(s) == len(c).
func RotatePairs(v, c, s []float32) { active.RotatePairs(v, c, s) }

// RotateHalves rotates each pair (x[i], y[i]) the same way: RoPE's NeoX
// layout, whose pairs are the two halves of a head. All four lengths must
// be equal.
func RotateHalves(x, y, c, s []float32) { active.RotateHalves(x, y, c, s) }

// ConvertF16ToF32 sets dst[i] to the value of the IEEE half src[i] (exact;
// signalling NaNs come out quiet). It panics unless len(dst) == len(src).
func ConvertF16ToF32(dst []float32, src []uint16) { active.ConvertF16ToF32(dst, src) }

// ConvertF32ToF16 sets dst[i] to src[i] rounded to the nearest IEEE half,
// ties to even (quant.F32ToF16). It panics unless len(dst) == len(src).
func ConvertF32ToF16(dst []uint16, src []float32) { active.ConvertF32ToF16(dst, src) }

// ConvertBF16ToF32 sets dst[i] to the value of the bfloat16 src[i] (exact).
// It panics unless len(dst) == len(src).
func ConvertBF16ToF32(dst []float32, src []uint16) { active.ConvertBF16ToF32(dst, src) }

// Argument checks shared by every Set; they panic on programmer errors.

func checkSameLen(op string, na, nb int) {
	if na != nb {
		panic(fmt.Sprintf("kernels: %s: lengths differ (%d and %d)", op, na, nb))
	}
}

// checkMatVec validates a MatVec call.
func checkMatVec(op string, ny, nw, nx int) {
	if nw != ny*nx {
		panic(fmt.Sprintf("kernels: %s: len(w)=%d, want len(y)*len(x)=%d*%d", op, nw, ny, nx))
	}
}

// checkAxpyRows validates an AxpyRows call and reports whether there is
// anything to do.
func checkAxpyRows(ny, ldy, m, d, np, ldp, rows, nv, ldv int) bool {
	if m < 0 || d < 0 || rows < 0 {
		panic(fmt.Sprintf("kernels: AxpyRows: negative size m=%d d=%d rows=%d", m, d, rows))
	}
	if m == 0 || d == 0 || rows == 0 {
		return false
	}
	if ldy < d || ldp < rows || ldv < d || ny < (m-1)*ldy+d || np < (m-1)*ldp+rows || nv < (rows-1)*ldv+d {
		panic(fmt.Sprintf("kernels: AxpyRows: %d rows of y (len %d, ld %d, width %d), p (len %d, ld %d), %d rows of v (len %d, ld %d)",
			m, ny, ldy, d, np, ldp, rows, nv, ldv))
	}
	return true
}

// checkStrided validates a MatMulStridedF32 call and reports whether there
// is anything to do.
func checkStrided(ny, ldy, nx, ldx, m, nw, ldw, n, k int) bool {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernels: MatMulStridedF32: negative size m=%d n=%d k=%d", m, n, k))
	}
	if m == 0 || n == 0 || k == 0 {
		return false
	}
	if ldx < k || ldw < k || ldy < n || nx < (m-1)*ldx+k || nw < (n-1)*ldw+k || ny < (m-1)*ldy+n {
		panic(fmt.Sprintf("kernels: MatMulStridedF32: %d×%d×%d does not fit x (len %d, ld %d), w (len %d, ld %d), y (len %d, ld %d)",
			m, n, k, nx, ldx, nw, ldw, ny, ldy))
	}
	return true
}

// checkMatMul validates a MatMul call and returns k and n; k == 0 means
// there is nothing to do.
func checkMatMul(op string, ny, ldy, nx, m, nw int) (k, n int) {
	if m < 0 || (m == 0 && nx != 0) || (m > 0 && nx%m != 0) {
		panic(fmt.Sprintf("kernels: %s: len(x)=%d is not a multiple of m=%d", op, nx, m))
	}
	if m == 0 || nx == 0 {
		return 0, 0
	}
	k = nx / m
	if nw%k != 0 {
		panic(fmt.Sprintf("kernels: %s: len(w)=%d is not a multiple of k=%d", op, nw, k))
	}
	n = nw / k
	if n == 0 {
		return 0, 0
	}
	if ldy < n || ny < (m-1)*ldy+n {
		panic(fmt.Sprintf("kernels: %s: y too small (len %d, ldy %d) for %d×%d", op, ny, ldy, m, n))
	}
	return k, n
}
