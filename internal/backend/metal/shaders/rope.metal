// rope.metal: rotary position embeddings with a position per row (tree
// tokens sit at prefix length + depth). The first 2·P dims of each head are
// rotated by pos·inv_freq[j]; NeoX pairs (j, j+P) as HF checkpoints do,
// otherwise adjacent pairs (2j, 2j+1) as llama.cpp's permuted weights do.
// One thread per output element. Grid: (ceil(M·H·D/256)); threadgroup: 256.
#include "common.h"

template <bool NeoX>
kernel void rope(
		constant RoPEArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const int *pos [[buffer(2)]],
		constant float *inv_freq [[buffer(3)]],
		device float *out [[buffer(4)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint total = uint(args.M) * uint(args.H) * uint(args.D);
	const uint idx = tpig.x;
	if (idx >= total) {
		return;
	}
	const int i = int(idx % uint(args.D));
	if (i >= 2 * args.P) {
		out[idx] = x[idx];
		return;
	}
	const uint m = idx / (uint(args.D) * uint(args.H));
	int j, i0, i1;
	bool first;
	if (NeoX) {
		j = i < args.P ? i : i - args.P;
		i0 = j;
		i1 = j + args.P;
		first = i < args.P;
	} else {
		j = i / 2;
		i0 = 2 * j;
		i1 = 2 * j + 1;
		first = i % 2 == 0;
	}
	const uint base = idx - uint(i);
	const float a = x[base + uint(i0)];
	const float b = x[base + uint(i1)];
	// The angle as hi+lo (lo is the rounding error of the product), so that
	// large positions lose no accuracy: sin(hi+lo) ≈ sin(hi) + lo·cos(hi).
	const float p = float(pos[m]);
	const float f = inv_freq[j];
	const float hi = p * f;
	const float lo = fma(p, f, -hi);
	const float s0 = sin(hi);
	const float c0 = cos(hi);
	const float s = s0 + lo * c0;
	const float c = c0 - lo * s0;
	out[idx] = first ? a * c - b * s : a * s + b * c;
}

instantiate_kernel("rope_neox_f32", rope, true)
instantiate_kernel("rope_adjacent_f32", rope, false)
