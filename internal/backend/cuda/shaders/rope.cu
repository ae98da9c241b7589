// rope.cu: rotary position embeddings with a position per row (tree tokens
// sit at prefix length + depth). The first 2·p dims of each head are rotated
// by pos·inv_freq[j]; NeoX pairs (j, j+p) as HF checkpoints do, otherwise
// adjacent pairs (2j, 2j+1) as llama.cpp's permuted weights do. x [m,h,d].
// One thread per element. Grid: (ceil(m·h·d/256)); block: 256.
#include "prelude.cuh"

template <bool NEOX> DEVICE void rope(float *out, const float *x, const int *pos, const float *inv_freq, int m, int h, int d, int p) {
	const u64 total = u64(m) * u64(h) * u64(d);
	const u64 idx = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (idx >= total) return;
	const int i = int(idx % u64(d));
	if (i >= 2 * p) {
		out[idx] = x[idx];
		return;
	}
	const u64 row = idx / (u64(d) * u64(h));
	int j, i0, i1;
	bool first;
	if (NEOX) {
		j = i < p ? i : i - p;
		i0 = j;
		i1 = j + p;
		first = i < p;
	} else {
		j = i / 2;
		i0 = 2 * j;
		i1 = 2 * j + 1;
		first = i % 2 == 0;
	}
	const u64 base = idx - u64(i);
	const float a = x[base + u64(i0)], b = x[base + u64(i1)];
	// The angle as hi+lo (lo is the rounding error of the product), so that
	// large positions lose no accuracy: sin(hi+lo) ≈ sin(hi) + lo·cos(hi).
	const float fp = float(pos[row]), f = inv_freq[j];
	const float hi = fp * f, lo = cu_fma(fp, f, -hi);
	float s0, c0;
	cu_sincos(hi, &s0, &c0);
	const float s = s0 + lo * c0, c = c0 - lo * s0;
	out[idx] = first ? a * c - b * s : a * s + b * c;
}

KERNEL void rope_neox_f32(float *out, const float *x, const int *pos, const float *inv_freq, int m, int h, int d, int p) {
	rope<true>(out, x, pos, inv_freq, m, h, d, p);
}
KERNEL void rope_adjacent_f32(float *out, const float *x, const int *pos, const float *inv_freq, int m, int h, int d, int p) {
	rope<false>(out, x, pos, inv_freq, m, h, d, p);
}
