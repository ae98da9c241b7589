// quant.cu: matvec with a 4- or 8-bit affine-quantized weight (MLX layout:
// codes packed low bits first in u32 words, a scale s and bias b per group
// of gs elements of a row, value = float(s·q) + b), for f32/f16/bf16 scales.
// As in matvec.cu, a warp computes one column for every row and lane l
// takes 16-byte chunks l, l+32, ..., so a row's result depends on k alone.
// Grid: (ceil(n/4)); block: 128 threads (4 warps).
// dequant_<bits>_<scales>: the whole matrix as f32 (graph's DequantizeOp),
// out[n,k] = float(s·q) + b, one thread per element.
// Grid: (ceil(n·k/256)); block: 256.
#include "prelude.cuh"

// Each lane reads 16 bytes (4 words) of codes at a time: a row of k codes
// is k·BITS/32 words, a multiple of 4 since k is a multiple of the group
// size (32 or more), and the backend passes w 16-byte aligned. A chunk
// holds 32 (4-bit) or 16 (8-bit) codes, never more than a group, so its
// scale and bias are read once. Lane l takes chunks l, l+32, ...: the order
// of the sums depends on k alone.
struct __attribute__((aligned(16))) q4words {
	unsigned w[4];
};
template <int BITS, class S>
DEVICE void qmatvec(float *out, const float *x, const unsigned *w, const S *scales, const S *biases, int m, int k, int n, int gs) {
	const int per = 32 / BITS;
	const int lane = int(threadIdx.x) & 31;
	const int col = int(blockIdx.x) * 4 + (int(threadIdx.x) >> 5);
	if (col >= n) return;
	const int chunks = k / (4 * per);
	const q4words *wrow = reinterpret_cast<const q4words *>(w) + u64(col) * u64(chunks);
	const u64 grow = u64(col) * u64(k / gs);
	for (int r0 = 0; r0 < m; r0 += 4) {
		float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		const int rows = m - r0 < 4 ? m - r0 : 4;
		for (int j = lane; j < chunks; j += 32) {
			const q4words c = wrow[j];
			const u64 g = grow + u64(j * 4 * per / gs);
			const float s = load_w(scales, g), b = load_w(biases, g);
#pragma unroll
			for (int v = 0; v < 4; v++) {
#pragma unroll
				for (int e = 0; e < per; e++) {
					const float q = float((c.w[v] >> (BITS * e)) & ((1u << BITS) - 1u));
					const float wv = s * q + b;
					const u64 kk = (u64(j) * 4u + u64(v)) * u64(per) + u64(e);
					for (int r = 0; r < 4; r++) {
						if (r < rows) acc[r] = cu_fma(x[u64(r0 + r) * u64(k) + kk], wv, acc[r]);
					}
				}
			}
		}
		for (int r = 0; r < 4; r++) {
			const float sum = warp_sum(acc[r]);
			if (lane == 0 && r < rows) out[u64(r0 + r) * u64(n) + u64(col)] = sum;
		}
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
