package drafter

import (
	"fmt"
	"slices"
)

// Tree is a set of W draft beams of length L, sorted, with shared prefixes
// merged, packed into N ≤ 1+W·(L-1) tokens for one verification pass.
//
// The packed tokens are in DFS pre-order (the beams are sorted
// lexicographically, so Apple's beam-major packing of novel tokens is a
// pre-order): a node's subtree is the contiguous range [k, End[k]]. This is
// the tree description of graph.AttentionOp: new query q sees new key k iff
// k <= q <= End[k], and its position is pastLen + Depth[q].
//
// A node is a distinct prefix of the beams; node 0 is the root, the init
// token every beam starts with. Children of a node appear in increasing
// token order.
type Tree struct {
	Tokens   []int32   // [N] token of each packed node
	Depth    []int32   // [N] depth in the beams (root 0); position offset
	End      []int32   // [N] last packed index of the node's subtree (inclusive)
	Parent   []int32   // [N] parent node, -1 for the root
	BeamOf   []int32   // [N] first sorted beam through the node
	Unpacker [][]int32 // [W][L] packed index of sorted beam i's token at depth t
	Beams    [][]int32 // [W][L] the beams in sorted order
	Order    []int     // [W] Order[i] = index in the caller's beams of sorted beam i
}

// N is the number of packed tokens.
func (t *Tree) N() int { return len(t.Tokens) }

// Width is the number of beams W.
func (t *Tree) Width() int { return len(t.Beams) }

// Length is the beam length L, counting the init token.
func (t *Tree) Length() int { return len(t.Beams[0]) }

// Path returns the packed indices of sorted beam's first n+1 tokens (the
// init token and n drafts), root first. It aliases t.Unpacker. After
// acceptance this is the idx of graph.KVCompact, and its last entry is the
// node whose logits and hidden state feed the next step.
func (t *Tree) Path(beam, n int) []int32 { return t.Unpacker[beam][:n+1] }

// PathTo returns the packed indices from the root to node u (see Path).
func (t *Tree) PathTo(u int) []int32 { return t.Path(int(t.BeamOf[u]), int(t.Depth[u])) }

// Positions appends pastLen+Depth[k] for every packed node to dst: the
// RoPE positions of the verification pass.
func (t *Tree) Positions(dst []int32, pastLen int) []int32 {
	for _, d := range t.Depth {
		dst = append(dst, int32(pastLen)+d)
	}
	return dst
}

// Visible reports whether packed query q attends to packed key k: k is q or
// one of its ancestors.
func (t *Tree) Visible(q, k int) bool { return k <= q && q <= int(t.End[k]) }

// BuildTree sorts, merges and packs beams (see Tree). Every beam must have
// the same length L ≥ 1 and start with the same init token. beams is not
// modified or retained.
func BuildTree(beams [][]int32) (*Tree, error) {
	var b TreeBuilder
	return b.Build(beams)
}

// TreeBuilder builds Trees reusing its storage: after the first few steps a
// decode loop builds its tree without allocating. The zero value is ready to
// use; a TreeBuilder is not safe for concurrent use.
type TreeBuilder struct {
	tree          Tree
	unpack, beams []int32 // [W·L] backing of tree.Unpacker and tree.Beams
}

// Build is BuildTree with reused storage. The returned Tree, and everything
// it holds, belongs to b and is overwritten by the next Build.
func (b *TreeBuilder) Build(beams [][]int32) (*Tree, error) {
	w := len(beams)
	if w == 0 {
		return nil, fmt.Errorf("drafter: tree of no beams")
	}
	l := len(beams[0])
	if l == 0 {
		return nil, fmt.Errorf("drafter: beam 0 is empty")
	}
	for i, beam := range beams {
		if len(beam) != l {
			return nil, fmt.Errorf("drafter: beam %d has length %d, beam 0 has %d", i, len(beam), l)
		}
		if beam[0] != beams[0][0] {
			return nil, fmt.Errorf("drafter: beam %d starts with token %d, beam 0 with %d", i, beam[0], beams[0][0])
		}
	}
	t := &b.tree

	t.Order = t.Order[:0]
	for i := range w {
		t.Order = append(t.Order, i)
	}
	// Stable: equal beams keep their order (pdqsort with the index as the
	// last key is stable and faster than SortStableFunc's merges).
	slices.SortFunc(t.Order, func(i, j int) int {
		if c := slices.Compare(beams[i], beams[j]); c != 0 {
			return c
		}
		return i - j
	})

	b.beams = resize(b.beams, w*l)
	b.unpack = resize(b.unpack, w*l)
	t.Beams = rows(t.Beams, b.beams, w, l)
	t.Unpacker = rows(t.Unpacker, b.unpack, w, l)
	n := 1 + w*(l-1)
	t.Tokens, t.Depth, t.Parent, t.BeamOf = t.Tokens[:0], t.Depth[:0], t.Parent[:0], t.BeamOf[:0]
	t.Tokens = slices.Grow(t.Tokens, n)
	t.Depth = slices.Grow(t.Depth, n)
	t.Parent = slices.Grow(t.Parent, n)
	t.BeamOf = slices.Grow(t.BeamOf, n)

	// In sorted order, the longest prefix beam i shares with any earlier beam
	// is the one it shares with beam i-1. Those tokens are already packed;
	// the rest are novel and are packed in order, which after sorting is a
	// DFS pre-order.
	for i, o := range t.Order {
		beam, unp := t.Beams[i], t.Unpacker[i]
		copy(beam, beams[o])
		shared := 0
		if i > 0 {
			prev := t.Beams[i-1]
			for shared < l && beam[shared] == prev[shared] {
				shared++
			}
			copy(unp[:shared], t.Unpacker[i-1][:shared])
		}
		for d := shared; d < l; d++ {
			parent := int32(-1)
			if d > 0 {
				parent = unp[d-1]
			}
			unp[d] = int32(len(t.Tokens))
			t.Tokens = append(t.Tokens, beam[d])
			t.Depth = append(t.Depth, int32(d))
			t.Parent = append(t.Parent, parent)
			t.BeamOf = append(t.BeamOf, int32(i))
		}
	}

	// A subtree ends where its last child's subtree ends; children follow
	// their parent, so one backward pass suffices.
	t.End = resize(t.End, len(t.Tokens))
	for k := range t.End {
		t.End[k] = int32(k)
	}
	for k := len(t.End) - 1; k > 0; k-- {
		p := t.Parent[k]
		t.End[p] = max(t.End[p], t.End[k])
	}
	return t, nil
}

func resize(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// rows reslices backing [w·l] into w rows of length l, reusing dst's headers.
func rows(dst [][]int32, backing []int32, w, l int) [][]int32 {
	if cap(dst) < w {
		dst = make([][]int32, w)
	}
	dst = dst[:w]
	for i := range dst {
		dst[i] = backing[i*l : (i+1)*l : (i+1)*l]
	}
	return dst
}

// children iterates over u's children in packed (= token) order:
//
//	for c := t.firstChild(u); c >= 0; c = t.nextSibling(u, c)
func (t *Tree) firstChild(u int) int {
	if u+1 <= int(t.End[u]) {
		return u + 1
	}
	return -1
}

func (t *Tree) nextSibling(u, c int) int {
	if n := int(t.End[c]) + 1; n <= int(t.End[u]) {
		return n
	}
	return -1
}
