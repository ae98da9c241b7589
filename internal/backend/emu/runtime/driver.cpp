// driver.cpp runs one emulated dispatch (a Metal dispatch or a CUDA launch)
// per process: it reads the kernel name, grid, buffers and threadgroup
// memory sizes from stdin, runs every threadgroup (threads as fibers, see
// emu.h), and writes the buffers back to stdout. Errors go to stderr with exit status 2; a memory fault
// (a guard page around every buffer) exits with status 3.
//
// The dispatch runs once per thread order of the request, each from the
// request's buffers: an order sets which ready thread the scheduler resumes
// first and the order of the threadgroups. The GPU promises no order, so a
// kernel whose results differ bit for bit between orders has a race (most
// often a missing threadgroup_barrier: with threads run forward, a thread
// that reads what a lower thread wrote before the barrier finds it written
// anyway; run in reverse, it does not) and is reported.
//
// Request, little-endian:
//   "EMU2" u32 namelen, name, u32 grid[3] (threadgroups), u32 group[3] (threads),
//   u32 nbuf, nbuf × {u32 index, u64 size, size bytes},
//   u32 ntg, ntg × {u32 index, u64 size},
//   u32 norders, norders × {u32 kind (0 forward, 1 reverse, 2 random), u64 seed}
// Reply: the nbuf buffers' bytes, in request order.
//
// "driver --list" prints the kernel names, one a line.
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "emu.h"

extern emu::Entry emu_entries[];
extern int emu_nentries;

namespace emu {

Thread *cur;
Launch *launch;

enum State { kReady, kRunning, kBlockedSimd, kBlockedBarrier, kDone };

static const char *kernel_name = "";

// Thread orders.
enum OrderKind { kForward, kReverse, kRandom };
struct Order {
	uint32_t kind;
	uint64_t seed;
};
static Order order;
static uint64_t rng; // the random order's state (splitmix64)

static uint64_t next_random() {
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// arrange fills perm with 0..n-1 in the current order.
static void arrange(std::vector<uint32_t> &perm, uint32_t n) {
	perm.resize(n);
	for (uint32_t i = 0; i < n; i++) perm[i] = order.kind == kReverse ? n - 1 - i : i;
	if (order.kind == kRandom) {
		for (uint32_t i = n; i > 1; i--) std::swap(perm[i - 1], perm[next_random() % i]);
	}
}

static std::string order_name(const Order &o) {
	switch (o.kind) {
	case kForward:
		return "forward";
	case kReverse:
		return "reverse";
	}
	return "random (seed " + std::to_string(o.seed) + ")";
}
// Fibers. Each thread slot of a threadgroup has a fiber: a stack of its own
// and, while it waits, the stack pointer it left at. A fiber loops: run the
// kernel for the thread in its slot, finish, yield; the next threadgroup
// resumes it with a new thread. The fibers are kept from one threadgroup to
// the next.
//
// switch_stack saves the callee-saved registers on the current stack, stores
// the stack pointer in *save, loads to and returns on that stack, restoring
// what was saved there: a dozen instructions. The kernels switch at every
// barrier and warp collective (attention's tree kernel: millions of times a
// launch), and the library's ways cost several times that: swapcontext
// makes a system call for the signal mask, and glibc's _longjmp, used here
// before, demangles pointers and runs its unwinding of cancellation handlers
// on every jump. The rounding mode and the other floating-point control bits
// are not switched: no kernel changes them.
extern "C" void switch_stack(void **save, void *to) __asm__("emu_switch_stack");
#if defined(__x86_64__)
__asm__(".text\n"
        ".p2align 4\n"
        "emu_switch_stack:\n"
        "\tpushq %rbp\n"
        "\tpushq %rbx\n"
        "\tpushq %r12\n"
        "\tpushq %r13\n"
        "\tpushq %r14\n"
        "\tpushq %r15\n"
        "\tmovq %rsp, (%rdi)\n"
        "\tmovq %rsi, %rsp\n"
        "\tpopq %r15\n"
        "\tpopq %r14\n"
        "\tpopq %r13\n"
        "\tpopq %r12\n"
        "\tpopq %rbx\n"
        "\tpopq %rbp\n"
        "\tret\n");
#elif defined(__aarch64__)
// x19-x28, the frame pointer x29, the link register x30 and d8-d15 (the
// callee-saved halves of v8-v15), in a 160-byte frame; x18 is the platform's
// (macOS) and is left alone.
__asm__(".text\n"
        ".p2align 4\n"
        "emu_switch_stack:\n"
        "\tsub sp, sp, #160\n"
        "\tstp x19, x20, [sp, #0]\n"
        "\tstp x21, x22, [sp, #16]\n"
        "\tstp x23, x24, [sp, #32]\n"
        "\tstp x25, x26, [sp, #48]\n"
        "\tstp x27, x28, [sp, #64]\n"
        "\tstp x29, x30, [sp, #80]\n"
        "\tstp d8, d9, [sp, #96]\n"
        "\tstp d10, d11, [sp, #112]\n"
        "\tstp d12, d13, [sp, #128]\n"
        "\tstp d14, d15, [sp, #144]\n"
        "\tmov x9, sp\n"
        "\tstr x9, [x0]\n"
        "\tmov sp, x1\n"
        "\tldp x19, x20, [sp, #0]\n"
        "\tldp x21, x22, [sp, #16]\n"
        "\tldp x23, x24, [sp, #32]\n"
        "\tldp x25, x26, [sp, #48]\n"
        "\tldp x27, x28, [sp, #64]\n"
        "\tldp x29, x30, [sp, #80]\n"
        "\tldp d8, d9, [sp, #96]\n"
        "\tldp d10, d11, [sp, #112]\n"
        "\tldp d12, d13, [sp, #128]\n"
        "\tldp d14, d15, [sp, #144]\n"
        "\tadd sp, sp, #160\n"
        "\tret\n");
#else
#error "emu: the fiber switch is written for x86-64 and arm64 only"
#endif

static void *sched_sp;               // the scheduler's, during a pass
static std::vector<void *> fiber_sp; // each waiting fiber's
static std::vector<char> started;
static std::vector<Thread> threads;
static std::vector<Simdgroup *> simdgroups;
static Threadgroup group;
static void (*entry)();

static unsigned char *stacks; // kStack bytes a fiber, one after another
static const size_t kStack = 256 << 10;

[[noreturn]] void fail(const char *fmt, ...) {
	fflush(stdout);
	fprintf(stderr, "emu: %s", kernel_name);
	if (cur != nullptr) {
		fprintf(stderr, " threadgroup (%u,%u,%u) thread (%u,%u,%u)", cur->tgpig.x, cur->tgpig.y, cur->tgpig.z,
		        cur->tpitg.x, cur->tpitg.y, cur->tpitg.z);
	}
	if (order.kind != kForward) fprintf(stderr, " in %s thread order", order_name(order).c_str());
	fprintf(stderr, ": ");
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	_exit(2);
}

Thread *thread_at(int i) { return &threads[i]; }

static void trampoline();

// new_fiber returns the stack pointer a fiber of slot i starts from: its
// stack holding what switch_stack restores, zeros and, as the return
// address, trampoline, which so starts as if called.
static void *new_fiber(int i) {
	void **sp = reinterpret_cast<void **>(stacks + size_t(i + 1) * kStack);
#if defined(__x86_64__)
	*--sp = nullptr; // a caller's return address: rsp is 8 past a multiple of 16 on entry
	*--sp = reinterpret_cast<void *>(&trampoline);
	for (int r = 0; r < 6; r++) *--sp = nullptr; // rbp, rbx, r12-r15
#else
	sp -= 20;
	for (int r = 0; r < 20; r++) sp[r] = nullptr;
	sp[11] = reinterpret_cast<void *>(&trampoline); // x30
#endif
	return sp;
}

// The pass over the ready threads in progress (run_threadgroup): the
// threads in the order's sequence, the position of the next one to consider,
// whether any ran or was left out, and how many threads have returned.
static std::vector<uint32_t> perm;
static int pass_at;
static bool pass_ran, pass_skipped;
static int done;

// next_in_pass returns the pass's next ready thread, made cur and running,
// or nullptr when the pass is over. The random order leaves each ready
// thread out with probability 1/2 (run_threadgroup says why).
static Thread *next_in_pass() {
	while (pass_at < int(perm.size())) {
		Thread &t = threads[perm[pass_at++]];
		if (t.state != kReady) continue;
		if (order.kind == kRandom && (next_random() & 1) != 0) {
			pass_skipped = true;
			continue;
		}
		pass_ran = true;
		t.state = kRunning;
		cur = &t;
		return &t;
	}
	cur = nullptr;
	return nullptr;
}

// switch_to leaves the stack whose pointer save keeps for t's fiber
// (started on first use), or for the scheduler's when t is nullptr.
static void switch_to(void **save, Thread *t) {
	if (t == nullptr) {
		switch_stack(save, sched_sp);
		return;
	}
	int i = int(t->tiitg);
	if (!started[i]) {
		started[i] = 1;
		fiber_sp[i] = new_fiber(i);
	}
	switch_stack(save, fiber_sp[i]);
}

// yield stops the current fiber, waiting or returned, and goes straight on
// to the next thread of the pass, or back to the scheduler at its end,
// rather than through the scheduler every time: one switch, not two. It
// comes back when a pass reaches this thread ready again.
static void yield() {
	Thread *t = cur;
	if (t->state == kRunning) t->state = kBlockedSimd;
	if (t->state == kDone) done++;
	switch_to(&fiber_sp[t->tiitg], next_in_pass());
}

void block() { yield(); }

void release(Thread *t) { t->state = kReady; }

void complete(Simdgroup *g) {
	g->op(g);
	for (int l = 0; l < kSimdWidth; l++) {
		if (!g->present[l]) continue;
		g->present[l] = false;
		Thread *t = thread_at(g->first + l);
		if (t != cur) release(t);
	}
	g->arrived = 0;
	g->op = nullptr;
}

void threadgroup_barrier() {
	Thread *t = cur;
	Threadgroup *tg = t->tg;
	if (tg->active != tg->threads) {
		fail("threadgroup_barrier reached after %d of %d threads returned", tg->threads - tg->active, tg->threads);
	}
	if (t->sg->arrived > 0) {
		fail("threadgroup_barrier while other lanes of simdgroup %d wait in %s", t->sg->index, t->sg->what);
	}
	tg->arrived++;
	if (tg->arrived == tg->active) {
		tg->arrived = 0;
		for (auto &o : threads)
			if (o.state == kBlockedBarrier) o.state = kReady;
		return;
	}
	t->state = kBlockedBarrier;
	block();
}

static void finish(Thread *t) {
	t->state = kDone;
	Simdgroup *g = t->sg;
	g->active--;
	t->tg->active--;
	if (t->tg->arrived > 0) {
		fail("returned while %d threads wait at threadgroup_barrier", t->tg->arrived);
	}
	if (g->arrived > 0 && g->arrived == g->active) complete(g);
}

static void trampoline() {
	for (;;) {
		entry();
		finish(cur);
		yield();
	}
}

static void run_threadgroup(Dim3 tgpig, Dim3 ntgpg, Dim3 ntptg) {
	int n = int(ntptg.x * ntptg.y * ntptg.z);
	int nsg = (n + kSimdWidth - 1) / kSimdWidth;
	group = Threadgroup{n, n, 0};
	for (int s = 0; s < nsg; s++) {
		Simdgroup *g = simdgroups[s];
		memset(g->present, 0, sizeof g->present);
		g->index = s;
		g->first = s * kSimdWidth;
		g->lanes = n - g->first < kSimdWidth ? n - g->first : kSimdWidth;
		g->active = g->lanes;
		g->arrived = 0;
		g->op = nullptr;
		g->what = "";
	}
	for (int i = 0; i < n; i++) {
		Thread &t = threads[i];
		t.tpitg = {uint32_t(i) % ntptg.x, (uint32_t(i) / ntptg.x) % ntptg.y, uint32_t(i) / (ntptg.x * ntptg.y)};
		t.tgpig = tgpig;
		t.ntptg = ntptg;
		t.ntgpg = ntgpg;
		t.ntpg = {ntgpg.x * ntptg.x, ntgpg.y * ntptg.y, ntgpg.z * ntptg.z};
		t.tpig = {tgpig.x * ntptg.x + t.tpitg.x, tgpig.y * ntptg.y + t.tpitg.y, tgpig.z * ntptg.z + t.tpitg.z};
		t.tiitg = uint32_t(i);
		t.lane = uint32_t(i % kSimdWidth);
		t.sgitg = uint32_t(i / kSimdWidth);
		t.nsg = uint32_t(nsg);
		t.sg = simdgroups[i / kSimdWidth];
		t.tg = &group;
		t.state = kReady;
	}
	// Threadgroup memory starts as NaN bytes, so reading it before writing shows.
	for (int i = 0; i < 8; i++)
		if (launch->tgmem[i] != nullptr) memset(launch->tgmem[i], 0xff, launch->tgsizes[i]);

	// Each pass over the ready threads goes in the order's sequence. The
	// random order shuffles every pass and leaves each ready thread out of
	// it with probability 1/2, so that a thread may fall several passes
	// behind the others, as a stalled simdgroup does on the GPU: without
	// that, every thread released by a barrier would take its first step
	// before any other took its second, whatever the order.
	done = 0;
	while (done < n) {
		arrange(perm, uint32_t(n));
		pass_at = 0;
		pass_ran = pass_skipped = false;
		if (Thread *t = next_in_pass()) switch_to(&sched_sp, t); // back at the pass's end
		if (!pass_ran && !pass_skipped && done < n) {
			cur = nullptr;
			std::string why;
			for (auto *g : simdgroups) {
				if (g->index >= nsg) break;
				if (g->arrived > 0) {
					why += " simdgroup " + std::to_string(g->index) + ": " + std::to_string(g->arrived) + " of " +
					       std::to_string(g->active) + " active lanes wait in " + g->what + ";";
				}
			}
			if (group.arrived > 0) {
				why += " " + std::to_string(group.arrived) + " of " + std::to_string(group.active) +
				       " threads wait at threadgroup_barrier;";
			}
			fail("deadlock in threadgroup (%u,%u,%u):%s", tgpig.x, tgpig.y, tgpig.z, why.c_str());
		}
	}
	cur = nullptr;
}

// Device buffers sit between two inaccessible pages, ending 16-byte aligned
// right before the second, so that reading or writing past either end faults.
struct Guarded {
	unsigned char *base;
	size_t maplen;
	unsigned char *data;
	size_t size, slack;
};

static std::vector<Guarded> guarded;

static Guarded make_guarded(size_t size) {
	size_t page = size_t(sysconf(_SC_PAGESIZE));
	size_t padded = (size + 15) & ~size_t(15);
	size_t body = (padded + page - 1) / page * page;
	size_t maplen = body + 2 * page;
	void *m = mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) fail("mmap of %zu bytes failed", maplen);
	unsigned char *base = static_cast<unsigned char *>(m);
	mprotect(base, page, PROT_NONE);
	mprotect(base + page + body, page, PROT_NONE);
	unsigned char *data = base + page + body - padded;
	memset(data + size, 0xff, padded - size);
	return Guarded{base, maplen, data, size, padded - size};
}

static void on_fault(int sig, siginfo_t *si, void *) {
	char msg[256];
	int n = 0;
	unsigned char *a = static_cast<unsigned char *>(si->si_addr);
	const char *what = "an unknown address";
	int idx = -1;
	for (size_t i = 0; i < guarded.size(); i++) {
		if (guarded[i].base == nullptr) continue;
		if (a >= guarded[i].base && a < guarded[i].base + guarded[i].maplen) {
			idx = int(i);
			what = a < guarded[i].data ? "before the start of" : "past the end of";
		}
	}
	if (idx >= 0) {
		n = snprintf(msg, sizeof msg, "emu: %s: memory fault (signal %d) %s buffer(%d) at byte offset %ld\n",
		             kernel_name, sig, what, idx, long(a - guarded[idx].data));
	} else {
		n = snprintf(msg, sizeof msg, "emu: %s: memory fault (signal %d) at %p (%s)\n", kernel_name, sig,
		             si->si_addr, what);
	}
	if (n > 0) {
		ssize_t w = write(2, msg, size_t(n));
		(void)w;
	}
	_exit(3);
}

static void read_full(void *p, size_t n) {
	if (n > 0 && fread(p, 1, n, stdin) != n) fail("short request on stdin");
}
static uint32_t read_u32() {
	uint32_t v;
	read_full(&v, 4);
	return v;
}
static uint64_t read_u64() {
	uint64_t v;
	read_full(&v, 8);
	return v;
}

} // namespace emu

int main(int argc, char **argv) {
	using namespace emu;
	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		for (int i = 0; i < emu_nentries; i++) printf("%s\n", emu_entries[i].name);
		return 0;
	}
	char magic[4];
	read_full(magic, 4);
	if (memcmp(magic, "EMU2", 4) != 0) fail("bad request magic");
	std::string name(read_u32(), '\0');
	read_full(name.data(), name.size());
	kernel_name = strdup(name.c_str());
	for (int i = 0; i < emu_nentries; i++)
		if (name == emu_entries[i].name) entry = emu_entries[i].run;
	if (entry == nullptr) fail("no kernel named %s in this library", name.c_str());
	Dim3 grid{read_u32(), read_u32(), read_u32()};
	Dim3 tg{read_u32(), read_u32(), read_u32()};
	uint64_t nthreads = uint64_t(tg.x) * tg.y * tg.z;
	if (nthreads == 0 || nthreads > 1024) fail("threadgroup of %llu threads (1..1024)", (unsigned long long)nthreads);

	static Launch l;
	launch = &l;
	guarded.resize(32);
	uint32_t nbuf = read_u32();
	std::vector<uint32_t> bound; // buffer indices in request order
	for (uint32_t i = 0; i < nbuf; i++) {
		uint32_t idx = read_u32();
		uint64_t size = read_u64();
		if (idx >= 32) fail("buffer index %u out of range", idx);
		if (l.buffers[idx] != nullptr) fail("buffer(%u) bound twice", idx);
		Guarded g = make_guarded(size);
		read_full(g.data, size);
		guarded[idx] = g;
		l.buffers[idx] = g.data;
		l.sizes[idx] = size;
		bound.push_back(idx);
	}
	uint32_t ntg = read_u32();
	size_t tgtotal = 0;
	for (uint32_t i = 0; i < ntg; i++) {
		uint32_t idx = read_u32();
		uint64_t size = read_u64();
		if (idx >= 8) fail("threadgroup memory index %u out of range", idx);
		if (size % 16 != 0) fail("threadgroup(%u) memory length %llu is not a multiple of 16", idx, (unsigned long long)size);
		tgtotal += size;
		l.tgmem[idx] = static_cast<unsigned char *>(aligned_alloc(16, size > 0 ? size : 16));
		l.tgsizes[idx] = size;
	}
	if (tgtotal > 32768) fail("%zu bytes of threadgroup memory (Apple GPUs allow 32768)", tgtotal);
	std::vector<Order> orders(read_u32());
	if (orders.empty()) fail("no thread order");
	for (auto &o : orders) {
		o.kind = read_u32();
		o.seed = read_u64();
		if (o.kind > kRandom) fail("unknown thread order %u", o.kind);
	}

	stack_t ss;
	ss.ss_sp = malloc(1 << 16);
	ss.ss_size = 1 << 16;
	ss.ss_flags = 0;
	sigaltstack(&ss, nullptr);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigaction(SIGSEGV, &sa, nullptr);
	sigaction(SIGBUS, &sa, nullptr);

	threads.resize(nthreads);
	fiber_sp.resize(nthreads);
	started.assign(nthreads, false);
	int nsg = int((nthreads + kSimdWidth - 1) / kSimdWidth);
	for (int s = 0; s < nsg; s++) simdgroups.push_back(new Simdgroup());
	stacks = static_cast<unsigned char *>(mmap(nullptr, kStack * nthreads, PROT_READ | PROT_WRITE,
	                                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
	if (stacks == MAP_FAILED) fail("cannot map fiber stacks");

	uint64_t ngroups = uint64_t(grid.x) * grid.y * grid.z;
	if (ngroups > (1u << 30)) fail("grid of %llu threadgroups", (unsigned long long)ngroups);
	// The request's buffers, to start every order from, and the first
	// order's results, to compare the others with.
	std::vector<std::vector<unsigned char>> initial, first;
	for (uint32_t idx : bound) initial.emplace_back(guarded[idx].data, guarded[idx].data + guarded[idx].size);
	std::vector<uint32_t> groups;
	for (size_t o = 0; o < orders.size(); o++) {
		order = orders[o];
		rng = order.seed;
		for (size_t b = 0; b < bound.size(); b++) memcpy(guarded[bound[b]].data, initial[b].data(), initial[b].size());
		arrange(groups, uint32_t(ngroups));
		for (uint32_t gi : groups) {
			Dim3 at{gi % grid.x, (gi / grid.x) % grid.y, gi / (grid.x * grid.y)};
			run_threadgroup(at, grid, tg);
		}
		for (size_t b = 0; b < bound.size(); b++) {
			uint32_t idx = bound[b];
			Guarded &g = guarded[idx];
			for (size_t i = 0; i < g.slack; i++)
				if (g.data[g.size + i] != 0xff) fail("kernel wrote past the end of buffer(%u) (byte %zu)", idx, g.size + i);
			if (o == 0) {
				first.emplace_back(g.data, g.data + g.size);
				continue;
			}
			for (size_t i = 0; i < g.size; i++) {
				if (g.data[i] != first[b][i]) {
					fail("results differ between thread orders (a race: a missing threadgroup_barrier?): "
					     "buffer(%u) byte %zu is 0x%02x in %s order, 0x%02x in %s order",
					     idx, i, g.data[i], order_name(order).c_str(), first[b][i], order_name(orders[0]).c_str());
				}
			}
		}
	}
	for (size_t b = 0; b < bound.size(); b++) {
		if (!first[b].empty() && fwrite(first[b].data(), 1, first[b].size(), stdout) != first[b].size())
			fail("short write of buffer(%u)", bound[b]);
	}
	fflush(stdout);
	return 0;
}
