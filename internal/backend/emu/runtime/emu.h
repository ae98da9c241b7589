// emu.h is the runtime contract between emulated kernels (through Metal's
// msl.h or CUDA's prelude.cuh, both over collective.h) and the dispatcher
// (driver.cpp). It must not include anything that the MSL macros of msl.h
// would break, and it must not itself use those macros.
//
// Execution model: every GPU thread of a threadgroup is a fiber (a stack)
// on one OS thread. A fiber runs until it reaches a threadgroup barrier or a
// simdgroup collective, where it blocks until every thread that has to take
// part has arrived; threads that have returned from the kernel no longer take
// part in simdgroup collectives (as inactive lanes on the GPU), but returning
// while other threads wait at a threadgroup barrier is reported as an error.
// Threadgroups run one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace emu {

constexpr int kSimdWidth = 32;
constexpr int kSlot = 512; // bytes a lane may contribute to one collective

struct Simdgroup;
using CompleteFn = void (*)(Simdgroup *);

struct Simdgroup {
	int index;      // simdgroup index in the threadgroup
	int first;      // index of lane 0 in the threadgroup
	int lanes;      // lanes that exist (the last simdgroup may be partial)
	int active;     // lanes that have not returned
	int arrived;    // lanes waiting in the current collective
	CompleteFn op;  // the collective in progress
	const char *what;
	bool present[kSimdWidth];
	alignas(16) unsigned char in[kSimdWidth][kSlot];
	alignas(16) unsigned char out[kSimdWidth][kSlot];
};

struct Threadgroup {
	int threads; // threads in the group
	int active;  // threads that have not returned
	int arrived; // threads waiting at the barrier
};

struct Dim3 {
	uint32_t x, y, z;
};

// Thread is one emulated GPU thread.
struct Thread {
	Dim3 tpig;   // thread_position_in_grid
	Dim3 tpitg;  // thread_position_in_threadgroup
	Dim3 tgpig;  // threadgroup_position_in_grid
	Dim3 ntptg;  // threads_per_threadgroup
	Dim3 ntgpg;  // threadgroups_per_grid
	Dim3 ntpg;   // threads_per_grid
	uint32_t tiitg; // thread_index_in_threadgroup
	uint32_t lane;  // thread_index_in_simdgroup
	uint32_t sgitg; // simdgroup_index_in_threadgroup
	uint32_t nsg;   // simdgroups_per_threadgroup
	Simdgroup *sg;
	Threadgroup *tg;
	int state;
	void *fiber;
};

// Launch is what a kernel's parameters are bound from.
struct Launch {
	unsigned char *buffers[32];
	size_t sizes[32];
	unsigned char *tgmem[8];
	size_t tgsizes[8];
};

// Entry is one kernel of a library; the harness generates the table.
struct Entry {
	const char *name;
	void (*run)();
};

extern Thread *cur;
extern Launch *launch;

[[noreturn]] void fail(const char *fmt, ...);
void block();   // the current fiber waits until it is released
void release(Thread *t);
Thread *thread_at(int index); // thread by index in the current threadgroup

// Complete runs the collective's combine for every present lane, then
// releases the waiting lanes.
void complete(Simdgroup *g);

} // namespace emu
