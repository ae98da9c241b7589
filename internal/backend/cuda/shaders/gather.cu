// gather.cu: GatherRows (out[i,:] = x[idx[i],:]; f32 and i32 rows are the
// same copy of 4-byte words) and TakeAlong (out[m,j] = x[m, idx[m,j]]). An
// index out of range gives zeros (the CPU reference reports an error; a
// kernel cannot, and must not read outside x). One thread per output
// element. Grid: (ceil(count/256)); block: 256.
#include "prelude.cuh"

DEVICE u64 gid() { return u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x); }

// gather_rows: x [m, row] words, idx [n], out [n, row].
DEVICE void gather_rows(unsigned *out, const unsigned *x, const int *idx, int m, int n, int row) {
	const u64 i = gid();
	if (i >= u64(n) * u64(row)) return;
	const u64 r = i / u64(row), c = i % u64(row);
	const int src = idx[r];
	out[i] = src >= 0 && src < m ? x[u64(src) * u64(row) + c] : 0u;
}

KERNEL void gather_rows_f32(float *out, const float *x, const int *idx, int m, int n, int row) {
	gather_rows(reinterpret_cast<unsigned *>(out), reinterpret_cast<const unsigned *>(x), idx, m, n, row);
}
KERNEL void gather_rows_i32(int *out, const int *x, const int *idx, int m, int n, int row) {
	gather_rows(reinterpret_cast<unsigned *>(out), reinterpret_cast<const unsigned *>(x), idx, m, n, row);
}

// take_along_f32: x [m, v], idx and out [m, k].
KERNEL void take_along_f32(float *out, const float *x, const int *idx, int m, int v, int k) {
	const u64 i = gid();
	if (i >= u64(m) * u64(k)) return;
	const int j = idx[i];
	out[i] = j >= 0 && j < v ? x[(i / u64(k)) * u64(v) + u64(j)] : 0.0f;
}
