// gather.metal: GatherRows (out[i,:] = x[idx[i],:], 4-byte elements) and
// TakeAlong (out[m,j] = x[m, idx[m,j]]). An index out of range gives zero.
// One thread per output element. Grid: (ceil(count/256)); threadgroup: 256.
#include "common.h"

template <typename T>
kernel void gather_rows(
		constant GatherArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device const int *idx [[buffer(2)]],
		device T *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint i = tpig.x;
	if (i >= uint(args.n) * uint(args.row)) {
		return;
	}
	const uint r = i / uint(args.row);
	const uint c = i % uint(args.row);
	const int src = idx[r];
	out[i] = (src >= 0 && src < args.M) ? x[ulong(src) * ulong(args.row) + c] : T(0);
}

template <typename T>
kernel void gather_take(
		constant RowArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device const int *idx [[buffer(2)]],
		device T *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint i = tpig.x;
	if (i >= uint(args.M) * uint(args.K)) {
		return;
	}
	const uint m = i / uint(args.K);
	const int j = idx[i];
	out[i] = (j >= 0 && j < args.V) ? x[ulong(m) * ulong(args.V) + ulong(j)] : T(0);
}

instantiate_kernel("gather_rows_f32", gather_rows, float)
instantiate_kernel("gather_rows_i32", gather_rows, int)
instantiate_kernel("gather_take_f32", gather_take, float)
