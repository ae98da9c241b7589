package drafter

import (
	"fmt"
	"math/rand/v2"

	"github.com/seed9b8f47b1/redrafter/internal/sample"
)

// AcceptGreedy returns the longest path of drafts that greedy decoding would
// have produced, given argmax[k], the LLM's argmax after packed node k's
// prefix ([N]).
//
// Starting at the root (the init token, already decided), it moves to the
// child whose token equals the argmax at the current node for as long as
// there is one. The result is the sorted beam index and the number n of
// accepted drafts (depths 1..n, 0 ≤ n ≤ L-1): the step emits the drafts
// t.Beams[beam][1:n+1] and then argmax[t.Unpacker[beam][n]], the next init
// token.
//
// This equals the reference rule (n_i = longest prefix of beams[i][1:] equal
// to the LLM's argmax along beam i; i* = the first beam with the largest
// n_i): every beam with the largest n_i passes through the same node, so the
// emitted tokens, the next token and the hidden state are the same whichever
// of them is chosen. This function returns the first sorted beam through it.
func AcceptGreedy(t *Tree, argmax []int32) (beam int, n int) {
	if len(argmax) != t.N() {
		panic(fmt.Sprintf("drafter: AcceptGreedy: %d argmax for %d packed tokens", len(argmax), t.N()))
	}
	u := 0
walk:
	for {
		for c := t.firstChild(u); c >= 0; c = t.nextSibling(u, c) {
			if t.Tokens[c] == argmax[u] {
				u = c
				continue walk
			}
		}
		break
	}
	return int(t.BeamOf[u]), int(t.Depth[u])
}

// AcceptSample is exact speculative sampling over the tree: the emitted
// tokens are distributed exactly as sampling token by token from the target
// distributions.
//
// probs(u) is the target distribution p(·|u) after packed node u's prefix,
// [V], with temperature, top-k and top-p already applied (sample.Probs); it
// need not be normalised. It is called once for each node on the accepted
// path, and its result is only read until the next call, so it may reuse one
// buffer; it is never written to. scratch (len >= V, or nil) holds the
// residual distribution after a rejection; with a big enough scratch
// AcceptSample does not allocate.
//
// It returns the accepted path of packed nodes (the root, then one node per
// accepted draft; it aliases t.Unpacker and is the idx of graph.KVCompact)
// and next, the token sampled after the last node on it.
//
// The rule treats the drafts as deterministic proposals (they come from beam
// search, not from sampling the drafter). At node u with residual p' = p(·|u),
// try u's distinct children x1, x2, … in order: accept x with probability
// p'(x)/Σp'; if rejected, set p'(x) = 0 and try the next child. Accepting
// moves to the child and starts again with its own fresh p. If every child
// is rejected, or u is a leaf, next is drawn from p' (∝ p with the rejected
// children removed).
//
// Proof of exactness. Fix node u, write p = p(·|u) and P_j = p(x1)+…+p(xj).
// x_j is accepted iff x1..x_{j-1} were rejected and then x_j accepted:
//
//	Π_{i<j} (1 - p(xi)/(1-P_{i-1})) · p(xj)/(1-P_{j-1})
//	  = Π_{i<j} (1-P_i)/(1-P_{i-1}) · p(xj)/(1-P_{j-1}) = p(xj),
//
// the product telescoping to 1-P_{j-1}. All children are rejected with
// probability 1-P_k, and then token y (not a child) is drawn with probability
// p(y)/(1-P_k): in total p(y). So the token emitted after u's prefix is
// distributed exactly as p(·|u), whatever the drafts were; and when it is a
// child, the process restarts at that child with the LLM's distribution for
// the longer prefix. By induction on depth, every emitted token is an exact
// sample of the target given all tokens before it. (Equivalently: drawing one
// y ~ p(·|u) and moving to the child with token y if there is one gives the
// same joint distribution. The per-child form is SpecInfer's multi-draft
// rejection sampling with one-hot proposals, EAGLE-2's rule, and the fix
// asked for in apple/ml-recurrent-drafter#6.)
func AcceptSample(t *Tree, probs func(node int) []float64, rng *rand.Rand, scratch []float64) (path []int32, next int32) {
	u := 0
	for {
		p := probs(u)
		c := t.firstChild(u)
		if c < 0 {
			return t.PathTo(u), sample.Draw(p, rng)
		}
		total := 0.0
		for _, v := range p {
			total += v
		}
		mass := total // Σ p' over the tokens not rejected yet
		residual, rejected := p, -1
		for ; c >= 0; c = t.nextSibling(u, c) {
			x := t.Tokens[c]
			px := residual[x]
			if px <= 0 {
				continue // rejected for sure; p' is unchanged
			}
			if rng.Float64()*mass < px {
				break
			}
			if rejected < 0 {
				if cap(scratch) < len(p) {
					scratch = make([]float64, len(p))
				}
				residual = scratch[:len(p)]
				copy(residual, p)
			}
			residual[x] = 0
			mass -= px
			rejected = c
		}
		if c >= 0 {
			u = c
			continue
		}
		if rejected >= 0 && mass <= 1e-9*total && !positive(residual) {
			// Only reachable by rounding: the children held all the mass
			// and the last one was still rejected. Accept it.
			u = rejected
			continue
		}
		return t.PathTo(u), sample.Draw(residual, rng)
	}
}

func positive(p []float64) bool {
	for _, v := range p {
		if v > 0 {
			return true
		}
	}
	return false
}

// AcceptApple is the reference implementation's sampling rule (ml-recurrent-
// drafter, _choose_from_candidates and _prepare_next_input), kept for parity
// tests and the --accept apple mode. It is NOT distribution-preserving: the
// beam-search drafts are deterministic, so the Leviathan ratio p/q is the
// wrong test (apple/ml-recurrent-drafter#6); a draft shared by k beams gets k
// chances; the residual ignores the other rejected siblings; and the
// reference's q is not temperature-scaled while p is.
//
// probs(u) is the target distribution after packed node u's prefix, as for
// AcceptSample (it may be called more than once per node). drafts(beam,
// depth) is the drafter's distribution q that proposed the token at depth
// (1..L-1) of beam, where beam indexes the caller's (unsorted) beams, as beam
// search returned them: the reference's log_q[beam, depth-1] exponentiated.
// scratch is as for AcceptSample; AcceptApple also allocates O(N+W).
//
// The rule: for every beam i and depth d, draw u_{i,d} uniform (beam-major
// over the caller's beam order, W·(L-1) draws) and accept the draft x iff
// u < p(x)/q(x); n_i is the number of leading acceptances; i* is the first
// beam (in the caller's order) with the largest n_i. If n* = L-1 the next
// token is drawn from p at the end of beam i*; otherwise from
// relu(p - q_{i*,n*+1}) at the rejection point, normalised (or from p if that
// is all zero, where the reference would fail). It returns the path and the
// next token as AcceptSample does.
func AcceptApple(t *Tree, probs func(node int) []float64, drafts func(beam, depth int) []float64, rng *rand.Rand, scratch []float64) (path []int32, next int32) {
	w, l := t.Width(), t.Length()
	// pd[c] = p(token c | parent's prefix), for every non-root node.
	pd := make([]float64, t.N())
	for u := range t.N() {
		c := t.firstChild(u)
		if c < 0 {
			continue
		}
		p := probs(u)
		for ; c >= 0; c = t.nextSibling(u, c) {
			pd[c] = p[t.Tokens[c]]
		}
	}
	sorted := make([]int, w) // caller's beam index → sorted index
	for i, o := range t.Order {
		sorted[o] = i
	}
	best, bestN := 0, -1
	for o := range w {
		i := sorted[o]
		n, ok := 0, true
		for d := 1; d < l; d++ {
			u := rng.Float64()
			if !ok {
				continue
			}
			x := t.Beams[i][d]
			if u < pd[t.Unpacker[i][d]]/drafts(o, d)[x] {
				n++
			} else {
				ok = false
			}
		}
		if n > bestN {
			best, bestN = o, n
		}
	}
	i := sorted[best]
	path = t.Path(i, bestN)
	end := int(path[bestN])
	p := probs(end)
	if bestN == l-1 {
		return path, sample.Draw(p, rng)
	}
	q := drafts(best, bestN+1)
	if cap(scratch) < len(p) {
		scratch = make([]float64, len(p))
	}
	r := scratch[:len(p)]
	for v := range r {
		r[v] = max(0, p[v]-q[v])
	}
	if !positive(r) {
		r = p
	}
	return path, sample.Draw(r, rng)
}
