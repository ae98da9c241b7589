// matvec.cu: out = x·wᵀ for f32/f16/bf16 weights, x [m,k] f32, w [n,k],
// out [m,n] f32, shaped for decoding and verification (small m, read w at
// memory bandwidth). Each warp computes one column of out for every row:
// lane l adds x·w over k = l, l+32, ... and the warp's butterfly adds the
// lanes, so a row's result depends on k alone, never on m or the other rows
// (greedy ReDrafter stays bit-exact). Rows go 4 at a time so that one load
// of w serves 4 rows. Grid: (ceil(n/4)); block: 128 threads (4 warps).
#include "prelude.cuh"

template <class T> DEVICE void matvec(float *out, const float *x, const T *w, int m, int k, int n) {
	const int lane = int(threadIdx.x) & 31;
	const int col = int(blockIdx.x) * 4 + (int(threadIdx.x) >> 5);
	if (col >= n) return;
	const u64 wrow = u64(col) * u64(k);
	for (int r0 = 0; r0 < m; r0 += 4) {
		float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		const int rows = m - r0 < 4 ? m - r0 : 4;
		for (int i = lane; i < k; i += 32) {
			const float wv = load_w(w, wrow + u64(i));
			for (int r = 0; r < 4; r++) {
				if (r < rows) acc[r] = cu_fma(x[u64(r0 + r) * u64(k) + u64(i)], wv, acc[r]);
			}
		}
		for (int r = 0; r < 4; r++) {
			const float s = warp_sum(acc[r]);
			if (lane == 0 && r < rows) out[u64(r0 + r) * u64(n) + u64(col)] = s;
		}
	}
}

// matvec8: the same for f16/bf16 weights whose rows are whole 16-byte
// words (k a multiple of 8, w 16-byte aligned): lane l reads 8 weights at
// a time, words l, l+32, ..., so a warp moves 512 contiguous bytes per load
// instead of 64 and decoding can approach the memory's bandwidth. The
// order of the sums still depends on k alone (the backend picks this
// kernel from k and w's address, never from m).
struct __attribute__((aligned(16))) w8 {
	unsigned u[4]; // 8 weights, two per word, the lower index in the low half
};
template <bool BF16> DEVICE float w8_at(const w8 &v, int e) {
	const unsigned short h = (unsigned short)((v.u[e >> 1] >> (16 * (e & 1))) & 0xffffu);
	return BF16 ? bits_f32(unsigned(h) << 16) : bits_f16(h);
}
template <bool BF16> DEVICE void matvec8(float *out, const float *x, const void *w, int m, int k, int n) {
	const int lane = int(threadIdx.x) & 31;
	const int col = int(blockIdx.x) * 4 + (int(threadIdx.x) >> 5);
	if (col >= n) return;
	const int words = k / 8;
	const w8 *wrow = reinterpret_cast<const w8 *>(w) + u64(col) * u64(words);
	for (int r0 = 0; r0 < m; r0 += 4) {
		float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		const int rows = m - r0 < 4 ? m - r0 : 4;
		for (int j = lane; j < words; j += 32) {
			const w8 v = wrow[j];
#pragma unroll
			for (int e = 0; e < 8; e++) {
				const float wv = w8_at<BF16>(v, e);
				const u64 kk = u64(j) * 8u + u64(e);
				for (int r = 0; r < 4; r++) {
					if (r < rows) acc[r] = cu_fma(x[u64(r0 + r) * u64(k) + kk], wv, acc[r]);
				}
			}
		}
		for (int r = 0; r < 4; r++) {
			const float s = warp_sum(acc[r]);
			if (lane == 0 && r < rows) out[u64(r0 + r) * u64(n) + u64(col)] = s;
		}
	}
}

KERNEL void matvec_f32(float *out, const float *x, const float *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec8_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matvec8<false>(out, x, w, m, k, n); }
KERNEL void matvec8_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matvec8<true>(out, x, w, m, k, n); }
