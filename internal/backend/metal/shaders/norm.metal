// norm.metal: RMSNorm of each row, out = x / sqrt(mean(x²) + eps) * w.
// Grid: (M); threadgroup: ROW_THREADS (a multiple of 32); threadgroup(0): 48 floats.
#include "common.h"

template <typename T>
kernel void rmsnorm_row(
		constant RMSNormArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device const float *w [[buffer(2)]],
		device T *out [[buffer(3)]],
		threadgroup float *shmem [[threadgroup(0)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint3 ntptg [[threads_per_threadgroup]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint nsg [[simdgroups_per_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const ulong base = ulong(tgpig.x) * ulong(args.D);
	float ss = 0.0f;
	for (int i = int(tiitg); i < args.D; i += int(ntptg.x)) {
		const float v = float(x[base + ulong(i)]);
		ss += v * v;
	}
	ss = tg_sum(ss, shmem, sgitg, lane, nsg);
	const float scale = 1.0f / sqrt(ss / float(args.D) + args.eps);
	for (int i = int(tiitg); i < args.D; i += int(ntptg.x)) {
		out[base + ulong(i)] = T(float(x[base + ulong(i)]) * scale * w[i]);
	}
}

instantiate_kernel("norm_rms_f32", rmsnorm_row, float)
