// drafter.cu: the draft head's recurrent step in one launch (graph's
// RNNStepOp), out[m,n] = SiLU((e[m,k]·w[n,k]ᵀ + s[m,k]·u[n,k]ᵀ) + b[n]) for
// f32/f16/bf16 weights (w and u of one dtype), in place of two matvecs, two
// adds and a SiLU. It has matvec.cu's layout and reduction order: a warp
// computes one column for every row, lane l adds over k = l, l+32, ... and
// the warp's butterfly adds the lanes, the two products apart; so a row's
// result depends on k alone (never on m), and equals the unfused launches
// (matvec, add, add, silu) bit for bit. Rows go 4 at a time so that one load
// of w and u serves 4 rows. Grid: (ceil(n/4)); block: 128 threads (4 warps).
#include "prelude.cuh"

// silu as elementwise.cu computes it.
DEVICE float silu(float x) { return x * (1.0f / (1.0f + cu_exp(-x))); }

template <class T>
DEVICE void rnn_step(float *out, const float *e, const float *s, const T *w, const T *u, const float *b, int m, int k, int n) {
	const int lane = int(threadIdx.x) & 31;
	const int col = int(blockIdx.x) * 4 + (int(threadIdx.x) >> 5);
	if (col >= n) return; // the whole warp leaves together
	const u64 wrow = u64(col) * u64(k);
	const float bias = b[col];
	for (int r0 = 0; r0 < m; r0 += 4) {
		float accw[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		float accu[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		const int rows = m - r0 < 4 ? m - r0 : 4;
		for (int i = lane; i < k; i += 32) {
			const float wv = load_w(w, wrow + u64(i)), uv = load_w(u, wrow + u64(i));
			for (int r = 0; r < 4; r++) {
				if (r < rows) {
					const u64 xi = u64(r0 + r) * u64(k) + u64(i);
					accw[r] = cu_fma(e[xi], wv, accw[r]);
					accu[r] = cu_fma(s[xi], uv, accu[r]);
				}
			}
		}
		for (int r = 0; r < 4; r++) {
			const float v = (warp_sum(accw[r]) + warp_sum(accu[r])) + bias;
			if (lane == 0 && r < rows) out[u64(r0 + r) * u64(n) + u64(col)] = silu(v);
		}
	}
}

KERNEL void rnn_step_f32(float *out, const float *e, const float *s, const float *w, const float *u, const float *b, int m, int k, int n) {
	rnn_step(out, e, s, w, u, b, m, k, n);
}
KERNEL void rnn_step_f16(float *out, const float *e, const float *s, const f16_t *w, const f16_t *u, const float *b, int m, int k, int n) {
	rnn_step(out, e, s, w, u, b, m, k, n);
}
KERNEL void rnn_step_bf16(float *out, const float *e, const float *s, const bf16_t *w, const bf16_t *u, const float *b, int m, int k, int n) {
	rnn_step(out, e, s, w, u, b, m, k, n);
}
