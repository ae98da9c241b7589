// embed.metal: out[i,:] = table[ids[i],:] as f32. An id outside the table
// gives a row of zeros (the CPU backend reports it as an error).
// One thread per output element. Grid: (ceil(N·D/256)); threadgroup: 256.
#include "common.h"

template <typename W>
kernel void embed_rows(
		constant EmbedArgs &args [[buffer(0)]],
		device const W *table [[buffer(1)]],
		device const int *ids [[buffer(2)]],
		device float *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint i = tpig.x;
	if (i >= uint(args.N) * uint(args.D)) {
		return;
	}
	const uint r = i / uint(args.D);
	const uint c = i % uint(args.D);
	const int id = ids[r];
	out[i] = (id >= 0 && id < args.V) ? to_float(table[ulong(id) * ulong(args.D) + c]) : 0.0f;
}

instantiate_kernel("embed_rows_f32", embed_rows, float)
instantiate_kernel("embed_rows_f16", embed_rows, half)
instantiate_kernel("embed_rows_bf16", embed_rows, bf16)
