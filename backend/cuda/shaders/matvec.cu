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

KERNEL void matvec_f32(float *out, const float *x, const float *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
