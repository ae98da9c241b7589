// chains.metal: the greedy ReDrafter step's integer work on the device
// (graph's BeamChainsOp and AcceptChainsOp), over W beams of length L in the
// chains layout: token 0 is the root, beam i's draft at depth t (1..L-1) is
// token 1+i·(L-1)+t-1.
// chains_beam: one thread per token. Grid: (ceil(N/256)); threadgroup: 256.
// chains_accept: one threadgroup of CHAINS_THREADS; each thread measures the
// beams i ≡ its index (mod the threads), then thread 0 takes the first
// longest and writes the result.
#include "common.h"

// out = tree with each beam i's chain replaced by the chain of the beam it
// extends (sel[0,i]; one outside [0, W) keeps its own) and its token at
// args.depth set to sel[1,i].
template <typename T>
kernel void chains_beam(
		constant ChainsArgs &args [[buffer(0)]],
		device const T *tree [[buffer(1)]],
		device const T *sel [[buffer(2)]],
		device T *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const int j = int(tpig.x);
	if (j >= args.N) {
		return;
	}
	if (j == 0) {
		out[0] = tree[0];
		return;
	}
	const int c = args.L - 1;
	const int i = (j - 1) / c;
	const int t = j - 1 - i * c + 1;
	if (t == args.depth) {
		out[j] = sel[args.W + i];
		return;
	}
	int src = int(sel[i]);
	if (src < 0 || src >= args.W) {
		src = i;
	}
	out[j] = tree[1 + src * c + t - 1];
}

// Beam i's accepted length is how many of its drafts agree with the argmax
// before them (the root's for the first); the chosen beam is the first with
// the longest. out [3, L]: the path's rows, the emitted tokens (then -1),
// and [last row, n, 0...].
template <typename T>
kernel void chains_accept(
		constant ChainsArgs &args [[buffer(0)]],
		device const T *tokens [[buffer(1)]],
		device const T *argmax [[buffer(2)]],
		device T *out [[buffer(3)]],
		threadgroup int *shmem [[threadgroup(0)]],
		uint3 ntptg [[threads_per_threadgroup]],
		uint tiitg [[thread_index_in_threadgroup]]) {
	const int c = args.L - 1;
	const int nt = int(ntptg.x);
	int bn = -1;
	int bb = 0;
	for (int i = int(tiitg); i < args.W; i += nt) {
		int k = 0;
		int prev = 0; // the row of the beam's token at depth k
		while (k < c && int(tokens[1 + i * c + k]) == int(argmax[prev])) {
			prev = 1 + i * c + k;
			k++;
		}
		if (k > bn) { // a later beam of this thread wins only when longer
			bn = k;
			bb = i;
		}
	}
	shmem[tiitg] = bn;
	shmem[nt + int(tiitg)] = bb;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (tiitg != 0) {
		return;
	}
	int n = -1;
	int b = 0;
	for (int s = 0; s < nt; s++) {
		const int sn = shmem[s];
		const int sb = shmem[nt + s];
		if (sn > n || (sn == n && sb < b)) {
			n = sn;
			b = sb;
		}
	}
	const int L = args.L;
	for (int t = 0; t < L; t++) {
		out[t] = T(t == 0 ? 0 : 1 + b * c + t - 1);
		out[L + t] = T(t < n ? int(tokens[1 + b * c + t]) : -1);
		out[2 * L + t] = T(0);
	}
	const int last = n == 0 ? 0 : 1 + b * c + n - 1;
	out[L + n] = argmax[last];
	out[2 * L] = T(last);
	out[2 * L + 1] = T(n);
}

instantiate_kernel("chains_beam_i32", chains_beam, int)
instantiate_kernel("chains_accept_i32", chains_accept, int)
