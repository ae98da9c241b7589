// rope.metal: rotary position embeddings with a position per row (tree
// tokens sit at prefix length + depth). The first 2·P dims of each head are
// rotated by pos·inv_freq[j] (rope_at, common.h).
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
	out[idx] = rope_at<NeoX>(x + (idx - uint(i)), i, args.P, float(pos[m]), inv_freq);
}

instantiate_kernel("rope_neox_f32", rope, true)
instantiate_kernel("rope_adjacent_f32", rope, false)
