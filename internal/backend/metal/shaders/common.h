// common.h: what every kernel file shares. The Go side inlines it (and
// args.h) into each file before compiling, since newLibraryWithSource has no
// include path.
#pragma once

#include <metal_stdlib>
using namespace metal;

#include "args.h"

// instantiate_kernel(name, func, template args...) makes one host-visible
// kernel. Every .metal file ends with a block of these; the host builds the
// same names (internal/backend/metal/names.go).
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
// (internal/backend/metal/emu) let only scalars cross, so it is read where it is.
inline float to_float(thread const bf16 &v) { return as_type<float>(uint(v.bits) << 16); }
inline float to_float(device const bf16 &v) { return as_type<float>(uint(v.bits) << 16); }

// load4 reads p[0..3] as floats with one 4-wide load (half4, float4, or a
// bf16's ushort4); p is aligned to four elements. matvec and attention use
// it where the host says operands are aligned.
inline void load4(device const float *p, thread float *v) {
	const float4 t = *((device const float4 *)p);
	v[0] = t.x;
	v[1] = t.y;
	v[2] = t.z;
	v[3] = t.w;
}
inline void load4(device const half *p, thread float *v) {
	const half4 t = *((device const half4 *)p);
	v[0] = float(t.x);
	v[1] = float(t.y);
	v[2] = float(t.z);
	v[3] = float(t.w);
}
inline void load4(device const bf16 *p, thread float *v) {
	const ushort4 t = *((device const ushort4 *)p);
	v[0] = as_type<float>(uint(t.x) << 16);
	v[1] = as_type<float>(uint(t.y) << 16);
	v[2] = as_type<float>(uint(t.z) << 16);
	v[3] = as_type<float>(uint(t.w) << 16);
}

// load4_tail reads the n (> 0) of p[0..3] that exist, one at a time, and
// zeros for the rest.
template <typename W>
inline void load4_tail(device const W *p, int n, thread float *v) {
	for (int i = 0; i < 4; i++) {
		v[i] = i < n ? to_float(p[i]) : 0.0f;
	}
}

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
