// collective.h is the fiber runtime's thread-cooperation layer, shared by
// both emulated languages (msl.h for Metal, prelude.cuh for CUDA): simdgroup
// (warp) collectives, where every active lane deposits a value and each gets
// what a combine function computes from all of them, and the threadgroup
// (block) barrier. It uses no MSL or CUDA spelling, so either front may
// include it.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "emu.h"

namespace emu {

template <class T> inline const T &in_at(const Simdgroup *g, int lane) {
	return *reinterpret_cast<const T *>(g->in[lane]);
}

template <class In, class Out, Out (*Combine)(const Simdgroup *, int)> void complete_impl(Simdgroup *g) {
	for (int l = 0; l < kSimdWidth; l++) {
		if (g->present[l]) {
			Out r = Combine(g, l);
			std::memcpy(g->out[l], &r, sizeof(Out));
		}
	}
}

// collective makes the calling lane take part in a simdgroup-wide operation:
// it deposits v, waits for every active lane of its simdgroup, and returns
// what Combine computed for it.
template <class In, class Out, Out (*Combine)(const Simdgroup *, int)> Out collective(const In &v, const char *what) {
	static_assert(sizeof(In) <= kSlot && sizeof(Out) <= kSlot, "collective value too large");
	static_assert(std::is_trivially_copyable_v<In> && std::is_trivially_copyable_v<Out>);
	Thread *t = cur;
	Simdgroup *g = t->sg;
	CompleteFn fn = &complete_impl<In, Out, Combine>;
	if (g->arrived == 0) {
		g->op = fn;
		g->what = what;
	} else if (g->op != fn) {
		fail("simdgroup %d: lane %u calls %s while other lanes wait in %s (divergent simdgroup operation)",
		     g->index, t->lane, what, g->what);
	}
	std::memcpy(g->in[t->lane], &v, sizeof(In));
	g->present[t->lane] = true;
	g->arrived++;
	if (g->arrived == g->active) {
		complete(g);
	} else {
		block();
	}
	Out r;
	std::memcpy(&r, g->out[t->lane], sizeof(Out));
	return r;
}

template <class T> struct WithArg {
	T v;
	uint32_t arg;
};

template <class T> T comb_sum(const Simdgroup *g, int) {
	T s{};
	for (int l = 0; l < kSimdWidth; l++)
		if (g->present[l]) s += in_at<T>(g, l);
	return s;
}
template <class T> T comb_max(const Simdgroup *g, int) {
	bool first = true;
	T m{};
	for (int l = 0; l < kSimdWidth; l++)
		if (g->present[l]) {
			T v = in_at<T>(g, l);
			if (first || v > m) m = v;
			first = false;
		}
	return m;
}
template <class T> T comb_min(const Simdgroup *g, int) {
	bool first = true;
	T m{};
	for (int l = 0; l < kSimdWidth; l++)
		if (g->present[l]) {
			T v = in_at<T>(g, l);
			if (first || v < m) m = v;
			first = false;
		}
	return m;
}
template <class T> T comb_prefix_excl(const Simdgroup *g, int lane) {
	T s{};
	for (int l = 0; l < lane; l++)
		if (g->present[l]) s += in_at<T>(g, l);
	return s;
}
template <class T> T comb_prefix_incl(const Simdgroup *g, int lane) {
	T s{};
	for (int l = 0; l <= lane; l++)
		if (g->present[l]) s += in_at<T>(g, l);
	return s;
}
template <class T> T from_lane(const Simdgroup *g, int lane, int src) {
	if (src < 0 || src >= kSimdWidth || !g->present[src]) return in_at<WithArg<T>>(g, lane).v;
	return in_at<WithArg<T>>(g, src).v;
}
template <class T> T comb_shuffle(const Simdgroup *g, int lane) {
	return from_lane<T>(g, lane, int(in_at<WithArg<T>>(g, lane).arg));
}
template <class T> T comb_shuffle_down(const Simdgroup *g, int lane) {
	return from_lane<T>(g, lane, lane + int(in_at<WithArg<T>>(g, lane).arg));
}
template <class T> T comb_shuffle_up(const Simdgroup *g, int lane) {
	return from_lane<T>(g, lane, lane - int(in_at<WithArg<T>>(g, lane).arg));
}
template <class T> T comb_shuffle_xor(const Simdgroup *g, int lane) {
	return from_lane<T>(g, lane, lane ^ int(in_at<WithArg<T>>(g, lane).arg));
}
template <class T> T comb_first(const Simdgroup *g, int) {
	for (int l = 0; l < kSimdWidth; l++)
		if (g->present[l]) return in_at<T>(g, l);
	return T{};
}
inline bool comb_all(const Simdgroup *g, int) {
	for (int l = 0; l < kSimdWidth; l++)
		if (g->present[l] && !in_at<bool>(g, l)) return false;
	return true;
}
inline bool comb_any(const Simdgroup *g, int) {
	for (int l = 0; l < kSimdWidth; l++)
		if (g->present[l] && in_at<bool>(g, l)) return true;
	return false;
}
inline char comb_none(const Simdgroup *, int) { return 0; }

void threadgroup_barrier();

} // namespace emu
