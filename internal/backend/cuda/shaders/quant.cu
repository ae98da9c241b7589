// quant.cu: matvec with a 4- or 8-bit affine-quantized weight (MLX layout:
// codes packed low bits first in u32 words, a scale s and bias b per group
// of gs elements of a row, value = float(s·q) + b), for f32/f16/bf16 scales.
// qmatvec_<bits>_<scales>, qmatvec1_<bits>_<scales>: out[m,n] = x[m,k]·wᵀ;
// a block computes 2·SC columns for every row, SC = QMV_SET_COLS (4) in
// qmatvec_* and QMV1_SET_COLS (8) in qmatvec1_* (below); qmatvec1_c4_*
// and qmatvec1_c2_* (and qlinear1_c{4,2}[_norm]_*) are the one-row
// kernels with SC = 4 and 2, the same bits (QMATVEC1_NARROW).
// Grid: (ceil(n/(2·SC))); block: 128 threads (4 warps).
// qlinear{1,}_{norm_,}<bits>_<scales>: the same products with a layer's
// neighbours folded in (graph.LinearOp over a quantized weight; below).
// Grid: (ceil(n/(2·SC))), with a GLU (ceil(n/SC)); block: 128.
// dequant_<bits>_<scales>: the whole matrix as f32 (graph's DequantizeOp),
// out[n,k] = float(s·q) + b, one thread per element.
// Grid: (ceil(n·k/256)); block: 256.
#include "prelude.cuh"

// qmatvec follows the scheme of MLX's qmv_fast (and of the Metal backend's
// quant_qmv): a thread's codes of one 16-byte chunk lie in one group, so a
// chunk contributes s·Σ(x·q) + b·Σx instead of Σ x·(s·q + b), and the
// dequantization per code is one fma, not an fma, a multiply and an add.
//
// Codes are never shifted down to bit 0. Within each 16-bit half of a word,
// code i is masked in place (h & (mask << BITS·i)), worth q·2^(BITS·i), and
// x was multiplied once by 2^-(BITS·i) (qmv_xscale): both scalings are by
// powers of two, so x'·(masked code) is exactly x·q (for |x| ≥ 2^-114, where
// x' is not subnormal) and the sums have the bits that shifting each code
// down to bit 0 would give, at a multiply per x instead of a shift per code
// and column. The masked value is below 2^16 and
// becomes a float without an integer conversion (qmv_code): cvt.rn.f32.u32
// issues 16 a clock an SM on sm_80 and sm_90, where fmas issue 64 or 128,
// and with it, not memory, the previous kernel was the limit
// (quant_ptx_test.go's TestQMatVecNoCodeConversions keeps it out of the PTX).
//
// Split: the 4 warps are two column sets of SC columns; in a set,
// thread kt (0..QMV_KTHREADS-1) reads 16-byte chunks (4 words: 32 4-bit or
// 16 8-bit codes) kt, kt+64, ... of each of its columns' rows. At k = 2048
// a 4-bit row is 64 chunks and an 8-bit row 128, so every thread of the
// block has one or two whatever the group size (32, 64, 128: a chunk never
// spans groups); the previous split, 128 threads over 8 columns' chunks,
// left half of them idle at 4 bits. A row of k codes is k·BITS/32 words, a
// multiple of 4 since k is a multiple of the group size (32 or more), and
// the backend passes w 16-byte aligned, so chunks are whole 16-byte loads.
//
// Order: a (row, column)'s sum runs over thread kt's chunks in order (in a
// chunk, codes in k order into Σx'q and Σx), then the warp's butterfly,
// then the set's two warps in order: an order that depends on k alone, so a
// row has the same bits whatever m is (the kernel computes rows 1 to 4 at a
// time, each from its own registers). x is read 16 bytes at a time where it
// is 16-byte aligned (then every row and word's x is), else one float at a
// time, in the same order.
//
// Columns: how many a set has changes no column's order, only how many
// columns' chunks a thread loads at once and how many columns one load of
// x serves. Decoding (qmatvec1_*, qlinear1_*) is bound by a block's fixed
// latency, not by its bytes: at k = 2048 a thread has one chunk a column,
// so a block is one round trip for its loads, the sums, the barrier and
// the write whatever its columns. Its sets have 8 columns: a thread issues
// 8 16-byte code loads and 16 scale and bias loads before it uses any, a
// block reads 16 KB of 4-bit codes (8 before) for the same 8 KB of x a
// set, and a product has half the blocks, so fewer waves. The 4-row
// kernels keep 4 (their sums take 4 times the registers; at 8 they would
// spill), which leaves a row's bits as they were: TestQMatVecRowsSameBitsAnyM
// compares qmatvec1's 16-column blocks with qmatvec's 8-column ones.
#define QMV_COLS 8      // columns per block of the multi-row kernels (matvec8Cols in matmul.go)
#define QMV_SET_COLS 4  // columns per set of QMV_KTHREADS threads (qmvSetCols in quant.go)
#define QMV1_SET_COLS 8 // the one-row kernels' (qmv1SetCols), 16 columns a block
#define QMV_KTHREADS 64 // threads of a set along k (qmvKThreads in quant.go)

// qmv_xscale is 2^-(BITS·i), the pre-scale of x for code i of a 16-bit
// half: each spelled out, a constant once inlined.
template <int BITS> DEVICE float qmv_xscale(int i) {
	if constexpr (BITS == 4) {
		return i == 0 ? 1.0f : i == 1 ? 0.0625f : i == 2 ? 0.00390625f : 0.000244140625f;
	} else {
		return i == 0 ? 1.0f : 0.00390625f;
	}
}

// qmv_code is h & mask as a float, for a masked value below 2^23, without
// an integer-to-float conversion: 0x4B000000 | m are the bits of 2^23 + m
// (m fills the mantissa), and subtracting 2^23 is exact. A logic op (ptxas
// merges the and and the or) and an add, both at the fma's rate or half.
DEVICE float qmv_code(unsigned h, unsigned mask) { return bits_f32(0x4B000000u | (h & mask)) - 8388608.0f; }

// Fused products (qlinear_*, graph.LinearOp): matvec.cu's linear kernels'
// folds, in their order and with their flags (LIN_* there, linNorm... in
// linear.go). Norm prologue: x is multiplied by the gain as it is loaded,
// before it is pre-scaled, so Σx'q and Σx (the scale's and the bias's
// terms) are both of x·g, and each thread adds up the raw x² beside them;
// the row's sums are scaled by 1/sqrt(mean(x²)+eps) at the end. Epilogue
// (the thread that writes an output): + bias, SiLU(gate)·up or
// GELU(gate)·up, + residual. With a GLU the block's first set computes
// gate columns j..j+SC-1 (w's rows) and its second the up columns
// n+j..n+j+SC-1 (rows n+j...), each with its own rows' codes, scales and
// biases, so a block has SC outputs.
#define QLIN_NORM 1
#define QLIN_BIAS 2
#define QLIN_SWIGLU 4
#define QLIN_RESIDUAL 8
#define QLIN_GEGLU 16
#define QLIN_GLU (QLIN_SWIGLU | QLIN_GEGLU) // either: w holds the gate rows, then the up rows

// QLinFold is what a fused launch adds to the product: gain, bias and res
// are read only when flags say so (the host passes x for those it lacks:
// every pointer argument is a live allocation). bias has 2n entries with
// a GLU, else n.
struct QLinFold {
	const float *gain, *bias, *res;
	float eps;
	int flags;
};

DEVICE float qlin_silu(float v) { return v * (1.0f / (1.0f + cu_exp(-v))); }
// qlin_gelu is elementwise.cu's gelu (GeGLU's), the same expression.
DEVICE float qlin_gelu(float x) {
	const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
	return 0.5f * x * (2.0f - 2.0f / (1.0f + cu_exp(2.0f * u)));
}

// qlin_out is output (row, j) from its sums: y of column j, u of column
// n+j (a GLU) and ss = Σx² over the row (norm), in lin_out's order.
DEVICE ALWAYS_INLINE float qlin_out(const QLinFold &f, int row, int j, int k, int n, float y, float u, float ss) {
	if (f.flags & QLIN_NORM) {
		// float(k) as qmv_code makes a code a float (k < 2^23: exact), so
		// that the kernels' PTX keeps no integer conversion for
		// TestQMatVecNoCodeConversions to tell from a code's.
		const float kf = qmv_code(unsigned(k), 0x7fffffu);
		const float scale = 1.0f / cu_sqrt(ss / kf + f.eps); // as rms_norm_f32 computes it
		y *= scale;
		u *= scale;
	}
	if (f.flags & QLIN_BIAS) {
		y += f.bias[j];
		if (f.flags & QLIN_GLU) u += f.bias[n + j];
	}
	if (f.flags & QLIN_SWIGLU) y = qlin_silu(y) * u;
	else if (f.flags & QLIN_GEGLU) y = qlin_gelu(y) * u;
	if (f.flags & QLIN_RESIDUAL) y = f.res[u64(row) * u64(n) + u64(j)] + y;
	return y;
}

// qmatvec_rows computes rows r0..r0+R of the block's columns. FUSE adds
// f's epilogue and NORM its prologue (the plain qmatvec kernels have
// neither: not a branch, not a register of them); sqs holds each warp's
// Σx² (NORM).
template <int BITS, class S, bool VEC, int R, bool FUSE, bool NORM, int SC>
DEVICE ALWAYS_INLINE void qmatvec_rows(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int r0, int k, int n, int gs,
                                       const QLinFold &f, float part[4][4][QMV1_SET_COLS], float sqs[4][4]) {
	static_assert(FUSE || !NORM, "the norm is a fold");
	constexpr int per = 32 / BITS, per_half = 16 / BITS; // codes per word, per 16-bit half
	constexpr unsigned mask = (1u << BITS) - 1u;
	const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
	const int kt = t % QMV_KTHREADS, set = t / QMV_KTHREADS;
	const bool glu = FUSE && (f.flags & QLIN_GLU) != 0;
	const int col0 = int(blockIdx.x) * (2 * SC) + set * SC;
	const u64 chunks = u64(k / (4 * per)), groups = u64(k / gs);
	// Columns past n read column n-1 (so every load is unconditional);
	// their sums are never written.
	u64 col[SC];
	if (!glu) {
#pragma unroll
		for (int c = 0; c < SC; c++) col[c] = u64(col0 + c < n ? col0 + c : n - 1);
	} else { // set 0 reads the gate rows of the block's columns, set 1 their up rows
		const int g0 = int(blockIdx.x) * SC;
#pragma unroll
		for (int c = 0; c < SC; c++) col[c] = u64((g0 + c < n ? g0 + c : n - 1) + set * n);
	}
	float acc[R][SC], ss[R];
#pragma unroll
	for (int r = 0; r < R; r++) {
		ss[r] = 0.0f;
#pragma unroll
		for (int c = 0; c < SC; c++) acc[r][c] = 0.0f;
	}
	for (u64 j = u64(kt); j < chunks; j += QMV_KTHREADS) {
		u32x4 cw[SC];
		float s[SC], b[SC];
		const u64 g = j * u64(4 * per) / u64(gs);
#pragma unroll
		for (int c = 0; c < SC; c++) {
			cw[c] = ld_v4_u32(w + (col[c] * chunks + j) * 4u);
			s[c] = load_w(scales, col[c] * groups + g);
			b[c] = load_w(biases, col[c] * groups + g);
		}
		float dot[R][SC], xsum[R];
#pragma unroll
		for (int r = 0; r < R; r++) {
			xsum[r] = 0.0f;
#pragma unroll
			for (int c = 0; c < SC; c++) dot[r][c] = 0.0f;
		}
#pragma unroll
		for (int v = 0; v < 4; v++) {
			// x of word v's codes, pre-scaled for its codes' places.
			float xs[R][per], gn[per];
			if constexpr (NORM) {
				const u64 i = (j * 4u + u64(v)) * u64(per);
#pragma unroll
				for (int e0 = 0; e0 < per; e0 += 4) {
					if (VEC) {
						const f32x4 l = ld_v4_f32(f.gain + i + u64(e0));
#pragma unroll
						for (int e = 0; e < 4; e++) gn[e0 + e] = l.v[e];
					} else {
#pragma unroll
						for (int e = 0; e < 4; e++) gn[e0 + e] = f.gain[i + u64(e0 + e)];
					}
				}
			}
#pragma unroll
			for (int r = 0; r < R; r++) {
				const u64 i = u64(r0 + r) * u64(k) + (j * 4u + u64(v)) * u64(per);
#pragma unroll
				for (int e0 = 0; e0 < per; e0 += 4) {
					float a[4];
					if (VEC) {
						const f32x4 l = ld_v4_f32(x + i + u64(e0));
#pragma unroll
						for (int e = 0; e < 4; e++) a[e] = l.v[e];
					} else {
#pragma unroll
						for (int e = 0; e < 4; e++) a[e] = x[i + u64(e0 + e)];
					}
#pragma unroll
					for (int e = 0; e < 4; e++) {
						if constexpr (NORM) {
							ss[r] = cu_fma(a[e], a[e], ss[r]);
							a[e] *= gn[e0 + e];
						}
						xsum[r] += a[e];
						xs[r][e0 + e] = a[e] * qmv_xscale<BITS>((e0 + e) % per_half);
					}
				}
			}
#pragma unroll
			for (int c = 0; c < SC; c++) {
				const unsigned lo = cw[c].v[v], hi = cw[c].v[v] >> 16;
#pragma unroll
				for (int e = 0; e < per; e++) {
					const float q = qmv_code(e < per_half ? lo : hi, mask << (BITS * (e % per_half)));
#pragma unroll
					for (int r = 0; r < R; r++) dot[r][c] = cu_fma(xs[r][e], q, dot[r][c]);
				}
			}
		}
#pragma unroll
		for (int r = 0; r < R; r++) {
#pragma unroll
			for (int c = 0; c < SC; c++) acc[r][c] += cu_fma(s[c], dot[r][c], b[c] * xsum[r]);
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < SC; c++) {
			const float sum = warp_sum(acc[r][c]);
			if (lane == 0) part[warp][r][c] = sum;
		}
		if constexpr (NORM) {
			// Both sets read the same x, so each has the row's Σx²; an
			// output takes its own set's (the gate's with a GLU).
			const float q = warp_sum(ss[r]);
			if (lane == 0) sqs[warp][r] = q;
		}
	}
	sync_threads();
	if constexpr (!FUSE) {
		if (t < R * (2 * SC)) {
			const int r = t / (2 * SC), cc = t % (2 * SC), ws = 2 * (cc / SC), c = cc % SC;
			const int oc = int(blockIdx.x) * (2 * SC) + cc;
			if (oc < n) out[u64(r0 + r) * u64(n) + u64(oc)] = part[ws][r][c] + part[ws + 1][r][c];
		}
	} else if (!glu) {
		if (t < R * (2 * SC)) {
			const int r = t / (2 * SC), cc = t % (2 * SC), ws = 2 * (cc / SC), c = cc % SC;
			const int oc = int(blockIdx.x) * (2 * SC) + cc;
			const float q = NORM ? sqs[ws][r] + sqs[ws + 1][r] : 0.0f;
			if (oc < n) out[u64(r0 + r) * u64(n) + u64(oc)] = qlin_out(f, r0 + r, oc, k, n, part[ws][r][c] + part[ws + 1][r][c], 0.0f, q);
		}
	} else {
		if (t < R * SC) {
			const int r = t / SC, c = t % SC;
			const int oc = int(blockIdx.x) * SC + c;
			const float q = NORM ? sqs[0][r] + sqs[1][r] : 0.0f;
			if (oc < n) out[u64(r0 + r) * u64(n) + u64(oc)] = qlin_out(f, r0 + r, oc, k, n, part[0][r][c] + part[1][r][c], part[2][r][c] + part[3][r][c], q);
		}
	}
	sync_threads(); // part is written again by the next rows
}
// qmatvec computes m rows: MAXR (1 or 4) at a time where x (and the gain)
// is 16-byte aligned, else one, with sets of SC columns (QMV1_SET_COLS for
// MAXR 1, else QMV_SET_COLS). A kernel's registers are those of its
// largest path: 4 rows of 4 columns take about 190 on sm_90 (2 blocks an
// SM), 1 row of 8 columns about 165 (3), so decoding (m = 1) has its own
// kernels, qmatvec1_* and qlinear1_*, with the rows' bits unchanged since
// every (row, column) is computed by the same code in the same order.
template <int BITS, class S, bool VEC, int MAXR, bool FUSE, bool NORM, int SC>
DEVICE ALWAYS_INLINE void qmatvec(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs,
                                  const QLinFold &f, float part[4][4][QMV1_SET_COLS], float sqs[4][4]) {
	static_assert(SC <= QMV1_SET_COLS && (MAXR == 1 || SC == QMV_SET_COLS), "part has QMV1_SET_COLS columns a warp; the 4-row kernels have QMV_SET_COLS");
	if constexpr (!VEC || MAXR == 1) { // a row at a time
		for (int r0 = 0; r0 < m; r0++) qmatvec_rows<BITS, S, VEC, 1, FUSE, NORM, SC>(out, x, w, scales, biases, r0, k, n, gs, f, part, sqs);
	} else {
		for (int r0 = 0; r0 < m; r0 += 4) {
			switch (m - r0) {
			case 1: qmatvec_rows<BITS, S, VEC, 1, FUSE, NORM, SC>(out, x, w, scales, biases, r0, k, n, gs, f, part, sqs); break;
			case 2: qmatvec_rows<BITS, S, VEC, 2, FUSE, NORM, SC>(out, x, w, scales, biases, r0, k, n, gs, f, part, sqs); break;
			case 3: qmatvec_rows<BITS, S, VEC, 3, FUSE, NORM, SC>(out, x, w, scales, biases, r0, k, n, gs, f, part, sqs); break;
			default: qmatvec_rows<BITS, S, VEC, 4, FUSE, NORM, SC>(out, x, w, scales, biases, r0, k, n, gs, f, part, sqs); break;
			}
		}
	}
}
template <int BITS, class S, int MAXR, int SC>
DEVICE ALWAYS_INLINE void qmatvec(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs) {
	SHARED float part[4][4][QMV1_SET_COLS]; // [warp][row][column of the warp's set] sums of each warp
	const QLinFold none = {x, x, x, 0.0f, 0};
	if ((reinterpret_cast<u64>(x) & 15u) == 0) {
		qmatvec<BITS, S, true, MAXR, false, false, SC>(out, x, w, scales, biases, m, k, n, gs, none, part, nullptr);
	} else {
		qmatvec<BITS, S, false, MAXR, false, false, SC>(out, x, w, scales, biases, m, k, n, gs, none, part, nullptr);
	}
}
// qlinear is qmatvec with f folded in; NORM is the flags' norm bit.
template <int BITS, class S, int MAXR, bool NORM, int SC>
DEVICE ALWAYS_INLINE void qlinear(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs,
                                  QLinFold f) {
	SHARED float part[4][4][QMV1_SET_COLS]; // [warp][row][column of the warp's set] sums of each warp
	SHARED float sqs[4][4];                // [warp][row] Σx² of each warp (NORM)
	f.flags = NORM ? f.flags | QLIN_NORM : f.flags & ~QLIN_NORM;
	const bool aligned = (reinterpret_cast<u64>(x) & 15u) == 0 && (!NORM || (reinterpret_cast<u64>(f.gain) & 15u) == 0);
	if (aligned) {
		qmatvec<BITS, S, true, MAXR, true, NORM, SC>(out, x, w, scales, biases, m, k, n, gs, f, part, sqs);
	} else {
		qmatvec<BITS, S, false, MAXR, true, NORM, SC>(out, x, w, scales, biases, m, k, n, gs, f, part, sqs);
	}
}

// qmatvec_<bits>_<scales> computes 4 rows of x at a time (verification);
// qmatvec1_<bits>_<scales> one (decoding), 16 columns a block. Both are
// held (launch_bounds: 128 threads, blocks an SM) to what lets one more
// block share an SM without spilling (shaders_test.go's TestPtxas):
// qmatvec 168 registers, 3 blocks (190: 2); qmatvec1 164 to 168, 3 blocks
// (ptxas takes about that unbounded; held to 128, 4 blocks, the 4-bit
// kernels spill 20 bytes on sm_90, 152 on sm_80). The weights are read
// once, so the loads that other blocks have in flight are what keeps the
// memory busy: 3 blocks of qmatvec1 have 48 KB of codes in flight an SM
// (128 threads × 8 × 16 bytes each), 6 MB over 132 SMs, where an H100
// needs about 2 MB (3 TB/s × 700 ns) to keep its memory busy.
#if CU_DEVICE_BUILD
#define QMV_BOUNDS(blocks) __attribute__((launch_bounds(128, blocks)))
#else
#define QMV_BOUNDS(blocks)
#endif
// qmatvec1_c<SC>_* and qlinear1_c<SC>[_norm]_* are the one-row kernels
// with sets of SC = 4 or 2 columns (8 or 4 a block, 4 or 2 outputs with
// a GLU), for products whose 16-column blocks would leave SMs idle or
// alone: O and down at n = 2048 are 128 blocks, fewer than an H100's 132
// SMs, 4 warps an SM, each thread's loads and sums one after the other
// with nothing to hide them (quant.go's qmv1Cols chooses per launch). Each
// column's sum is the same code in the same order whatever SC is (above),
// so they have qmatvec1_*'s bits (TestQMatVecRowsSameBitsAnyM compares
// them all). Fewer columns take fewer registers: held to 4 blocks an SM,
// so that the 512 blocks of a 2048-wide product at SC = 2 fit an H100 at
// once.
#define QMATVEC1_NARROW(BITS, S, NAME, SC) \
	KERNEL QMV_BOUNDS(4) void qmatvec1_c##SC##_##BITS##_##NAME(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, \
	                                                            int n, int gs) { \
		qmatvec<BITS, S, 1, SC>(out, x, w, scales, biases, m, k, n, gs); \
	}
#define QLINEAR1_NARROW(BITS, S, NAME, SC) \
	KERNEL QMV_BOUNDS(4) void qlinear1_c##SC##_##BITS##_##NAME(QLIN_PARAMS(S)) { \
		qlinear<BITS, S, 1, false, SC>(out, x, w, scales, biases, m, k, n, gs, QLinFold{gain, bias, res, eps, flags}); \
	} \
	KERNEL QMV_BOUNDS(4) void qlinear1_c##SC##_norm_##BITS##_##NAME(QLIN_PARAMS(S)) { \
		qlinear<BITS, S, 1, true, SC>(out, x, w, scales, biases, m, k, n, gs, QLinFold{gain, bias, res, eps, flags}); \
	}
#define QMATVEC(BITS, S, NAME) \
	KERNEL QMV_BOUNDS(3) void qmatvec_##BITS##_##NAME(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, \
	                                                   int gs) { \
		qmatvec<BITS, S, 4, QMV_SET_COLS>(out, x, w, scales, biases, m, k, n, gs); \
	} \
	KERNEL QMV_BOUNDS(3) void qmatvec1_##BITS##_##NAME(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, \
	                                                    int gs) { \
		qmatvec<BITS, S, 1, QMV1_SET_COLS>(out, x, w, scales, biases, m, k, n, gs); \
	} \
	QMATVEC1_NARROW(BITS, S, NAME, 4) \
	QMATVEC1_NARROW(BITS, S, NAME, 2)
QMATVEC(4, float, f32)
QMATVEC(4, f16_t, f16)
QMATVEC(4, bf16_t, bf16)
QMATVEC(8, float, f32)
QMATVEC(8, f16_t, f16)
QMATVEC(8, bf16_t, bf16)

// qlinear{1,}_<bits>_<scales> fold a bias, SwiGLU or GeGLU and a residual (flags)
// into qmatvec{1,}'s product, qlinear{1,}_norm_* the norm too (a template
// argument, as in matvec.cu's linear8_norm_*: the prologue's loads and x²
// stay out of the other kernels' loop). Bounds: qmatvec's bounds spill
// the 4-row kernels (ptxas: 12 to 60 bytes), so a block more an SM is
// given up: qlinear and qlinear_norm 255, 2 blocks. The one-row kernels
// take qmatvec1's, 3 blocks: qlinear1 161 to 164 registers, qlinear1_norm
// 167 to 168 (at 128, 4 blocks, qlinear1_norm_4_* spills 16 bytes on sm_90
// and 84 to 92 on sm_80).
#define QLIN_PARAMS(S) \
	float *out, const float *x, const float *gain, const unsigned *w, const S *scales, const S *biases, const float *bias, const float *res, int m, \
	    int k, int n, int gs, float eps, int flags
#define QLINEAR(BITS, S, NAME) \
	KERNEL QMV_BOUNDS(2) void qlinear_##BITS##_##NAME(QLIN_PARAMS(S)) { \
		qlinear<BITS, S, 4, false, QMV_SET_COLS>(out, x, w, scales, biases, m, k, n, gs, QLinFold{gain, bias, res, eps, flags}); \
	} \
	KERNEL QMV_BOUNDS(3) void qlinear1_##BITS##_##NAME(QLIN_PARAMS(S)) { \
		qlinear<BITS, S, 1, false, QMV1_SET_COLS>(out, x, w, scales, biases, m, k, n, gs, QLinFold{gain, bias, res, eps, flags}); \
	} \
	KERNEL QMV_BOUNDS(2) void qlinear_norm_##BITS##_##NAME(QLIN_PARAMS(S)) { \
		qlinear<BITS, S, 4, true, QMV_SET_COLS>(out, x, w, scales, biases, m, k, n, gs, QLinFold{gain, bias, res, eps, flags}); \
	} \
	KERNEL QMV_BOUNDS(3) void qlinear1_norm_##BITS##_##NAME(QLIN_PARAMS(S)) { \
		qlinear<BITS, S, 1, true, QMV1_SET_COLS>(out, x, w, scales, biases, m, k, n, gs, QLinFold{gain, bias, res, eps, flags}); \
	} \
	QLINEAR1_NARROW(BITS, S, NAME, 4) \
	QLINEAR1_NARROW(BITS, S, NAME, 2)
QLINEAR(4, float, f32)
QLINEAR(4, f16_t, f16)
QLINEAR(4, bf16_t, bf16)
QLINEAR(8, float, f32)
QLINEAR(8, f16_t, f16)
QLINEAR(8, bf16_t, bf16)

template <int BITS, class S>
DEVICE void dequant(float *out, const unsigned *w, const S *scales, const S *biases, int n, int k, int gs) {
	const int per = 32 / BITS;
	const u64 i = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (i >= u64(n) * u64(k)) return;
	const u64 r = i / u64(k);
	const int c = int(i - r * u64(k));
	const unsigned word = w[r * u64(k / per) + u64(c / per)];
	const float q = float((word >> (BITS * (c % per))) & ((1u << BITS) - 1u));
	const u64 g = r * u64(k / gs) + u64(c / gs);
	out[i] = load_w(scales, g) * q + load_w(biases, g);
}

#define DEQUANT(BITS, S, NAME) \
	KERNEL void dequant_##BITS##_##NAME(float *out, const unsigned *w, const S *scales, const S *biases, int n, int k, int gs) { \
		dequant<BITS>(out, w, scales, biases, n, k, gs); \
	}
DEQUANT(4, float, f32)
DEQUANT(4, f16_t, f16)
DEQUANT(4, bf16_t, bf16)
DEQUANT(8, float, f32)
DEQUANT(8, f16_t, f16)
DEQUANT(8, bf16_t, bf16)
