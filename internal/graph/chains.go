package graph

import "fmt"

// The ops of a ReDrafter step run as one plan on a device (greedy): the
// beams of the search are laid out as the tokens of a verification batch of
// W chains (BeamChains, after each draft), and after verification the
// longest agreed chain is chosen there too (AcceptChains), so the host reads
// back only the accepted tokens.
//
// The chains layout of W beams of length L (the init token and L-1 drafts):
// N = 1+W·(L-1) tokens; token 0 is the root, the init token every beam
// starts with, and beam i's draft at depth t (1..L-1) is token
// 1+i·(L-1)+t-1. As a tree in DFS pre-order every beam is its own branch
// (no shared prefixes are merged), so N is fixed by W and L and a plan
// compiled once serves every step: depth 0 and end N-1 for the root, depth
// t and end 1+i·(L-1)+L-2 for beam i's tokens.

// BeamChainsOp (built by BeamChains) writes one draft of a beam search into
// the chains layout (see above): each beam i takes the chain of the beam it
// extends, src = sel[0,i], and its new token sel[1,i] at depth Depth:
//
//	out[0] = tree[0]
//	out[1+i·(L-1)+t-1] = sel[1,i]                   if t == Depth
//	                   = tree[1+src·(L-1)+t-1]      otherwise
//
// A src outside [0, W) (BeamTopOp leaves rows undefined when its scores
// are NaN) keeps beam i's own chain, so no index leaves the array.
// Sources: tree [N] i32 with N = 1+W·(L-1), sel [3,W] i32 (a BeamTopOp
// result: row, token, score bits). Result [N] i32.
// PyTorch: c = tree[1:].view(W, L-1)[sel[0]]; c[:, Depth-1] = sel[1];
// out = torch.cat([tree[:1], c.flatten()]).
type BeamChainsOp struct{ Depth int }

// AcceptChainsOp (built by AcceptChains) is greedy acceptance over W beams
// in the chains layout (see above), given argmax[k], the model's greedy
// token after token k's prefix. Beam i's accepted length is the largest
// n_i ≤ L-1 with tokens[row(i,t)] == argmax[row(i,t-1)] for t = 1..n_i,
// where row(i,0) = 0 (the root) and row(i,t) = 1+i·(L-1)+t-1; the chosen
// beam b is the lowest i with the largest n_i, and n = n_b. (Every beam
// with the largest n_i holds the same accepted tokens, so any would emit
// the same; see drafter.AcceptGreedy.)
// Sources: tokens [N] i32, argmax [N] i32, N = 1+Width·(L-1).
// Result [3,L] i32:
//
//	row 0: 0, row(b,1), ..., row(b,L-1): the accepted path first (its first
//	       n+1 entries), as the idx of KVCompactOp;
//	row 1: tokens[row(b,1..n)], then argmax[row(b,n)] (the verifier's
//	       token after the path), then -1: the n+1 emitted tokens;
//	row 2: row(b,n) (the path's last token, whose hidden state drafts
//	       the next step), then n, then 0.
//
// PyTorch: ok = tokens[1:].view(W,L-1) == prev, where prev = argmax at
// the root and each chain's tokens before the last; n_i = ok.int().cumprod(1).sum(1);
// b = n_i.argmax() (the first maximum).
type AcceptChainsOp struct{ Width int }

func (BeamChainsOp) isOp()   {}
func (AcceptChainsOp) isOp() {}

func (o BeamChainsOp) String() string   { return fmt.Sprintf("BeamChains{depth=%d}", o.Depth) }
func (o AcceptChainsOp) String() string { return fmt.Sprintf("AcceptChains{width=%d}", o.Width) }

// ChainsLength is the beam length L of W chains in n tokens (n = 1+W·(L-1)),
// or 0 when n is not such a size.
func ChainsLength(n, w int) int {
	if w < 1 || n < 1+w || (n-1)%w != 0 {
		return 0
	}
	return 1 + (n-1)/w
}

// BeamChains writes draft depth of a beam search, the selection sel [3,W]
// of BeamTop, into tree [N], the chains layout; see BeamChainsOp.
func BeamChains(tree, sel *Array, depth int) *Array {
	mustf(len(tree.shape) == 1 && tree.dtype == I32, "BeamChains: tree %v", tree)
	mustf(len(sel.shape) == 2 && sel.shape[0] == 3 && sel.dtype == I32, "BeamChains: sel %v", sel)
	l := ChainsLength(tree.shape[0], sel.shape[1])
	mustf(l >= 2 && depth >= 1 && depth < l, "BeamChains{depth=%d}: tree %v for %d beams", depth, tree, sel.shape[1])
	return node(BeamChainsOp{Depth: depth}, I32, tree.shape, tree, sel)
}

// AcceptChains chooses the longest chain of tokens [N] (w beams in the
// chains layout) that agrees with argmax [N]; see AcceptChainsOp.
func AcceptChains(tokens, argmax *Array, w int) *Array {
	mustf(len(tokens.shape) == 1 && tokens.dtype == I32, "AcceptChains: tokens %v", tokens)
	mustf(argmax.shape.Equal(tokens.shape) && argmax.dtype == I32, "AcceptChains: argmax %v for tokens %v", argmax, tokens)
	l := ChainsLength(tokens.shape[0], w)
	mustf(l >= 2, "AcceptChains{width=%d}: tokens %v", w, tokens)
	return node(AcceptChainsOp{Width: w}, I32, Shape{3, l}, tokens, argmax)
}
