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
struct __attribute__((aligned(16))) q4words {
	unsigned w[4];
};
struct __attribute__((aligned(16))) qx4 {
	float v[4];
};
template <int BITS, class S>
DEVICE void qmatvec(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs) {
	constexpr int per = 32 / BITS;
	SHARED float part[4][4][QMV_COLS]; // [warp][row][column] sums of each warp
	const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
	const int col0 = int(blockIdx.x) * QMV_COLS;
	const int chunks = k / (4 * per);
	const bool vec = (reinterpret_cast<u64>(x) & 15u) == 0;
	const q4words *wcol = reinterpret_cast<const q4words *>(w) + u64(col0) * u64(chunks);
	const u64 groups = u64(k / gs);
	for (int r0 = 0; r0 < m; r0 += 4) {
		const int rows = m - r0 < 4 ? m - r0 : 4;
		float acc[4][QMV_COLS];
#pragma unroll
		for (int r = 0; r < 4; r++) {
#pragma unroll
			for (int c = 0; c < QMV_COLS; c++) acc[r][c] = 0.0f;
		}
		for (int j = t; j < chunks; j += 128) {
			q4words cw[QMV_COLS];
			float s[QMV_COLS], b[QMV_COLS];
			const u64 g = u64(j * 4 * per / gs);
#pragma unroll
			for (int c = 0; c < QMV_COLS; c++) {
				if (col0 + c < n) {
					cw[c] = wcol[u64(c) * u64(chunks) + u64(j)];
					s[c] = load_w(scales, u64(col0 + c) * groups + g);
					b[c] = load_w(biases, u64(col0 + c) * groups + g);
				} else {
					cw[c] = q4words{{0u, 0u, 0u, 0u}};
					s[c] = 0.0f;
					b[c] = 0.0f;
				}
			}
#pragma unroll
			for (int v = 0; v < 4; v++) {
#pragma unroll
				for (int e0 = 0; e0 < per; e0 += 4) {
					const u64 kk = (u64(j) * 4u + u64(v)) * u64(per) + u64(e0);
					float xs[4][4];
#pragma unroll
					for (int r = 0; r < 4; r++) {
						if (r < rows) {
							const u64 i = u64(r0 + r) * u64(k) + kk;
							if (vec) {
								const qx4 a = *reinterpret_cast<const qx4 *>(x + i);
#pragma unroll
								for (int e = 0; e < 4; e++) xs[r][e] = a.v[e];
							} else {
#pragma unroll
								for (int e = 0; e < 4; e++) xs[r][e] = x[i + u64(e)];
							}
						}
					}
#pragma unroll
					for (int e = 0; e < 4; e++) {
#pragma unroll
						for (int c = 0; c < QMV_COLS; c++) {
							const float q = float((cw[c].w[v] >> (BITS * (e0 + e))) & ((1u << BITS) - 1u));
							const float wv = s[c] * q + b[c];
#pragma unroll
							for (int r = 0; r < 4; r++) {
								if (r < rows) acc[r][c] = cu_fma(xs[r][e], wv, acc[r][c]);
							}
						}
					}
				}
			}
		}
#pragma unroll
		for (int r = 0; r < 4; r++) {
			if (r >= rows) break;
#pragma unroll
			for (int c = 0; c < QMV_COLS; c++) {
				const float sum = warp_sum(acc[r][c]);
				if (lane == 0) part[warp][r][c] = sum;
			}
		}
		sync_threads();
		if (t < 4 * QMV_COLS) {
			const int r = t / QMV_COLS, c = t % QMV_COLS;
			if (r < rows && col0 + c < n) {
				out[u64(r0 + r) * u64(n) + u64(col0 + c)] = ((part[0][r][c] + part[1][r][c]) + part[2][r][c]) + part[3][r][c];
			}
		}
		sync_threads(); // part is written again by the next 4 rows
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
