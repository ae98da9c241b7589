// bandwidth.cu: a streaming read of device memory, for `redrafter bench
// --backend cuda`, which reports decoding's bytes per second as a fraction
// of what this kernel reads per second on the same GPU in the same run.
// Each thread XORs the 16-byte words i, i+stride, ... (coalesced: a warp
// reads 512 consecutive bytes per step) and its block writes one word, so
// nothing the reads feed is dead code. Grid: (blocks); block: 256.
#include "prelude.cuh"

// read_xor_u32: words is a multiple of 4 and x 16-byte aligned (a whole
// allocation), so each step is one 16-byte load per thread.
KERNEL void read_xor_u32(unsigned *out, const unsigned *x, u64 words) {
	SHARED unsigned acc[256];
	const u64 quads = words / 4;
	const u64 stride = u64(gridDim.x) * u64(blockDim.x);
	unsigned a = 0, b = 0, c = 0, d = 0;
	for (u64 i = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x); i < quads; i += stride) {
		const u32x4 v = ld_v4_u32(x + 4u * i); // as matvec8 and qmatvec read weights
		a ^= v.v[0];
		b ^= v.v[1];
		c ^= v.v[2];
		d ^= v.v[3];
	}
	acc[threadIdx.x] = a ^ b ^ c ^ d;
	sync_threads();
	for (int s = 128; s > 0; s >>= 1) {
		if (int(threadIdx.x) < s) acc[threadIdx.x] ^= acc[threadIdx.x + s];
		sync_threads();
	}
	if (threadIdx.x == 0) out[blockIdx.x] = acc[0];
}
