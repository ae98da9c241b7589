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

// rnn_step8_<f16|bf16>: the same step for 16-bit w and u whose rows are
// whole 16-byte words (k a multiple of 8, both 16-byte aligned), in
// matvec8's layout: a warp per column with 2-byte loads left rnn_step at
// 0.4 TB/s on an H200 (39 µs a draft step for the 2048-wide head, 2026-11-28),
// where the head's other products ran near the memory's speed. A block of
// 128 threads takes RNN8_COLS columns; thread t reads 16-byte words t,
// t+128, ... of each column's w and u rows (2·RNN8_COLS loads in flight),
// and each element of e and s, read 16 bytes at a time, serves every
// column. A (row, column)'s two sums each run over thread t's words in
// order, then the warp's butterfly, then the 4 warps in order: matvec8's
// order, so a row's result depends on k alone (the backend picks this
// kernel from k and the weights' addresses, never from m) and equals
// matvec8's two products, the two adds and silu bit for bit. Rows go up to
// 4 at a time where e and s are 16-byte aligned, else one.
// Grid: (ceil(n/RNN8_COLS)); block: 128 threads.
#define RNN8_COLS 4
template <bool BF16, bool VEC, int R>
DEVICE ALWAYS_INLINE void rnn_step8_rows(float *out, const float *e, const float *s, const unsigned *w, const unsigned *u, const float *b, int r0, int k,
                                         int n, float part[4][2][4][RNN8_COLS]) {
	const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
	const int col0 = int(blockIdx.x) * RNN8_COLS;
	const u64 words = u64(k / 8);
	// Columns past n read column n-1 (every load unconditional); their
	// sums are never written.
	u64 row[RNN8_COLS];
#pragma unroll
	for (int c = 0; c < RNN8_COLS; c++) row[c] = u64(col0 + c < n ? col0 + c : n - 1) * words;
	float aw[R][RNN8_COLS], au[R][RNN8_COLS];
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < RNN8_COLS; c++) aw[r][c] = au[r][c] = 0.0f;
	}
	for (u64 j = u64(t); j < words; j += 128u) {
		u32x4 vw[RNN8_COLS], vu[RNN8_COLS];
#pragma unroll
		for (int c = 0; c < RNN8_COLS; c++) {
			vw[c] = ld_v4_u32(w + (row[c] + j) * 4u);
			vu[c] = ld_v4_u32(u + (row[c] + j) * 4u);
		}
#pragma unroll
		for (int r = 0; r < R; r++) {
			float es[8], ss[8];
			x8<VEC>(es, e, u64(r0 + r) * u64(k) + j * 8u);
			x8<VEC>(ss, s, u64(r0 + r) * u64(k) + j * 8u);
#pragma unroll
			for (int q = 0; q < 8; q++) {
#pragma unroll
				for (int c = 0; c < RNN8_COLS; c++) {
					aw[r][c] = cu_fma(es[q], w8_at<BF16>(vw[c], q), aw[r][c]);
					au[r][c] = cu_fma(ss[q], w8_at<BF16>(vu[c], q), au[r][c]);
				}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < RNN8_COLS; c++) {
			const float sw = warp_sum(aw[r][c]), su = warp_sum(au[r][c]);
			if (lane == 0) {
				part[warp][0][r][c] = sw;
				part[warp][1][r][c] = su;
			}
		}
	}
	sync_threads();
	if (t < R * RNN8_COLS) {
		const int r = t / RNN8_COLS, c = t % RNN8_COLS;
		const float sw = ((part[0][0][r][c] + part[1][0][r][c]) + part[2][0][r][c]) + part[3][0][r][c];
		const float su = ((part[0][1][r][c] + part[1][1][r][c]) + part[2][1][r][c]) + part[3][1][r][c];
		if (col0 + c < n) out[u64(r0 + r) * u64(n) + u64(col0 + c)] = silu((sw + su) + b[col0 + c]);
	}
	sync_threads(); // part is written again by the next rows
}
// rnn_step8 computes m rows, up to MAXR (1 or 4) at a time where e and s
// are 16-byte aligned, else one. A kernel holds the registers of its
// largest path (ptxas, sm_90: 4 rows 182, 2 blocks an SM), so the draft
// step of one beam has its own kernel, rnn_step8x1_*, computing each row
// with the same code (same bits).
template <bool BF16, int MAXR>
DEVICE void rnn_step8(float *out, const float *e, const float *s, const unsigned *w, const unsigned *u, const float *b, int m, int k, int n) {
	SHARED float part[4][2][4][RNN8_COLS]; // [warp][w or u][row][column] sums of each warp
	if (MAXR == 1 || ((reinterpret_cast<u64>(e) | reinterpret_cast<u64>(s)) & 15u) != 0) {
		if (((reinterpret_cast<u64>(e) | reinterpret_cast<u64>(s)) & 15u) == 0) {
			for (int r0 = 0; r0 < m; r0++) rnn_step8_rows<BF16, true, 1>(out, e, s, w, u, b, r0, k, n, part);
		} else {
			for (int r0 = 0; r0 < m; r0++) rnn_step8_rows<BF16, false, 1>(out, e, s, w, u, b, r0, k, n, part);
		}
		return;
	}
	for (int r0 = 0; r0 < m; r0 += 4) {
		switch (m - r0) {
		case 1: rnn_step8_rows<BF16, true, 1>(out, e, s, w, u, b, r0, k, n, part); break;
		case 2: rnn_step8_rows<BF16, true, 2>(out, e, s, w, u, b, r0, k, n, part); break;
		case 3: rnn_step8_rows<BF16, true, 3>(out, e, s, w, u, b, r0, k, n, part); break;
		default: rnn_step8_rows<BF16, true, 4>(out, e, s, w, u, b, r0, k, n, part); break;
		}
	}
}
#define RNN_STEP8(NAME, BF16) \
	KERNEL void rnn_step8_##NAME(float *out, const float *e, const float *s, const unsigned *w, const unsigned *u, const float *b, int m, int k, int n) { \
		rnn_step8<BF16, 4>(out, e, s, w, u, b, m, k, n); \
	} \
	KERNEL void rnn_step8x1_##NAME(float *out, const float *e, const float *s, const unsigned *w, const unsigned *u, const float *b, int m, int k, \
	                               int n) { \
		rnn_step8<BF16, 1>(out, e, s, w, u, b, m, k, n); \
	}
RNN_STEP8(f16, false)
RNN_STEP8(bf16, true)
