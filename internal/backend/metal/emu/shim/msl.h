// msl.h lets clang compile Metal Shading Language kernels as C++20 and run
// them on the CPU with the dispatcher of driver.cpp: address-space qualifiers,
// vector types, half, the metal:: math and simdgroup functions, barriers and
// 8x8 simdgroup matrices. It covers what shaders/metal uses, not all of MSL.
//
// Two source rewrites are done by the Go harness before compiling (see
// emu.go): [[threadgroup(i)]] becomes [[tg_param(i)]], because "threadgroup"
// is a macro here, and instantiate_kernel is defined below instead of by
// common.h. Attributes such as [[buffer(i)]] are ignored by clang; the harness
// reads them from the source to bind parameters.
#pragma once

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collective.h"

// Scalar and vector types.
typedef _Float16 half;
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

#define EMU_VEC(T, N) typedef T T##N __attribute__((ext_vector_type(N)));
#define EMU_VECS(T) EMU_VEC(T, 2) EMU_VEC(T, 3) EMU_VEC(T, 4)
EMU_VECS(float)
EMU_VECS(half)
EMU_VECS(int)
EMU_VECS(uint)
EMU_VECS(short)
EMU_VECS(ushort)
EMU_VECS(char)
EMU_VECS(uchar)
EMU_VECS(long)
EMU_VECS(ulong)
#undef EMU_VECS
#undef EMU_VEC

#ifndef HALF_MAX
#define HALF_MAX 65504.0h
#endif
#define M_PI_F 3.14159265358979323846f
#define MAXHALF 65504.0f

// Template instantiation: MSL's "template [[host_name(n)]] [[kernel]] ..."
// is not C++; an explicit instantiation is enough for the harness, which
// finds the names itself.
#define instantiate_kernel(name, func, ...) template decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;

// Address spaces are clang's, so that what MSL refuses is refused here too:
// a device pointer passed where a thread or threadgroup one is expected, a
// threadgroup pointer stored in a device one. Thread is the default space.
// On x86-64 the casts between them are no-ops. Stricter than MSL in one way:
// a struct is not copied out of another space (read its members instead).
#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup __attribute__((address_space(3)))
#define thread
#define kernel

namespace metal {

enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }

inline void threadgroup_barrier(mem_flags) { emu::threadgroup_barrier(); }
inline void simdgroup_barrier(mem_flags) {
	emu::collective<char, char, emu::comb_none>(0, "simdgroup_barrier");
}

template <class T> T simd_sum(T v) { return emu::collective<T, T, emu::comb_sum<T>>(v, "simd_sum"); }
template <class T> T simd_max(T v) {
	static_assert(std::is_arithmetic_v<T>, "simd_max: scalars only in the emulator");
	return emu::collective<T, T, emu::comb_max<T>>(v, "simd_max");
}
template <class T> T simd_min(T v) {
	static_assert(std::is_arithmetic_v<T>, "simd_min: scalars only in the emulator");
	return emu::collective<T, T, emu::comb_min<T>>(v, "simd_min");
}
template <class T> T simd_prefix_exclusive_sum(T v) {
	return emu::collective<T, T, emu::comb_prefix_excl<T>>(v, "simd_prefix_exclusive_sum");
}
template <class T> T simd_prefix_inclusive_sum(T v) {
	return emu::collective<T, T, emu::comb_prefix_incl<T>>(v, "simd_prefix_inclusive_sum");
}
template <class T> T simd_shuffle(T v, ushort lane) {
	return emu::collective<emu::WithArg<T>, T, emu::comb_shuffle<T>>({v, lane}, "simd_shuffle");
}
template <class T> T simd_broadcast(T v, ushort lane) {
	return emu::collective<emu::WithArg<T>, T, emu::comb_shuffle<T>>({v, lane}, "simd_broadcast");
}
template <class T> T simd_shuffle_down(T v, ushort delta) {
	return emu::collective<emu::WithArg<T>, T, emu::comb_shuffle_down<T>>({v, delta}, "simd_shuffle_down");
}
template <class T> T simd_shuffle_up(T v, ushort delta) {
	return emu::collective<emu::WithArg<T>, T, emu::comb_shuffle_up<T>>({v, delta}, "simd_shuffle_up");
}
template <class T> T simd_shuffle_xor(T v, ushort mask) {
	return emu::collective<emu::WithArg<T>, T, emu::comb_shuffle_xor<T>>({v, mask}, "simd_shuffle_xor");
}
template <class T> T simd_broadcast_first(T v) {
	return emu::collective<T, T, emu::comb_first<T>>(v, "simd_broadcast_first");
}
inline bool simd_all(bool v) { return emu::collective<bool, bool, emu::comb_all>(v, "simd_all"); }
inline bool simd_any(bool v) { return emu::collective<bool, bool, emu::comb_any>(v, "simd_any"); }

// Reinterpretation.
template <class T, class U> inline T as_type(U v) {
	static_assert(sizeof(T) == sizeof(U), "as_type: sizes differ");
	T t;
	std::memcpy(&t, &v, sizeof t);
	return t;
}

// Math. float and double come from <cmath>; half is computed in float.
using std::abs;
using std::ceil;
using std::cos;
using std::exp;
using std::exp2;
using std::fabs;
using std::floor;
using std::fma;
using std::isinf;
using std::isnan;
using std::log;
using std::log2;
using std::pow;
using std::round;
using std::sin;
using std::sqrt;
using std::tanh;
using std::trunc;
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
#define EMU_HALF1(f) \
	inline half f(half x) { return half(f(float(x))); }
EMU_HALF1(exp)
EMU_HALF1(exp2)
EMU_HALF1(log)
EMU_HALF1(log2)
EMU_HALF1(sqrt)
EMU_HALF1(rsqrt)
EMU_HALF1(cos)
EMU_HALF1(sin)
EMU_HALF1(tanh)
EMU_HALF1(fabs)
EMU_HALF1(abs)
#undef EMU_HALF1

inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline half max(half a, half b) { return half(std::fmax(float(a), float(b))); }
inline half min(half a, half b) { return half(std::fmin(float(a), float(b))); }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline uint max(uint a, uint b) { return a > b ? a : b; }
inline uint min(uint a, uint b) { return a < b ? a : b; }
inline float fmax(float a, float b) { return std::fmax(a, b); }
inline float fmin(float a, float b) { return std::fmin(a, b); }
inline float clamp(float x, float lo, float hi) { return min(max(x, lo), hi); }
inline int clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }
inline uint clamp(uint x, uint lo, uint hi) { return min(max(x, lo), hi); }
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }

namespace fast {
using metal::cos;
using metal::exp;
using metal::exp2;
using metal::log;
using metal::log2;
using metal::rsqrt;
using metal::sin;
using metal::sqrt;
using metal::tanh;
} // namespace fast
namespace precise {
using metal::cos;
using metal::exp;
using metal::exp2;
using metal::log;
using metal::log2;
using metal::rsqrt;
using metal::sin;
using metal::sqrt;
using metal::tanh;
} // namespace precise

// simdgroup_matrix: every lane holds the whole matrix. Loads and stores are
// collectives that check all lanes pass the same arguments (a lane-dependent
// pointer is a bug on the GPU); multiply-accumulate is computed per lane.
template <class T, int Cols, int Rows> struct simdgroup_matrix {
	T m[Rows][Cols];
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;

template <class T, int Cols, int Rows> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v) {
	simdgroup_matrix<T, Cols, Rows> r;
	for (int i = 0; i < Rows; i++)
		for (int j = 0; j < Cols; j++) r.m[i][j] = v;
	return r;
}

} // namespace metal

namespace emu {

struct MatrixAccess {
	const void *p;
	uint64_t epr, ox, oy;
	bool transpose;
	bool operator==(const MatrixAccess &o) const {
		return p == o.p && epr == o.epr && ox == o.ox && oy == o.oy && transpose == o.transpose;
	}
};

inline int first_lane(const Simdgroup *g) {
	for (int l = 0; l < kSimdWidth; l++)
		if (g->present[l]) return l;
	return 0;
}

template <class T, int Cols, int Rows> metal::simdgroup_matrix<T, Cols, Rows> comb_load(const Simdgroup *g, int lane) {
	const MatrixAccess &a = in_at<MatrixAccess>(g, lane);
	if (!(a == in_at<MatrixAccess>(g, first_lane(g))))
		fail("simdgroup_load: lane %d of simdgroup %d loads from a different place than lane %d", lane, g->index,
		     first_lane(g));
	const T *src = static_cast<const T *>(a.p);
	metal::simdgroup_matrix<T, Cols, Rows> d;
	for (int r = 0; r < Rows; r++)
		for (int c = 0; c < Cols; c++)
			d.m[r][c] = a.transpose ? src[(a.oy + c) * a.epr + a.ox + r] : src[(a.oy + r) * a.epr + a.ox + c];
	return d;
}

template <class T, int Cols, int Rows> struct MatrixStore {
	metal::simdgroup_matrix<T, Cols, Rows> m;
	MatrixAccess a;
};

template <class T, int Cols, int Rows> char comb_store(const Simdgroup *g, int lane) {
	using S = MatrixStore<T, Cols, Rows>;
	int f = first_lane(g);
	const S &s = in_at<S>(g, lane);
	const S &s0 = in_at<S>(g, f);
	if (!(s.a == s0.a))
		fail("simdgroup_store: lane %d of simdgroup %d stores to a different place than lane %d", lane, g->index, f);
	if (std::memcmp(&s.m, &s0.m, sizeof s.m) != 0)
		fail("simdgroup_store: lanes %d and %d of simdgroup %d hold different matrices", lane, f, g->index);
	if (lane == f) {
		T *dst = static_cast<T *>(const_cast<void *>(s.a.p));
		for (int r = 0; r < Rows; r++)
			for (int c = 0; c < Cols; c++) {
				if (s.a.transpose)
					dst[(s.a.oy + c) * s.a.epr + s.a.ox + r] = s.m.m[r][c];
				else
					dst[(s.a.oy + r) * s.a.epr + s.a.ox + c] = s.m.m[r][c];
			}
	}
	return 0;
}

} // namespace emu

namespace metal {

// Loads and stores take device or threadgroup memory, as in MSL.
template <class T, int Cols, int Rows>
inline void simdgroup_load_at(simdgroup_matrix<T, Cols, Rows> &d, const void *src, ulong elements_per_row,
                              ulong2 matrix_origin, bool transpose_matrix) {
	emu::MatrixAccess a{src, elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix};
	d = emu::collective<emu::MatrixAccess, simdgroup_matrix<T, Cols, Rows>, emu::comb_load<T, Cols, Rows>>(
	    a, "simdgroup_load");
}

template <class T, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const device T *src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = ulong2{0, 0}, bool transpose_matrix = false) {
	simdgroup_load_at(d, (const void *)src, elements_per_row, matrix_origin, transpose_matrix);
}

template <class T, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const threadgroup T *src,
                           ulong elements_per_row = Cols, ulong2 matrix_origin = ulong2{0, 0},
                           bool transpose_matrix = false) {
	simdgroup_load_at(d, (const void *)src, elements_per_row, matrix_origin, transpose_matrix);
}

template <class T, int Cols, int Rows>
inline void simdgroup_store_at(const simdgroup_matrix<T, Cols, Rows> &m, void *dst, ulong elements_per_row,
                               ulong2 matrix_origin, bool transpose_matrix) {
	emu::MatrixStore<T, Cols, Rows> s{m, {dst, elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix}};
	emu::collective<emu::MatrixStore<T, Cols, Rows>, char, emu::comb_store<T, Cols, Rows>>(s, "simdgroup_store");
}

template <class T, int Cols, int Rows>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &m, device T *dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = ulong2{0, 0}, bool transpose_matrix = false) {
	simdgroup_store_at(m, (void *)dst, elements_per_row, matrix_origin, transpose_matrix);
}

template <class T, int Cols, int Rows>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &m, threadgroup T *dst,
                            ulong elements_per_row = Cols, ulong2 matrix_origin = ulong2{0, 0},
                            bool transpose_matrix = false) {
	simdgroup_store_at(m, (void *)dst, elements_per_row, matrix_origin, transpose_matrix);
}

// d = a*b + c, accumulated in float.
template <class T, class U, class V, class W, int Cols, int K, int Rows>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, Cols, Rows> &d, const simdgroup_matrix<U, K, Rows> &a,
                                          const simdgroup_matrix<V, Cols, K> &b,
                                          const simdgroup_matrix<W, Cols, Rows> &c) {
	simdgroup_matrix<T, Cols, Rows> r;
	for (int i = 0; i < Rows; i++)
		for (int j = 0; j < Cols; j++) {
			float s = float(c.m[i][j]);
			for (int k = 0; k < K; k++) s += float(a.m[i][k]) * float(b.m[k][j]);
			r.m[i][j] = T(s);
		}
	d = r;
}

template <class T, class U, class V, int Cols, int K, int Rows>
inline void simdgroup_multiply(simdgroup_matrix<T, Cols, Rows> &d, const simdgroup_matrix<U, K, Rows> &a,
                               const simdgroup_matrix<V, Cols, K> &b) {
	simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<T, Cols, Rows>(T(0)));
}

} // namespace metal

// Parameter binding for the generated entry points (see emu.go).
namespace emu {

enum class Attr {
	thread_position_in_grid,
	thread_position_in_threadgroup,
	threadgroup_position_in_grid,
	threads_per_threadgroup,
	threadgroups_per_grid,
	threads_per_grid,
	thread_index_in_threadgroup,
	thread_index_in_simdgroup,
	simdgroup_index_in_threadgroup,
	threads_per_simdgroup,
	simdgroups_per_threadgroup,
};

struct Buf {
	int index;
};
struct Shared {
	int index;
};

inline Dim3 attr_value(Attr a) {
	Thread *t = cur;
	switch (a) {
	case Attr::thread_position_in_grid: return t->tpig;
	case Attr::thread_position_in_threadgroup: return t->tpitg;
	case Attr::threadgroup_position_in_grid: return t->tgpig;
	case Attr::threads_per_threadgroup: return t->ntptg;
	case Attr::threadgroups_per_grid: return t->ntgpg;
	case Attr::threads_per_grid: return t->ntpg;
	case Attr::thread_index_in_threadgroup: return {t->tiitg, 0, 0};
	case Attr::thread_index_in_simdgroup: return {t->lane, 0, 0};
	case Attr::simdgroup_index_in_threadgroup: return {t->sgitg, 0, 0};
	case Attr::threads_per_simdgroup: return {uint32_t(kSimdWidth), 0, 0};
	case Attr::simdgroups_per_threadgroup: return {t->nsg, 0, 0};
	}
	return {0, 0, 0};
}

template <class P> P bind(Attr a) {
	Dim3 d = attr_value(a);
	if constexpr (std::is_arithmetic_v<P>) {
		return P(d.x);
	} else {
		P v{};
		v.x = d.x;
		v.y = d.y;
		if constexpr (sizeof(v) / sizeof(v.x) >= 3) v.z = d.z;
		return v;
	}
}

// in_space reports whether pointer type P points into address space AS
// (pointers convert implicitly only within one space, and to const).
template <class P, class AS> constexpr bool in_space = std::is_convertible_v<P, AS>;

// The casts below are C-style because only those may change address space.
template <class P> P bind(Buf b) {
	unsigned char *p = launch->buffers[b.index];
	if (p == nullptr) fail("buffer(%d) is not bound", b.index);
	if constexpr (std::is_pointer_v<P>) {
		static_assert(in_space<P, const volatile device void *> || in_space<P, const volatile constant void *>,
		              "a buffer parameter points to device or constant memory");
		return (P)p;
	} else {
		static_assert(std::is_reference_v<P>, "buffer parameters are pointers or references");
		using V = std::remove_reference_t<P>;
		static_assert(in_space<V *, const volatile device void *> || in_space<V *, const volatile constant void *>,
		              "a buffer parameter refers to device or constant memory");
		if (launch->sizes[b.index] < sizeof(V))
			fail("buffer(%d) holds %zu bytes, the kernel reads a %zu-byte struct", b.index, launch->sizes[b.index],
			     sizeof(V));
		return *(V *)p;
	}
}

template <class P> P bind(Shared s) {
	static_assert(std::is_pointer_v<P> && in_space<P, const volatile threadgroup void *>,
	              "threadgroup parameters point to threadgroup memory");
	unsigned char *p = launch->tgmem[s.index];
	if (p == nullptr) fail("threadgroup(%d) memory is not set", s.index);
	return (P)p;
}

template <class... P, class... B> void call(void (*f)(P...), B... b) {
	static_assert(sizeof...(P) == sizeof...(B), "parameter count");
	f(bind<P>(b)...);
}

} // namespace emu
