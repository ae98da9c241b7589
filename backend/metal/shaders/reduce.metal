// reduce.metal: row reductions for the heads: LogSoftmax, Argmax and TopK
// (the K largest values of each row, largest first; ties go to the lowest
// index, as in the CPU backend). One threadgroup per row.
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

instantiate_kernel("reduce_logsoftmax_f32", reduce_logsoftmax, float)
instantiate_kernel("reduce_argmax_f32", reduce_argmax, float)
instantiate_kernel("reduce_topk_f32", reduce_topk, float)
