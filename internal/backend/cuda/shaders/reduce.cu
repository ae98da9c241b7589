// reduce.cu: row reductions over the last dimension, one block of 256
// threads per row (grid (m)): log-softmax, argmax, top-k (ties to the
// lowest index) and the ReDrafter head's warp log-softmax; and the beam
// search's selection (beam_top, one block for the whole search). Reduction
// orders depend on the row length only.
#include "prelude.cuh"

KERNEL void log_softmax_f32(float *out, const float *x, int m, int v) {
	SHARED float scratch[32];
	const u64 row = u64(blockIdx.x) * u64(v);
	float mx = -cu_inf();
	for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) mx = cu_fmax(mx, x[row + u64(i)]);
	mx = block_max(mx, scratch);
	float s = 0.0f;
	for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) s += cu_exp(x[row + u64(i)] - mx);
	s = block_sum(s, scratch);
	const float lse = mx + cu_log(s);
	for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) out[row + u64(i)] = x[row + u64(i)] - lse;
}

// better orders candidates: larger value first, then lower index; index -1
// is no candidate.
DEVICE bool better(float a, int ai, float b, int bi) {
	if (bi < 0) return ai >= 0;
	if (ai < 0) return false;
	return a > b || (a == b && ai < bi);
}

// block_best returns the block's best candidate (every thread gets it).
DEVICE int block_best(float val, int idx, float *sval, int *sidx, float *best_val) {
	const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, nwarps = int(blockDim.x) >> 5;
	for (int m = 16; m > 0; m >>= 1) {
		const float ov = shfl_xor(val, m);
		const int oi = shfl_xor(idx, m);
		if (better(ov, oi, val, idx)) {
			val = ov;
			idx = oi;
		}
	}
	sync_threads();
	if (lane == 0) {
		sval[warp] = val;
		sidx[warp] = idx;
	}
	sync_threads();
	float bv = sval[0];
	int bi = sidx[0];
	for (int w = 1; w < nwarps; w++) {
		if (better(sval[w], sidx[w], bv, bi)) {
			bv = sval[w];
			bi = sidx[w];
		}
	}
	*best_val = bv;
	return bi;
}

KERNEL void argmax_f32(int *out, const float *x, int m, int v) {
	SHARED float sval[32];
	SHARED int sidx[32];
	const u64 row = u64(blockIdx.x) * u64(v);
	float val = 0.0f;
	int idx = -1;
	for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) {
		const float e = x[row + u64(i)];
		if (better(e, i, val, idx)) {
			val = e;
			idx = i;
		}
	}
	float bv;
	const int bi = block_best(val, idx, sval, sidx, &bv);
	if (threadIdx.x == 0) out[blockIdx.x] = bi < 0 ? 0 : bi;
}

// top_k_f32: k rounds of argmax, each over the values that come after the
// previous choice in the order (value descending, index ascending).
KERNEL void top_k_f32(int *out, const float *x, int m, int v, int k) {
	SHARED float sval[32];
	SHARED int sidx[32];
	const u64 row = u64(blockIdx.x) * u64(v);
	float pv = cu_inf();
	int pi = -1;
	for (int r = 0; r < k; r++) {
		float val = 0.0f;
		int idx = -1;
		for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) {
			const float e = x[row + u64(i)];
			const bool after = r == 0 || e < pv || (e == pv && i > pi);
			if (after && better(e, i, val, idx)) {
				val = e;
				idx = i;
			}
		}
		pi = block_best(val, idx, sval, sidx, &pv);
		if (threadIdx.x == 0) out[u64(blockIdx.x) * u64(k) + u64(r)] = pi;
	}
}

// block_count adds an integer over the block (exactly); every thread gets
// the total. scratch holds 32 ints.
DEVICE int block_count(int v, int *scratch) {
	const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, nwarps = int(blockDim.x) >> 5;
	for (int m = 16; m > 0; m >>= 1) v += shfl_xor(v, m);
	sync_threads(); // scratch may still be read by a previous call
	if (lane == 0) scratch[warp] = v;
	sync_threads();
	int s = 0;
	for (int w = 0; w < nwarps; w++) s += scratch[w];
	return s;
}

// order_key maps a float to an unsigned key in the same order (-0 just
// below +0); key_float is its inverse.
DEVICE unsigned order_key(float f) {
	const unsigned u = f32_bits(f);
	return u ^ ((u >> 31) != 0u ? 0xffffffffu : 0x80000000u);
}
DEVICE float key_float(unsigned k) { return bits_f32(k ^ ((k >> 31) != 0u ? 0x80000000u : 0xffffffffu)); }

// warp_log_softmax_f32 is the ReDrafter head's top-k warp and log-softmax
// of a row (graph's WarpLogSoftmaxOp): y = x - max; y below the k-th
// largest (counting repeats) becomes masked; minus log Σ exp(y) over the
// rest. The k-th largest x is found exactly by a radix select over the
// values' order keys (32 block-wide counts, whatever k is); the k-th
// largest of x minus the maximum is that of y, since rounding is monotonic,
// so the mask decisions are the CPU's exactly. A row with NaN or ±Inf comes
// out all NaN. x and out [m, v]; grid (m), block 256.
KERNEL void warp_log_softmax_f32(float *out, const float *x, int m, int v, int k, float masked) {
	SHARED float scratch[32];
	SHARED int counts[32];
	const u64 row = u64(blockIdx.x) * u64(v);
	float mx = -cu_inf();
	int bad = 0;
	for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) {
		const float e = x[row + u64(i)];
		if (!cu_isfinite(e)) bad = 1;
		mx = cu_fmax(mx, e);
	}
	if (block_count(bad, counts) > 0) {
		for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) out[row + u64(i)] = cu_nan();
		return; // every thread of the block leaves here
	}
	mx = block_max(mx, scratch);
	float kth = -cu_inf();
	if (v > k) {
		// The largest key t with at least k keys >= t, one bit at a time
		// from the top: the k-th largest key.
		unsigned t = 0u;
		for (int bit = 31; bit >= 0; bit--) {
			const unsigned cand = t | (1u << bit);
			int c = 0;
			for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) c += order_key(x[row + u64(i)]) >= cand ? 1 : 0;
			if (block_count(c, counts) >= k) t = cand;
		}
		kth = key_float(t) - mx;
	}
	float s = 0.0f;
	for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) {
		const float y = x[row + u64(i)] - mx;
		if (!(y < kth)) s += cu_exp(y);
	}
	s = block_sum(s, scratch);
	const float lse = cu_log(s);
	for (int i = int(threadIdx.x); i < v; i += int(blockDim.x)) {
		const float y = x[row + u64(i)] - mx;
		out[row + u64(i)] = (y < kth ? masked : y) - lse;
	}
}

// beam_top_f32 is one selection of the beam search (graph's BeamTopOp): the
// width best (beam b, token t) by score[b] + lp[row(b), t], ties to the
// lower flat index b·v+t: width rounds of a block argmax, each over the
// pairs after the previous choice in (score descending, index ascending)
// order. beams [3, nb] (row 2: the scores' float bits), lp [rows, v] with
// rows = nb (beam b reads row b) or 1 (every beam reads row 0), out [3,
// width]: the row of lp, the token, the new score's float bits (all NaN
// when lp holds NaN or ±Inf). Grid (1), block 256.
KERNEL void beam_top_f32(int *out, const int *beams, const float *lp, int nb, int rows, int v, int width) {
	SHARED float sval[32];
	SHARED int sidx[32];
	SHARED int counts[32];
	const int n = nb * v;
	const bool one_row = rows == 1;
	int bad = 0;
	for (int i = int(threadIdx.x); i < rows * v; i += int(blockDim.x)) {
		if (!cu_isfinite(lp[i])) bad = 1;
	}
	const bool nan = block_count(bad, counts) > 0;
	float pv = cu_inf();
	int pi = -1;
	for (int r = 0; r < width; r++) {
		float val = 0.0f;
		int idx = -1;
		for (int f = int(threadIdx.x); f < n; f += int(blockDim.x)) {
			const int b = f / v;
			const float sc = bits_f32(unsigned(beams[2 * nb + b])) + lp[u64(one_row ? 0 : b) * u64(v) + u64(f - b * v)];
			const bool after = r == 0 || sc < pv || (sc == pv && f > pi);
			if (after && better(sc, f, val, idx)) {
				val = sc;
				idx = f;
			}
		}
		pi = block_best(val, idx, sval, sidx, &pv);
		if (threadIdx.x == 0) {
			const int f = pi < 0 ? 0 : pi;
			const int b = f / v;
			out[r] = one_row ? 0 : b;
			out[width + r] = f - b * v;
			out[2 * width + r] = nan ? int(f32_bits(cu_nan())) : int(f32_bits(pv));
		}
	}
}
