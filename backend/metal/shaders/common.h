// common.h: what every kernel file shares. The Go side inlines it (and
// args.h) into each file before compiling, since newLibraryWithSource has no
// include path.
#pragma once

#include <metal_stdlib>
using namespace metal;

#include "args.h"

// instantiate_kernel(name, func, template args...) makes one host-visible
// kernel. Every .metal file ends with a block of these; the host builds the
// same names (backend/metal/names.go).
#ifndef instantiate_kernel
#define instantiate_kernel(name, func, ...) \
	template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;
#endif

// bf16 is a bfloat16 stored as its 16 bits.
struct bf16 {
	ushort bits;
};

inline float to_float(float v) { return v; }
inline float to_float(half v) { return float(v); }
// bf16 goes by reference in the address space it lies in: MSL would also
// copy the struct out of device memory, but the emulator's address spaces
// (backend/metal/emu) let only scalars cross, so it is read where it is.
inline float to_float(thread const bf16 &v) { return as_type<float>(uint(v.bits) << 16); }
inline float to_float(device const bf16 &v) { return as_type<float>(uint(v.bits) << 16); }

// tg_sum returns the sum of v over the threadgroup. scratch holds at least
// 33 floats; every thread of the threadgroup must call it.
inline float tg_sum(float v, threadgroup float *scratch, uint sgitg, uint lane, uint nsg) {
	v = simd_sum(v);
	if (lane == 0) {
		scratch[sgitg] = v;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (sgitg == 0) {
		float t = lane < nsg ? scratch[lane] : 0.0f;
		t = simd_sum(t);
		if (lane == 0) {
			scratch[32] = t;
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	float r = scratch[32];
	threadgroup_barrier(mem_flags::mem_threadgroup);
	return r;
}

// tg_max is tg_sum with max.
inline float tg_max(float v, threadgroup float *scratch, uint sgitg, uint lane, uint nsg) {
	v = simd_max(v);
	if (lane == 0) {
		scratch[sgitg] = v;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (sgitg == 0) {
		float t = lane < nsg ? scratch[lane] : -FLT_MAX;
		t = simd_max(t);
		if (lane == 0) {
			scratch[32] = t;
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	float r = scratch[32];
	threadgroup_barrier(mem_flags::mem_threadgroup);
	return r;
}
