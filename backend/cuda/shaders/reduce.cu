// reduce.cu: row reductions over the last dimension, one block of 256
// threads per row (grid (m)): log-softmax, argmax and top-k (ties to the
// lowest index). Reduction orders depend on the row length only.
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
