// reduce.metal: row reductions for the heads: LogSoftmax, Argmax and TopK
// (the K largest values of each row, largest first; ties go to the lowest
// index, as in the CPU backend), and the draft head's beam search:
// WarpLogSoftmax (one threadgroup per row) and BeamTop (one threadgroup).
// Grid: (M); threadgroup: ROW_THREADS; threadgroup(0): 80 floats.
#include "common.h"

template <typename T>
kernel void reduce_logsoftmax(
		constant RowArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device T *out [[buffer(2)]],
		threadgroup float *shmem [[threadgroup(0)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint3 ntptg [[threads_per_threadgroup]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint nsg [[simdgroups_per_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const ulong base = ulong(tgpig.x) * ulong(args.V);
	float mx = -FLT_MAX;
	for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
		mx = max(mx, float(x[base + ulong(i)]));
	}
	mx = tg_max(mx, shmem, sgitg, lane, nsg);
	float s = 0.0f;
	for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
		s += exp(float(x[base + ulong(i)]) - mx);
	}
	s = tg_sum(s, shmem, sgitg, lane, nsg);
	const float lse = mx + log(s);
	for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
		out[base + ulong(i)] = T(float(x[base + ulong(i)]) - lse);
	}
}

#define NO_INDEX 0xffffffffu

// not_finite reports NaN or ±Inf from the bits (all exponent bits set),
// which fast math cannot assume away as it may isnan and isfinite.
inline bool not_finite(float v) { return (as_type<uint>(v) & 0x7f800000u) == 0x7f800000u; }

// better reports whether (v, i) comes before (bv, bi): a larger value, or an
// equal value at a lower index. NO_INDEX marks "nothing yet".
inline bool better(float v, uint i, float bv, uint bi) {
	if (i == NO_INDEX) {
		return false;
	}
	if (bi == NO_INDEX) {
		return true;
	}
	return v > bv || (v == bv && i < bi);
}

// tg_best returns, in *bv and *bi of every thread, the best (value, index)
// pair of the threadgroup. scratch holds 80 floats.
inline void tg_best(thread float &v, thread uint &i, threadgroup float *scratch, uint sgitg, uint lane, uint nsg) {
	for (ushort delta = 16; delta > 0; delta /= 2) {
		const float ov = simd_shuffle_down(v, delta);
		const uint oi = simd_shuffle_down(i, delta);
		if (lane + delta < 32 && better(ov, oi, v, i)) {
			v = ov;
			i = oi;
		}
	}
	threadgroup uint *si = (threadgroup uint *)(scratch + 32);
	if (lane == 0) {
		scratch[sgitg] = v;
		si[sgitg] = i;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (sgitg == 0) {
		float bv = lane < nsg ? scratch[lane] : 0.0f;
		uint bi = lane < nsg ? si[lane] : NO_INDEX;
		for (ushort delta = 16; delta > 0; delta /= 2) {
			const float ov = simd_shuffle_down(bv, delta);
			const uint oi = simd_shuffle_down(bi, delta);
			if (lane + delta < 32 && better(ov, oi, bv, bi)) {
				bv = ov;
				bi = oi;
			}
		}
		if (lane == 0) {
			scratch[64] = bv;
			si[33] = bi;
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	v = scratch[64];
	i = si[33];
	threadgroup_barrier(mem_flags::mem_threadgroup);
}

template <typename T>
kernel void reduce_argmax(
		constant RowArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device int *out [[buffer(2)]],
		threadgroup float *shmem [[threadgroup(0)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint3 ntptg [[threads_per_threadgroup]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint nsg [[simdgroups_per_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const ulong base = ulong(tgpig.x) * ulong(args.V);
	float bv = 0.0f;
	uint bi = NO_INDEX;
	for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
		const float v = float(x[base + ulong(i)]);
		if (better(v, uint(i), bv, bi)) {
			bv = v;
			bi = uint(i);
		}
	}
	tg_best(bv, bi, shmem, sgitg, lane, nsg);
	if (tiitg == 0) {
		out[tgpig.x] = int(bi == NO_INDEX ? 0u : bi);
	}
}

// K rounds of a threadgroup argmax, each over the values that come after the
// previous winner in (value descending, index ascending) order.
template <typename T>
kernel void reduce_topk(
		constant RowArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device int *out [[buffer(2)]],
		threadgroup float *shmem [[threadgroup(0)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint3 ntptg [[threads_per_threadgroup]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint nsg [[simdgroups_per_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const ulong base = ulong(tgpig.x) * ulong(args.V);
	float pv = 0.0f;
	uint pi = NO_INDEX;
	for (int r = 0; r < args.K; r++) {
		float bv = 0.0f;
		uint bi = NO_INDEX;
		for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
			const float v = float(x[base + ulong(i)]);
			if (pi != NO_INDEX && !better(pv, pi, v, uint(i))) {
				continue; // taken in an earlier round
			}
			if (better(v, uint(i), bv, bi)) {
				bv = v;
				bi = uint(i);
			}
		}
		tg_best(bv, bi, shmem, sgitg, lane, nsg);
		if (tiitg == 0) {
			out[ulong(tgpig.x) * ulong(args.K) + ulong(r)] = int(bi == NO_INDEX ? 0u : bi);
		}
		pv = bv;
		pi = bi;
	}
}

// The ReDrafter head's top-K warp and log-softmax of a row (graph's
// WarpLogSoftmaxOp): y = x - max; y below the K-th largest (counting
// repeats) becomes args.masked; minus log Σ exp(y) over the rest. The K-th
// largest of x minus the maximum is that of y, since rounding is monotonic,
// so the mask decisions are the CPU's exactly. A row with NaN or ±Inf comes
// out all NaN, which BeamTop passes on to the scores the host checks.
template <typename T>
kernel void reduce_warp(
		constant DraftArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device float *out [[buffer(2)]],
		threadgroup float *shmem [[threadgroup(0)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint3 ntptg [[threads_per_threadgroup]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint nsg [[simdgroups_per_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const ulong base = ulong(tgpig.x) * ulong(args.V);
	device const T *xr = x + base;
	float mx = -FLT_MAX;
	float bad = 0.0f;
	for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
		const float v = float(xr[i]);
		if (not_finite(v)) {
			bad = 1.0f;
		}
		mx = max(mx, v);
	}
	bad = tg_max(bad, shmem, sgitg, lane, nsg);
	mx = tg_max(mx, shmem, sgitg, lane, nsg);
	if (bad > 0.0f) {
		for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
			out[base + ulong(i)] = as_type<float>(0x7fc00000u); // NaN
		}
		return;
	}
	float kth = -INFINITY;
	if (args.V > args.K) {
		// K rounds of a threadgroup argmax, each over the values after the
		// previous winner in (value descending, index ascending) order: the
		// K-th winner's value is the K-th largest, counting repeats.
		float pv = 0.0f;
		uint pi = NO_INDEX;
		for (int r = 0; r < args.K; r++) {
			float bv = 0.0f;
			uint bi = NO_INDEX;
			for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
				const float v = float(xr[i]);
				if (pi != NO_INDEX && !better(pv, pi, v, uint(i))) {
					continue; // taken in an earlier round
				}
				if (better(v, uint(i), bv, bi)) {
					bv = v;
					bi = uint(i);
				}
			}
			tg_best(bv, bi, shmem, sgitg, lane, nsg);
			pv = bv;
			pi = bi;
		}
		kth = pv - mx;
	}
	float s = 0.0f;
	for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
		const float y = float(xr[i]) - mx;
		if (!(y < kth)) {
			s += exp(y);
		}
	}
	s = tg_sum(s, shmem, sgitg, lane, nsg);
	const float lse = log(s);
	for (int i = int(tiitg); i < args.V; i += int(ntptg.x)) {
		const float y = float(xr[i]) - mx;
		out[base + ulong(i)] = (y < kth ? args.masked : y) - lse;
	}
}

// One selection of the beam search (graph's BeamTopOp): the K best (beam b,
// token t) by score[b] + lp[row(b), t], ties to the lower flat index b·V+t,
// in one threadgroup. beams and out are [3, n]: the row of lp, the token,
// the score's float bits.
template <typename T>
kernel void reduce_beamtop(
		constant DraftArgs &args [[buffer(0)]],
		device const int *beams [[buffer(1)]],
		device const T *lp [[buffer(2)]],
		device int *out [[buffer(3)]],
		threadgroup float *shmem [[threadgroup(0)]],
		uint3 ntptg [[threads_per_threadgroup]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint nsg [[simdgroups_per_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const int V = args.V;
	const int n = args.beams * V;
	device const int *score = beams + 2 * args.beams;
	const bool one_row = args.rows == 1;
	float nan = 0.0f;
	for (int i = int(tiitg); i < args.rows * V; i += int(ntptg.x)) {
		if (not_finite(float(lp[i]))) {
			nan = 1.0f;
		}
	}
	nan = tg_max(nan, shmem, sgitg, lane, nsg);
	float pv = 0.0f;
	uint pi = NO_INDEX;
	for (int r = 0; r < args.K; r++) {
		float bv = 0.0f;
		uint bi = NO_INDEX;
		for (int i = int(tiitg); i < n; i += int(ntptg.x)) {
			const int b = i / V;
			const int row = one_row ? 0 : b;
			const float v = as_type<float>(score[b]) + float(lp[ulong(row) * ulong(V) + ulong(i - b * V)]);
			if (pi != NO_INDEX && !better(pv, pi, v, uint(i))) {
				continue; // taken in an earlier round
			}
			if (better(v, uint(i), bv, bi)) {
				bv = v;
				bi = uint(i);
			}
		}
		tg_best(bv, bi, shmem, sgitg, lane, nsg);
		if (tiitg == 0) {
			const int f = bi == NO_INDEX ? 0 : int(bi);
			const int b = f / V;
			out[r] = one_row ? 0 : b;
			out[args.K + r] = f - b * V;
			out[2 * args.K + r] = nan > 0.0f ? int(0x7fc00000u) : as_type<int>(bv); // NaN or the score
		}
		pv = bv;
		pi = bi;
	}
}

instantiate_kernel("reduce_logsoftmax_f32", reduce_logsoftmax, float)
instantiate_kernel("reduce_argmax_f32", reduce_argmax, float)
instantiate_kernel("reduce_topk_f32", reduce_topk, float)
instantiate_kernel("reduce_warp_f32", reduce_warp, float)
instantiate_kernel("reduce_beamtop_f32", reduce_beamtop, float)
