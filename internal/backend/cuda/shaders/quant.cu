// quant.cu: matvec with a 4- or 8-bit affine-quantized weight (MLX layout:
// codes packed low bits first in u32 words, a scale s and bias b per group
// of gs elements of a row, value = float(s·q) + b), for f32/f16/bf16 scales.
// A block computes QMV_COLS columns for every row (below).
// Grid: (ceil(n/QMV_COLS)); block: 128 threads (4 warps).
// dequant_<bits>_<scales>: the whole matrix as f32 (graph's DequantizeOp),
// out[n,k] = float(s·q) + b, one thread per element.
// Grid: (ceil(n·k/256)); block: 256.
#include "prelude.cuh"

// As matvec8 (matvec.cu) and for the same reason, a block of 128 threads
// takes QMV_COLS columns and thread t reads 16-byte chunks (4 words) of
// codes t, t+128, ... of each column's row. A row of k codes is k·BITS/32
// words, a multiple of 4 since k is a multiple of the group size (32 or
// more), and the backend passes w 16-byte aligned. A chunk holds 32
// (4-bit) or 16 (8-bit) codes, never more than a group, so its scale and
// bias are read once. A (row, column)'s sum runs over thread t's chunks in
// order, then the warp's butterfly, then the 4 warps in order: an order
// that depends on k alone. x is read 16 bytes at a time where it is
// 16-byte aligned (then every row and chunk is), else one float at a time.
#define QMV_COLS 8
// qmatvec_rows computes rows r0..r0+R of the block's columns.
template <int BITS, class S, bool VEC, int R>
DEVICE ALWAYS_INLINE void qmatvec_rows(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int r0, int k, int n, int gs,
                         float part[4][4][QMV_COLS]) {
	constexpr int per = 32 / BITS;
	const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
	const int col0 = int(blockIdx.x) * QMV_COLS;
	const u64 chunks = u64(k / (4 * per)), groups = u64(k / gs);
	// Columns past n read column n-1 (so every load is unconditional);
	// their sums are never written.
	u64 col[QMV_COLS];
#pragma unroll
	for (int c = 0; c < QMV_COLS; c++) col[c] = u64(col0 + c < n ? col0 + c : n - 1);
	float acc[R][QMV_COLS];
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < QMV_COLS; c++) acc[r][c] = 0.0f;
	}
	for (u64 j = u64(t); j < chunks; j += 128u) {
		u32x4 cw[QMV_COLS];
		float s[QMV_COLS], b[QMV_COLS];
		const u64 g = j * u64(4 * per) / u64(gs);
#pragma unroll
		for (int c = 0; c < QMV_COLS; c++) {
			cw[c] = ld_v4_u32(w + (col[c] * chunks + j) * 4u);
			s[c] = load_w(scales, col[c] * groups + g);
			b[c] = load_w(biases, col[c] * groups + g);
		}
#pragma unroll
		for (int v = 0; v < 4; v++) {
#pragma unroll
			for (int e0 = 0; e0 < per; e0 += 4) {
				const u64 kk = (j * 4u + u64(v)) * u64(per) + u64(e0);
				float xs[R][4];
#pragma unroll
				for (int r = 0; r < R; r++) {
					const u64 i = u64(r0 + r) * u64(k) + kk;
					if (VEC) {
						const f32x4 a = ld_v4_f32(x + i);
#pragma unroll
						for (int e = 0; e < 4; e++) xs[r][e] = a.v[e];
					} else {
#pragma unroll
						for (int e = 0; e < 4; e++) xs[r][e] = x[i + u64(e)];
					}
				}
#pragma unroll
				for (int e = 0; e < 4; e++) {
#pragma unroll
					for (int c = 0; c < QMV_COLS; c++) {
						const float q = float((cw[c].v[v] >> (BITS * (e0 + e))) & ((1u << BITS) - 1u));
						const float wv = s[c] * q + b[c];
#pragma unroll
						for (int r = 0; r < R; r++) acc[r][c] = cu_fma(xs[r][e], wv, acc[r][c]);
					}
				}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < QMV_COLS; c++) {
			const float sum = warp_sum(acc[r][c]);
			if (lane == 0) part[warp][r][c] = sum;
		}
	}
	sync_threads();
	if (t < R * QMV_COLS) {
		const int r = t / QMV_COLS, c = t % QMV_COLS;
		if (col0 + c < n) out[u64(r0 + r) * u64(n) + u64(col0 + c)] = ((part[0][r][c] + part[1][r][c]) + part[2][r][c]) + part[3][r][c];
	}
	sync_threads(); // part is written again by the next rows
}
template <int BITS, class S, bool VEC>
DEVICE ALWAYS_INLINE void qmatvec(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs,
                    float part[4][4][QMV_COLS]) {
	if constexpr (!VEC) { // a row at a time: slower, and a quarter of the code
		for (int r0 = 0; r0 < m; r0++) qmatvec_rows<BITS, S, false, 1>(out, x, w, scales, biases, r0, k, n, gs, part);
	} else {
		for (int r0 = 0; r0 < m; r0 += 4) {
			switch (m - r0) {
			case 1: qmatvec_rows<BITS, S, VEC, 1>(out, x, w, scales, biases, r0, k, n, gs, part); break;
			case 2: qmatvec_rows<BITS, S, VEC, 2>(out, x, w, scales, biases, r0, k, n, gs, part); break;
			case 3: qmatvec_rows<BITS, S, VEC, 3>(out, x, w, scales, biases, r0, k, n, gs, part); break;
			default: qmatvec_rows<BITS, S, VEC, 4>(out, x, w, scales, biases, r0, k, n, gs, part); break;
			}
		}
	}
}
template <int BITS, class S>
DEVICE ALWAYS_INLINE void qmatvec(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs) {
	SHARED float part[4][4][QMV_COLS]; // [warp][row][column] sums of each warp
	if ((reinterpret_cast<u64>(x) & 15u) == 0) {
		qmatvec<BITS, S, true>(out, x, w, scales, biases, m, k, n, gs, part);
	} else {
		qmatvec<BITS, S, false>(out, x, w, scales, biases, m, k, n, gs, part);
	}
}

#define QMATVEC(BITS, S, NAME) \
	KERNEL void qmatvec_##BITS##_##NAME(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs) { \
		qmatvec<BITS>(out, x, w, scales, biases, m, k, n, gs); \
	}
QMATVEC(4, float, f32)
QMATVEC(4, f16_t, f16)
QMATVEC(4, bf16_t, bf16)
QMATVEC(8, float, f32)
QMATVEC(8, f16_t, f16)
QMATVEC(8, bf16_t, bf16)

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
