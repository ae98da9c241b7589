// prelude.cuh lets one .cu file compile three ways:
//
//   clang -x cuda --cuda-device-only -nocudainc -nocudalib → PTX (what ships;
//       no CUDA toolkit: clang's own builtins and NVVM intrinsics only),
//   NVRTC (later: __CUDACC_RTC__, the same device branch),
//   host C++ under the emulator (internal/backend/cuda/emu, tests only): every thread
//       of a block is a fiber of the shared kernel emulator's dispatcher
//       (internal/backend/emu), with real barrier and warp-collective semantics.
//
// Kernels use only what is defined here: KERNEL (an extern "C" entry point
// on the device, which the host code finds by name; a static function in
// the emulator, reached through its entry table), DEVICE, SHARED,
// threadIdx/blockIdx/blockDim/gridDim (1-D blocks of a multiple of 32
// threads), sync_threads(), the warp shuffles, the tensor-core mma_f16 and
// mma_bf16, the 16-byte loads ld_v4_u32/ld_v4_f32, atomic_add_i32 and
// thread_fence, the math functions
// below and the f16/bf16 storage types. Math is float only.
#pragma once

#if defined(__CUDA__) || defined(__CUDACC_RTC__)
// ---------------------------------------------------------------- device
#define CU_DEVICE_BUILD 1
#ifndef __CUDACC_RTC__
#include <__clang_cuda_builtin_vars.h>
#endif
#define KERNEL extern "C" __attribute__((global))
#define DEVICE static __attribute__((device)) inline
#define SHARED __attribute__((shared))

typedef __fp16 f16_t; // storage only: converted to and from float
typedef unsigned short bf16_t;
typedef unsigned long long u64;

DEVICE void sync_threads() { __syncthreads(); }
DEVICE float shfl_xor(float v, int mask) { return __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, mask, 0x1f); }
DEVICE int shfl_xor(int v, int mask) { return __nvvm_shfl_sync_bfly_i32(0xffffffffu, v, mask, 0x1f); }
DEVICE float shfl_idx(float v, int lane) { return __nvvm_shfl_sync_idx_f32(0xffffffffu, v, lane, 0x1f); }
// atomic_add_i32 adds v to *p atomically and returns the old value;
// thread_fence orders this thread's global memory accesses before and
// after it for every thread of the device (membar.gl). Together they let
// the last block of a group find out that it is last and read what the
// others wrote (attention.cu).
DEVICE int atomic_add_i32(int *p, int v) { return __nvvm_atom_add_gen_i(p, v); }
DEVICE void thread_fence() { __nvvm_membar_gl(); }
DEVICE int shfl_idx(int v, int lane) { return __nvvm_shfl_sync_idx_i32(0xffffffffu, v, lane, 0x1f); }

// exp and log from the hardware's base-2 approximations (about 2 ulp);
// sqrt and division are IEEE round-to-nearest, as on the CPU.
DEVICE float cu_exp(float x) { return __nvvm_ex2_approx_f(x * 1.4426950408889634f); }
DEVICE float cu_log(float x) { return __nvvm_lg2_approx_f(x) * 0.6931471805599453f; }
DEVICE float cu_sqrt(float x) { return __builtin_sqrtf(x); }
DEVICE float cu_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
DEVICE float cu_fmax(float a, float b) { return __builtin_fmaxf(a, b); }
DEVICE float cu_fmin(float a, float b) { return __builtin_fminf(a, b); }
DEVICE float cu_floor(float x) { return __builtin_floorf(x); }
DEVICE bool cu_isfinite(float x) { return __builtin_isfinite(x); }
DEVICE float cu_inf() { return __builtin_inff(); }
DEVICE float cu_nan() { return __builtin_nanf(""); }
DEVICE float bits_f32(unsigned u) { return __builtin_bit_cast(float, u); }
DEVICE unsigned f32_bits(float f) { return __builtin_bit_cast(unsigned, f); }
DEVICE unsigned short f16_bits(float f) { return __builtin_bit_cast(unsigned short, f16_t(f)); }
DEVICE float bits_f16(unsigned short h) { return float(__builtin_bit_cast(f16_t, h)); }

// mma_f16, mma_bf16: d = a·b + c for a warp, on tensor cores (PTX
// mma.sync.m16n8k16.row.col, f32 accumulation); the fragments are laid out
// as the comment of the emulator's version says.
DEVICE void mma_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
	             : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
DEVICE void mma_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
	             : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// ld_v4_u32, ld_v4_f32: one 16-byte load through the read-only data path
// (p 16-byte aligned, not written by the kernel). Written as PTX so that
// clang cannot split it into four 4-byte loads, as it did with a plain
// struct load; it may still move it, the asm being not volatile.
struct __attribute__((aligned(16))) u32x4 {
	unsigned v[4];
};
struct __attribute__((aligned(16))) f32x4 {
	float v[4];
};
DEVICE u32x4 ld_v4_u32(const void *p) {
	u32x4 r;
	asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.v[0]), "=r"(r.v[1]), "=r"(r.v[2]), "=r"(r.v[3]) : "l"(p));
	return r;
}
DEVICE f32x4 ld_v4_f32(const float *p) {
	f32x4 r;
	asm("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(r.v[0]), "=f"(r.v[1]), "=f"(r.v[2]), "=f"(r.v[3]) : "l"(p));
	return r;
}

#else
// ---------------------------------------------------------------- emulator
// Host C++ with the shared emulator's fiber runtime (collective.h, emu.h
// and driver.cpp from internal/backend/emu/runtime), which has no MSL
// spellings to leak into CUDA code.
#define CU_DEVICE_BUILD 0
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "collective.h"

// Kernels have internal linkage here, so that clang generates code only
// for the kernels a program's entry table names: a program of one kernel
// (a test's planted bug) costs a second to build, not matvec.cu's 40.
#define KERNEL static
#define DEVICE static inline
// Shared memory is one copy per kernel, which the fibers of a block share;
// blocks run one after another.
#define SHARED static

typedef __fp16 f16_t;
typedef unsigned short bf16_t;
typedef unsigned long long u64;

namespace cuemu {
struct Dim {
	unsigned x, y, z;
};
inline Dim dim(emu::Dim3 d) { return Dim{d.x, d.y, d.z}; }
} // namespace cuemu
#define threadIdx (cuemu::dim(emu::cur->tpitg))
#define blockIdx (cuemu::dim(emu::cur->tgpig))
#define blockDim (cuemu::dim(emu::cur->ntptg))
#define gridDim (cuemu::dim(emu::cur->ntgpg))

DEVICE void sync_threads() { emu::threadgroup_barrier(); }
template <class T> DEVICE T cu_shfl_xor(T v, int mask) {
	return emu::collective<emu::WithArg<T>, T, emu::comb_shuffle_xor<T>>({v, uint32_t(mask)}, "__shfl_xor_sync");
}
template <class T> DEVICE T cu_shfl_idx(T v, int lane) {
	return emu::collective<emu::WithArg<T>, T, emu::comb_shuffle<T>>({v, uint32_t(lane)}, "__shfl_sync");
}
DEVICE float shfl_xor(float v, int mask) { return cu_shfl_xor(v, mask); }
DEVICE int shfl_xor(int v, int mask) { return cu_shfl_xor(v, mask); }
DEVICE float shfl_idx(float v, int lane) { return cu_shfl_idx(v, lane); }
DEVICE int shfl_idx(int v, int lane) { return cu_shfl_idx(v, lane); }
// Blocks run one after another, so the emulator's atomics need no more
// than a read and a write, and its fence nothing.
DEVICE int atomic_add_i32(int *p, int v) {
	const int old = *p;
	*p = old + v;
	return old;
}
DEVICE void thread_fence() {}

DEVICE float cu_exp(float x) { return std::exp(x); }
DEVICE float cu_log(float x) { return std::log(x); }
DEVICE float cu_sqrt(float x) { return std::sqrt(x); }
DEVICE float cu_fma(float a, float b, float c) { return std::fma(a, b, c); }
DEVICE float cu_fmax(float a, float b) { return std::fmax(a, b); }
DEVICE float cu_fmin(float a, float b) { return std::fmin(a, b); }
DEVICE float cu_floor(float x) { return std::floor(x); }
DEVICE bool cu_isfinite(float x) { return std::isfinite(x); }
DEVICE float cu_inf() { return INFINITY; }
DEVICE float cu_nan() { return NAN; }
DEVICE float bits_f32(unsigned u) {
	float f;
	std::memcpy(&f, &u, 4);
	return f;
}
DEVICE unsigned f32_bits(float f) {
	unsigned u;
	std::memcpy(&u, &f, 4);
	return u;
}
DEVICE unsigned short f16_bits(float f) {
	const f16_t h = f16_t(f);
	unsigned short u;
	std::memcpy(&u, &h, 2);
	return u;
}
DEVICE float bits_f16(unsigned short u) {
	f16_t h;
	std::memcpy(&h, &u, 2);
	return float(h);
}

// mma_f16, mma_bf16: d = a·b + c for one warp, as PTX's mma.sync m16n8k16
// row.col with f32 accumulation: A is 16×16, B 16×8, C and D 16×8. Each
// 32-bit fragment register holds two 16-bit values, the lower index in the
// low half. With g = lane/4 and t = lane%4, lane holds
//   a[0] A[g][2t, 2t+1]   a[1] A[g+8][2t, 2t+1]   a[2] A[g][2t+8, 2t+9]   a[3] A[g+8][2t+8, 2t+9]
//   b[0] B[2t, 2t+1][g]   b[1] B[2t+8, 2t+9][g]
//   c[0], c[1] C[g][2t, 2t+1]   c[2], c[3] C[g+8][2t, 2t+1]   (d likewise)
// The emulator gathers each lane's row of A and columns of B with warp
// shuffles and adds the 16 exact products in k order. (The tensor core's
// own summation order is unspecified: results may differ in the last bits.)
template <bool BF16> DEVICE float mma_half(unsigned r, int hi) {
	const unsigned short h = (unsigned short)(hi ? r >> 16 : r & 0xffffu);
	return BF16 ? bits_f32(unsigned(h) << 16) : bits_f16(h);
}
template <bool BF16> DEVICE void mma_emu(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
	float acc[4] = {c[0], c[1], c[2], c[3]};
	for (int k = 0; k < 16; k++) {
		const int hi = k & 1, quad = (k & 7) >> 1, upper = k >= 8;
		// Every lane shuffles the same registers; only the source lanes differ.
		const unsigned ar0 = unsigned(cu_shfl_idx(int(a[upper ? 2 : 0]), g * 4 + quad));
		const unsigned ar1 = unsigned(cu_shfl_idx(int(a[upper ? 3 : 1]), g * 4 + quad));
		const unsigned bc0 = unsigned(cu_shfl_idx(int(b[upper]), (2 * t) * 4 + quad));
		const unsigned bc1 = unsigned(cu_shfl_idx(int(b[upper]), (2 * t + 1) * 4 + quad));
		const float x0 = mma_half<BF16>(ar0, hi), x1 = mma_half<BF16>(ar1, hi);
		const float y0 = mma_half<BF16>(bc0, hi), y1 = mma_half<BF16>(bc1, hi);
		acc[0] += x0 * y0;
		acc[1] += x0 * y1;
		acc[2] += x1 * y0;
		acc[3] += x1 * y1;
	}
	for (int i = 0; i < 4; i++) d[i] = acc[i];
}
DEVICE void mma_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) { mma_emu<false>(d, a, b, c); }
DEVICE void mma_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) { mma_emu<true>(d, a, b, c); }

// Kernel parameters arrive as CUDA lays them out for
// CU_LAUNCH_PARAM_BUFFER_POINTER: each at the next multiple of its
// alignment, in buffer 0. A pointer parameter holds a device address; buffer
// 1 lists each device buffer's base address (buffer i+2 is the i-th), and
// the address is translated into that buffer's host copy. A pointer that
// lands in no buffer is an error, as a fault would be on the GPU.
namespace cuemu {
inline unsigned char *translate(uint64_t addr, int param) {
	if (addr == 0) return nullptr;
	const uint64_t *bases = reinterpret_cast<const uint64_t *>(emu::launch->buffers[1]);
	size_t n = emu::launch->buffers[1] == nullptr ? 0 : emu::launch->sizes[1] / 8;
	for (size_t i = 0; i < n && i + 2 < 32; i++) {
		unsigned char *host = emu::launch->buffers[i + 2];
		if (host == nullptr) continue;
		if (addr >= bases[i] && addr <= bases[i] + emu::launch->sizes[i + 2]) return host + (addr - bases[i]);
	}
	emu::fail("pointer parameter %d (0x%llx) is in no device buffer of this launch", param, (unsigned long long)addr);
}

template <class P> P param(size_t &off, int index) {
	size_t a = alignof(P);
	off = (off + a - 1) / a * a;
	if (off + sizeof(P) > emu::launch->sizes[0])
		emu::fail("parameter %d needs bytes %zu..%zu; the launch passed %zu", index, off, off + sizeof(P),
		          emu::launch->sizes[0]);
	const unsigned char *src = emu::launch->buffers[0] + off;
	off += sizeof(P);
	if constexpr (std::is_pointer_v<P>) {
		uint64_t addr;
		std::memcpy(&addr, src, 8);
		return reinterpret_cast<P>(translate(addr, index));
	} else {
		static_assert(std::is_trivially_copyable_v<P>, "kernel parameters are scalars or pointers");
		P v;
		std::memcpy(&v, src, sizeof(P));
		return v;
	}
}

template <class... P, size_t... I> void call_impl(void (*f)(P...), std::index_sequence<I...>) {
	size_t off = 0;
	// Braced initialisation evaluates the parameters left to right.
	std::tuple<P...> args{param<P>(off, int(I))...};
	std::apply(f, args);
	if (off != emu::launch->sizes[0])
		emu::fail("the launch passed %zu parameter bytes; the kernel takes %zu", emu::launch->sizes[0], off);
}

template <class... P> void call(void (*f)(P...)) { call_impl(f, std::index_sequence_for<P...>{}); }
} // namespace cuemu

struct alignas(16) u32x4 {
	unsigned v[4];
};
struct alignas(16) f32x4 {
	float v[4];
};
// The GPU faults on a 16-byte load from an address that is not 16-byte
// aligned; the emulator fails the launch.
DEVICE void check_v4(const void *p) {
	if (reinterpret_cast<uintptr_t>(p) % 16 != 0) emu::fail("16-byte load from %p, which is not 16-byte aligned", p);
}
DEVICE u32x4 ld_v4_u32(const void *p) {
	u32x4 r;
	check_v4(p);
	std::memcpy(&r, p, sizeof r);
	return r;
}
DEVICE f32x4 ld_v4_f32(const float *p) {
	f32x4 r;
	check_v4(p);
	std::memcpy(&r, p, sizeof r);
	return r;
}
#endif

// ---------------------------------------------------------------- both
// ALWAYS_INLINE keeps a kernel's large helpers inline, where clang would
// call them, passing shared memory and registers' arrays through generic
// pointers.
#define ALWAYS_INLINE __attribute__((always_inline))
DEVICE float f16_load(const f16_t *p) { return float(*p); }
DEVICE void f16_store(f16_t *p, float v) { *p = f16_t(v); }
DEVICE float bf16_load(const bf16_t *p) { return bits_f32(unsigned(*p) << 16); }

// load_w reads one weight element as float, for the three weight dtypes.
DEVICE float load_w(const float *p, u64 i) { return p[i]; }
DEVICE float load_w(const f16_t *p, u64 i) { return f16_load(p + i); }
DEVICE float load_w(const bf16_t *p, u64 i) { return bf16_load(p + i); }

// warp_sum adds v over the 32 lanes of a warp in a fixed butterfly order,
// so every lane gets the same bits whatever the data.
DEVICE float warp_sum(float v) {
	for (int m = 16; m > 0; m >>= 1) v += shfl_xor(v, m);
	return v;
}
DEVICE float warp_max(float v) {
	for (int m = 16; m > 0; m >>= 1) v = cu_fmax(v, shfl_xor(v, m));
	return v;
}

// block_sum adds v over a block of up to 1024 threads (a multiple of 32):
// each warp's butterfly, then warp 0 over the warps' sums. scratch holds 32
// floats. Every thread gets the result.
DEVICE float block_sum(float v, float *scratch) {
	const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, nwarps = int(blockDim.x) >> 5;
	v = warp_sum(v);
	sync_threads(); // scratch may still be read by a previous call
	if (lane == 0) scratch[warp] = v;
	sync_threads();
	if (warp == 0) {
		float s = lane < nwarps ? scratch[lane] : 0.0f;
		s = warp_sum(s);
		if (lane == 0) scratch[0] = s;
	}
	sync_threads();
	return scratch[0];
}
DEVICE float block_max(float v, float *scratch) {
	const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, nwarps = int(blockDim.x) >> 5;
	v = warp_max(v);
	sync_threads();
	if (lane == 0) scratch[warp] = v;
	sync_threads();
	if (warp == 0) {
		float s = lane < nwarps ? scratch[lane] : -cu_inf();
		s = warp_max(s);
		if (lane == 0) scratch[0] = s;
	}
	sync_threads();
	return scratch[0];
}

// cu_sincos: sine and cosine accurate for large arguments (RoPE angles
// reach thousands of radians), from plain float arithmetic so that the GPU
// and the emulator compute the same bits: Cody-Waite reduction by π/2 in
// three parts, then minimax polynomials on [-π/4, π/4].
DEVICE void cu_sincos(float x, float *s, float *c) {
	const float q = cu_floor(x * 0.63661977236758134f + 0.5f);
	float r = cu_fma(q, -1.5707963705062866f, x);
	r = cu_fma(q, 4.3711388286737929e-08f, r);
	r = cu_fma(q, 1.7151245100059568e-15f, r);
	const float r2 = r * r;
	float sp = cu_fma(r2, -1.9515295891e-4f, 8.3321608736e-3f);
	sp = cu_fma(r2, sp, -1.6666654611e-1f);
	const float sr = cu_fma(r * r2, sp, r);
	float cp = cu_fma(r2, 2.443315711809948e-5f, -1.388731625493765e-3f);
	cp = cu_fma(r2, cp, 4.166664568298827e-2f);
	const float cr = cu_fma(r2 * r2, cp, cu_fma(r2, -0.5f, 1.0f));
	const int quadrant = int(q - 4.0f * cu_floor(q * 0.25f));
	switch (quadrant) {
	case 0: *s = sr; *c = cr; break;
	case 1: *s = cr; *c = -sr; break;
	case 2: *s = -sr; *c = -cr; break;
	default: *s = -cr; *c = sr; break;
	}
}

// w8_at is element e of a 16-byte word of eight f16 or bf16 values;
// x8 reads 8 floats (matvec.cu's and drafter.cu's 16-byte paths).
template <bool BF16> DEVICE float w8_at(const u32x4 &v, int e) {
	const unsigned short h = (unsigned short)((v.v[e >> 1] >> (16 * (e & 1))) & 0xffffu);
	return BF16 ? bits_f32(unsigned(h) << 16) : bits_f16(h);
}
// x8 reads x[i..i+8): 16 bytes at a time where x is 16-byte aligned (k is
// a multiple of 8, so then every row is too), else one float at a time;
// the values, and so the sums, are the same either way.
template <bool VEC> DEVICE void x8(float xs[8], const float *x, u64 i) {
	if (VEC) {
		const f32x4 a = ld_v4_f32(x + i), b = ld_v4_f32(x + i + 4u);
#pragma unroll
		for (int e = 0; e < 4; e++) {
			xs[e] = a.v[e];
			xs[4 + e] = b.v[e];
		}
	} else {
#pragma unroll
		for (int e = 0; e < 8; e++) xs[e] = x[i + u64(e)];
	}
}
