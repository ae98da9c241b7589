// norm.cu: RMS normalisation of each row, out = x / sqrt(mean(x²) + eps) · w,
// computed as x·scale·w. The sum of squares is reduced in an order that
// depends on d only (block_sum), so a row's result does not depend on the
// batch. Grid: (m); block: 1024 threads.
#include "prelude.cuh"

KERNEL void rms_norm_f32(float *out, const float *x, const float *w, int m, int d, float eps) {
	SHARED float scratch[32];
	const u64 row = u64(blockIdx.x) * u64(d);
	float ss = 0.0f;
	for (int k = int(threadIdx.x); k < d; k += int(blockDim.x)) {
		const float v = x[row + u64(k)];
		ss = cu_fma(v, v, ss);
	}
	ss = block_sum(ss, scratch);
	const float scale = 1.0f / cu_sqrt(ss / float(d) + eps);
	for (int k = int(threadIdx.x); k < d; k += int(blockDim.x)) {
		out[row + u64(k)] = x[row + u64(k)] * scale * w[k];
	}
}
