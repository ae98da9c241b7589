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

// silu is v·σ(v), as SiLU, SwiGLU and the fused products compute it.
inline float silu(float v) { return v / (1.0f + exp(-v)); }

// gelu is GELU with PyTorch's tanh approximation (Gemma's
// gelu_pytorch_tanh), tanh(u) taken as 1 - 2/(1 + e^(2u)), which is ±1
// where e^(2u) over- or underflows; as GeGLU and the fused products
// compute it.
inline float gelu(float x) {
	const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
	return 0.5f * x * (2.0f - 2.0f / (1.0f + exp(2.0f * u)));
}

// linear_glu reports whether fuse ends the product in a GLU (SwiGLU or
// GeGLU): the weight holds gate rows, then up rows.
inline bool linear_glu(int fuse) { return (fuse & (LINEAR_SWIGLU | LINEAR_GEGLU)) != 0; }

// linear_out finishes output (m, n) of a product with the LINEAR_ bits of
// fuse folded in (graph.LinearOp): dot is x·w over column n (the gate's
// with a GLU) and up, with a GLU, over column N+n, both taken on x·gain
// so that the norm's 1/rms (scale) applies here. The steps follow the
// unfused ops' order (product, bias, SwiGLU or GeGLU, residual), each rounded to
// f32, so that the result differs from theirs only by where the norm's
// scale rounds. With fuse 0 it returns dot untouched.
inline float linear_out(int fuse, float scale, float dot, float up, device const float *bias, device const float *res,
		int m, int n, int N) {
	float y = dot;
	if ((fuse & LINEAR_NORM) != 0) {
		y *= scale;
		up *= scale;
	}
	if ((fuse & LINEAR_BIAS) != 0) {
		y += bias[n];
		if (linear_glu(fuse)) {
			up += bias[N + n];
		}
	}
	if ((fuse & LINEAR_SWIGLU) != 0) {
		y = silu(y) * up;
	} else if ((fuse & LINEAR_GEGLU) != 0) {
		y = gelu(y) * up;
	}
	if ((fuse & LINEAR_RESIDUAL) != 0) {
		y = res[ulong(m) * ulong(N) + ulong(n)] + y;
	}
	return y;
}

// linear_row is the row of the weight that slot r of a simdgroup's `rows`
// reads, for outputs n0.. of N: rows n0.. for a plain product; with a GLU
// the first half of the slots take gate rows n0.., the second half the up
// rows N+n0.. (the weight holds N gate rows, then N up rows), so that one
// simdgroup has both halves of each of its outputs. Slots past the end
// repeat the last row (valid memory, never stored).
inline int linear_row(bool glu, int rows, int r, int n0, int N) {
	if (!glu) {
		return min(n0 + r, N - 1);
	}
	const int half_rows = rows / 2;
	return r < half_rows ? min(n0 + r, N - 1) : N + min(n0 + r - half_rows, N - 1);
}

// rope_at is element i (< 2·P) of a head rotated by position p (rope.metal's
// rotation, shared with kv.metal's fused write so that both round alike):
// the first 2·P dims of the head are rotated by p·inv_freq[j]; NeoX pairs
// (j, j+P) as HF checkpoints do, otherwise adjacent pairs (2j, 2j+1) as
// llama.cpp's permuted weights do.
template <bool NeoX>
inline float rope_at(device const float *head, int i, int P, float p, constant float *inv_freq) {
	int j, i0, i1;
	bool first;
	if (NeoX) {
		j = i < P ? i : i - P;
		i0 = j;
		i1 = j + P;
		first = i < P;
	} else {
		j = i / 2;
		i0 = 2 * j;
		i1 = 2 * j + 1;
		first = i % 2 == 0;
	}
	const float a = head[i0];
	const float b = head[i1];
	// The angle as hi+lo (lo is the rounding error of the product), so that
	// large positions lose no accuracy: sin(hi+lo) ≈ sin(hi) + lo·cos(hi).
	const float f = inv_freq[j];
	const float hi = p * f;
	const float lo = fma(p, f, -hi);
	const float s0 = sin(hi);
	const float c0 = cos(hi);
	const float s = s0 + lo * c0;
	const float c = c0 - lo * s0;
	return first ? a * c - b * s : a * s + b * c;
}
