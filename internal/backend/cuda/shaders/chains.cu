// chains.cu: the greedy ReDrafter step's integer work on the device
// (graph's BeamChainsOp and AcceptChainsOp), over w beams of length l in the
// chains layout: token 0 is the root, beam i's draft at depth t (1..l-1) is
// token 1+i·(l-1)+t-1, n = 1+w·(l-1) tokens.
// beam_chains_i32: one thread per token. Grid: (ceil(n/256)); block: 256.
// accept_chains_i32: one warp (grid (1), block 32): lane j measures the
// beams i ≡ j (mod 32), a butterfly finds the first longest, and the lanes
// write the result.
#include "prelude.cuh"

// out = tree with each beam i's chain replaced by the chain of the beam it
// extends (sel[0,i]; one outside [0, w) keeps its own) and its token at
// depth set to sel[1,i].
KERNEL void beam_chains_i32(int *out, const int *tree, const int *sel, int w, int l, int depth) {
	const int c = l - 1;
	const int n = 1 + w * c;
	const int j = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
	if (j >= n) return;
	if (j == 0) {
		out[0] = tree[0];
		return;
	}
	const int i = (j - 1) / c;
	const int t = j - i * c; // 1..c
	if (t == depth) {
		out[j] = sel[w + i];
		return;
	}
	int src = sel[i];
	if (src < 0 || src >= w) src = i;
	out[j] = tree[1 + src * c + t - 1];
}

// Beam i's accepted length is how many of its drafts agree with the argmax
// before them (the root's for the first); the chosen beam is the first with
// the longest. out [3, l]: the path's rows, the emitted tokens (then -1),
// and [last row, n, 0...].
KERNEL void accept_chains_i32(int *out, const int *tokens, const int *argmax, int w, int l) {
	const int c = l - 1;
	const int lane = int(threadIdx.x) & 31;
	int bn = -1, bb = 0;
	for (int i = lane; i < w; i += 32) {
		int k = 0, prev = 0; // prev: the row of the beam's token at depth k
		while (k < c && tokens[1 + i * c + k] == argmax[prev]) {
			prev = 1 + i * c + k;
			k++;
		}
		if (k > bn) { // a later beam of this lane wins only when longer
			bn = k;
			bb = i;
		}
	}
	for (int m = 16; m > 0; m >>= 1) {
		const int on = shfl_xor(bn, m), ob = shfl_xor(bb, m);
		if (on > bn || (on == bn && ob < bb)) {
			bn = on;
			bb = ob;
		}
	}
	const int last = bn == 0 ? 0 : 1 + bb * c + bn - 1;
	for (int t = lane; t < l; t += 32) {
		out[t] = t == 0 ? 0 : 1 + bb * c + t - 1;
		out[l + t] = t < bn ? tokens[1 + bb * c + t] : t == bn ? argmax[last] : -1;
		out[2 * l + t] = t == 0 ? last : t == 1 ? bn : 0;
	}
}
