package cpu

import (
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// attention is tree attention over a cache (see graph.AttentionOp). Keys are
// visited in cache order, so a token's output does not depend on how many
// other tokens share its forward pass.
func (b *Backend) attention(out graph.Operand, in []graph.Operand, op graph.AttentionOp) error {
	scale, window := op.Scale, op.Window
	q, k, v := f32(in[0]), cacheOf(in[1]), cacheOf(in[2])
	n, heads, d := in[0].Shape[0], in[0].Shape[1], in[0].Shape[2]
	kvh, c := in[1].Shape[0], in[1].Shape[1]
	past := int(i32(in[3])[0])
	end := i32(in[4])
	if past < 0 || past+n > c {
		return fmt.Errorf("cache of %d positions cannot hold %d+%d", c, past, n)
	}
	for j, e := range end {
		if int(e) < j || int(e) >= n {
			return fmt.Errorf("tree interval end[%d] = %d outside [%d,%d)", j, e, j, n)
		}
	}
	if b.reference {
		refAttention(f32(out), q, k, v, end, n, heads, kvh, c, d, past, scale, window, op.SoftCap)
	} else {
		b.attentionGroups(f32(out), q, k, v, end, n, heads, kvh, c, d, past, scale, window, op.SoftCap)
	}
	return nil
}

// softCap is cap·tanh(s/cap) (Gemma 2's soft-capping of attention scores
// and logits), the tanh in float64, rounded; s itself when cap is 0.
func softCap(s, cap float32) float32 {
	if cap <= 0 {
		return s
	}
	return cap * float32(math.Tanh(float64(s/cap)))
}

// kvCache is a K or V cache [KVH, C, D] stored as f32 or as f16.
type kvCache struct {
	f []float32
	h []uint16
}

func cacheOf(o graph.Operand) kvCache {
	if o.DType == graph.F16 {
		return kvCache{h: u16(o)}
	}
	return kvCache{f: f32(o)}
}

// at returns element i.
func (c kvCache) at(i int) float32 {
	if c.h != nil {
		return quant.F16ToF32(c.h[i])
	}
	return c.f[i]
}

// scores sets y[i*ldy+j] = x[i]·row(from+j) for the m rows of x (stride d)
// and the cache rows from..to-1 starting at element off (row stride ld).
func (c kvCache) scores(y []float32, ldy int, x []float32, m, d, off, ld, from, to int) {
	if c.h != nil {
		kernels.MatMulStridedF16(y, ldy, x, d, m, c.h[off+from*ld:], ld, to-from, d)
		return
	}
	kernels.MatMulStridedF32(y, ldy, x, d, m, c.f[off+from*ld:], ld, to-from, d)
}

// weigh adds p-weighted cache rows from..to-1 to the m rows of y (width d).
func (c kvCache) weigh(y []float32, m, d int, p []float32, ldp, off, ld, from, to int) {
	if c.h != nil {
		kernels.AxpyRowsF16(y, d, m, d, p, ldp, to-from, c.h[off+from*ld:], ld)
		return
	}
	kernels.AxpyRows(y, d, m, d, p, ldp, to-from, c.f[off+from*ld:], ld)
}

// refAttention is the reference: for each query and head, the scores of
// every key it sees, a softmax in float64 exponentials, and the weighted
// sum of the value rows, all in plain loops in cache order. With a window,
// it compares positions: cache row r is position r, new token j is
// position past + its depth in the tree. A soft-cap applies to the scaled
// score (softCap).
func refAttention(y, q []float32, k, v kvCache, end []int32, n, heads, kvh, c, d, past int, scale float32, window int, cap float32) {
	group := heads / kvh
	w := make([]float32, past+n)
	pos := make([]int, past+n)
	for r := range pos {
		pos[r] = r
		if r >= past {
			// The depth of new token j is its number of ancestors.
			pos[r] = past
			for a := range r - past {
				if int(end[a]) >= r-past {
					pos[r]++
				}
			}
		}
	}
	for t := range n * heads {
		qi, g := t/heads, t%heads/group
		qv := q[t*d : (t+1)*d]
		row := w[:past+qi+1]
		mx := float32(math.Inf(-1))
		for r := range row {
			// Cached rows, then the tree: new key j is seen iff it is an
			// ancestor, j <= qi <= end[j]; and, with a window, iff it is
			// less than window positions before the query.
			if r >= past && int(end[r-past]) < qi || window > 0 && pos[past+qi]-pos[r] >= window {
				row[r] = float32(math.Inf(-1))
				continue
			}
			var s float32
			for j, x := range qv {
				s += x * k.at((g*c+r)*d+j)
			}
			row[r] = softCap(s*scale, cap)
			mx = max(mx, row[r])
		}
		var sum float32
		for r, s := range row {
			row[r] = float32(math.Exp(float64(s - mx)))
			sum += row[r]
		}
		inv := 1 / sum
		yv := y[t*d : (t+1)*d]
		clear(yv)
		for r, p := range row {
			if p == 0 {
				continue
			}
			a := p * inv
			for j := range yv {
				yv[j] += a * v.at((g*c+r)*d+j)
			}
		}
	}
}

// attentionGroups is the fast path. A task is one KV head and a block of
// queries: the query heads that share the KV head, for enough queries to
// make 16 rows (two queries of eight heads), pre-scaled, score every cached
// key and every tree key up to the block's last query in one strided matrix
// product (its tiles reuse each key row across up to six rows); each row
// then keeps the scores of the keys it sees, packed: the prefix, then its
// visible tree keys in order. The softmax runs vectorised over them; then
// the value rows are summed into the outputs held in registers, each row
// loaded once for up to four heads (AxpyRows). Decoding (one query) makes
// one task per KV head; a verification pass of n tokens makes KVH·⌈n/p⌉
// tasks of p = ⌈16/group⌉ queries (one per query and KV head before, each
// scoring the cache on its own), or of fewer queries where that would
// leave workers idle, ordered KV head by KV head so that a worker's run of
// tasks rereads one head's cache rows from its own cache. How tasks split
// the work changes no result.
//
// A token's output must not depend on what else its pass holds: decoded
// alone after its accepted ancestors, it sees the same keys in the same
// order. So scores do not depend on the call or the rows they are computed
// with (MatMulStridedF32), the packed scores of a tree token equal those of
// the decoded token (ExpSum's order depends on the length alone), and
// AxpyRows gives the same sums however its rows are split between calls.
//
// With a window, a query sees the last window of its visible keys (their
// visible index is their position; see graph.AttentionOp); cache rows
// before every query's window in a task are not scored.
func (b *Backend) attentionGroups(y, q []float32, k, v kvCache, end []int32, n, heads, kvh, c, d, past int, scale float32, window int, cap float32) {
	group, rowLen := heads/kvh, past+n
	// Queries per task: enough for 16 rows, fewer where that would leave
	// workers without a task (many cores, short trees).
	per := max(1, (16+group-1)/group)
	for per > 1 && kvh*((n+per-1)/per) < b.pool.n {
		per--
	}
	blocks := (n + per - 1) / per
	rows := per * group
	b.pool.parallel(kvh*blocks, 1, max(1, 1<<16/max(1, rows*rowLen*d)), func(lo, hi int) {
		scratch := b.scratch(rows*rowLen + rows*d) // scores [rows, rowLen], then the scaled queries
		defer b.release(scratch)
		sc := *scratch
		qs := sc[rows*rowLen:]
		for t := lo; t < hi; t++ {
			g, q0 := t/blocks, t%blocks*per
			q1 := min(n, q0+per)
			m := (q1 - q0) * group
			for qi := q0; qi < q1; qi++ {
				h0 := qi*heads + g*group // the group's first query row
				copy(qs[(qi-q0)*group*d:(qi-q0+1)*group*d], q[h0*d:(h0+group)*d])
			}
			kernels.Scale(qs[:m*d], scale)
			// lo[qi-q0] is the first visible index query qi sees: its
			// visible keys number past + depth + 1.
			var lo [16]int
			first := past // the first cache row any query of the task sees
			for qi := q0; qi < q1; qi++ {
				if window > 0 {
					vis := past + 1
					for j := range qi {
						if int(end[j]) >= qi {
							vis++
						}
					}
					lo[qi-q0] = max(0, vis-window)
				}
				first = min(first, lo[qi-q0])
			}
			k.scores(sc[first:], rowLen, qs, m, d, g*c*d, d, first, past+q1)
			yb := y[(q0*heads+g*group)*d:]
			for qi := q0; qi < q1; qi++ {
				scq := sc[(qi-q0)*group*rowLen:]
				// runs calls f for the prefix and each run of visible tree
				// keys in the window: cache rows [from, to), whose scores
				// go to columns [at, at+to-from) of the packed rows. It
				// returns how many keys the query sees.
				runs := func(f func(from, to, at int)) int {
					skip := lo[qi-q0] // visible keys before the window
					if skip < past {
						f(skip, past, 0)
					}
					at := past - min(skip, past)
					skip = max(0, skip-past) // ancestors before the window
					for j := 0; j <= qi; {
						if int(end[j]) < qi {
							j++
							continue
						}
						if skip > 0 {
							skip--
							j++
							continue
						}
						from := j
						for j <= qi && int(end[j]) >= qi {
							j++
						}
						f(past+from, past+j, at)
						at += j - from
					}
					return at
				}
				seen := runs(func(from, to, at int) {
					if at != from {
						for i := range group {
							copy(scq[i*rowLen+at:i*rowLen+at+to-from], scq[i*rowLen+from:i*rowLen+to])
						}
					}
				})
				for i := range group {
					row := scq[i*rowLen : i*rowLen+seen]
					if cap > 0 {
						for j, s := range row {
							row[j] = softCap(s, cap)
						}
					}
					kernels.Scale(row, 1/kernels.ExpSum(row, kernels.Max(row)))
				}
				yg := yb[(qi-q0)*heads*d : (qi-q0)*heads*d+group*d]
				clear(yg)
				runs(func(from, to, at int) {
					v.weigh(yg, group, d, scq[at:], rowLen, g*c*d, d, from, to)
				})
			}
		}
	})
}
