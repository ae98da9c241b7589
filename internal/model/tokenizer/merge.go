package tokenizer

// The merge loop shared by both algorithms: symbols in a linked list, a
// priority queue of adjacent pairs that may merge, stale entries skipped when
// popped. O(n log n) in the number of initial symbols.

// symbol is a run of text[start:end] that is one token candidate.
type symbol struct {
	start, end int32 // byte range in the text being merged
	prev, next int32 // neighbours, -1 at the ends
	id         int32 // token id of the run, -1 if it is not a token
}

// candidate is a possible merge of symbol left with its right neighbour.
type candidate struct {
	prio  float64 // higher merges first
	left  int32   // symbol index; lower merges first on equal prio
	right int32
	size  int32 // byte length of the merged run, to spot stale entries
	id    int32 // token id of the merged run
}

// pairFunc reports whether a and b (adjacent, a first) may merge, with the
// merge's priority and the merged token's id.
type pairFunc func(a, b *symbol) (prio float64, id int32, ok bool)

// candHeap is a max-heap on (prio, -left).
type candHeap []candidate

func (h candHeap) less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio > h[j].prio
	}
	return h[i].left < h[j].left
}

func (h *candHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candHeap) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// mergeSymbols merges syms (initially a chain 0..n-1) in place. Afterwards
// the surviving symbols are reached from index 0 through next.
func mergeSymbols(syms []symbol, pair pairFunc, h *candHeap) {
	*h = (*h)[:0]
	add := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		a, b := &syms[l], &syms[r]
		if prio, id, ok := pair(a, b); ok {
			h.push(candidate{prio: prio, left: l, right: r, size: b.end - a.start, id: id})
		}
	}
	for i := 1; i < len(syms); i++ {
		add(int32(i-1), int32(i))
	}
	for len(*h) > 0 {
		c := h.pop()
		a, b := &syms[c.left], &syms[c.right]
		// Stale if either side has merged since: a removed symbol has
		// start = -1, and a grown one no longer spans size bytes.
		if a.start < 0 || b.start < 0 || a.next != c.right || b.end-a.start != c.size {
			continue
		}
		a.end = b.end
		a.id = c.id
		a.next = b.next
		if b.next >= 0 {
			syms[b.next].prev = c.left
		}
		b.start = -1
		add(a.prev, c.left)
		add(c.left, a.next)
	}
}
