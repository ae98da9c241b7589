package cpu

import (
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/runtime/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/runtime/graph"
)

// attention is tree attention over a cache (see graph.Attention). Keys are
// visited in cache order, so a token's output does not depend on how many
// other tokens share its forward pass.
func (b *Backend) attention(out graph.Operand, in []graph.Operand, scale float32) error {
	q, k, v := f32(in[0]), f32(in[1]), f32(in[2])
	n, heads, d := in[0].Shape[0], in[0].Shape[1], in[0].Shape[2]
	c, kvh := in[1].Shape[0], in[1].Shape[1]
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
		refAttention(f32(out), q, k, v, end, n, heads, kvh, d, past, scale)
	} else {
		b.attentionGroups(f32(out), q, k, v, end, n, heads, kvh, d, past, scale)
	}
	return nil
}

// refAttention is the reference: for each query and head, the scores of
// every key it sees, a softmax in float64 exponentials, and the weighted
// sum of the value rows, all in plain loops in cache order.
func refAttention(y, q, k, v []float32, end []int32, n, heads, kvh, d, past int, scale float32) {
	group, stride := heads/kvh, kvh*d
	w := make([]float32, past+n)
	for t := range n * heads {
		qi, g := t/heads, t%heads/group
		qv := q[t*d : (t+1)*d]
		row := w[:past+qi+1]
		mx := float32(math.Inf(-1))
		for r := range row {
			// Cached rows, then the tree: new key j is seen iff it is an
			// ancestor, j <= qi <= end[j].
			if r >= past && int(end[r-past]) < qi {
				row[r] = float32(math.Inf(-1))
				continue
			}
			var s float32
			for j, x := range qv {
				s += x * k[r*stride+g*d+j]
			}
			row[r] = s * scale
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
				yv[j] += a * v[r*stride+g*d+j]
			}
		}
	}
}

// attentionGroups is the fast path. A task is one query and one KV head.
// The query heads that share the KV head (pre-scaled) score the prefix and
// each run of tree keys they see as one strided matrix product (a tile
// reuses each key row across up to six heads), packing the scores of the
// visible keys together; the softmax runs vectorised over them; then the
// value rows are summed into the outputs held in registers, each row loaded
// once for up to four heads (AxpyRows).
//
// A token's output must not depend on what else its pass holds: decoded
// alone after its accepted ancestors, it sees the same keys in the same
// order. So scores do not depend on the call they are computed in
// (MatMulStridedF32), the packed scores of a tree token equal those of the
// decoded token (ExpSum's order depends on the length alone), and AxpyRows
// gives the same sums however its rows are split between calls.
func (b *Backend) attentionGroups(y, q, k, v []float32, end []int32, n, heads, kvh, d, past int, scale float32) {
	group, rowLen, stride := heads/kvh, past+n, kvh*d
	b.pool.parallel(n*kvh, 1, max(1, 1<<16/max(1, group*rowLen*d)), func(w, lo, hi int) {
		sc := b.scratch(w, group*rowLen+group*d) // scores [group, rowLen], then the scaled queries
		qs := sc[group*rowLen:]
		for t := lo; t < hi; t++ {
			qi, g := t/kvh, t%kvh
			h0 := qi*heads + g*group // the group's first query row
			copy(qs, q[h0*d:(h0+group)*d])
			kernels.Scale(qs, scale)
			kg, vg := k[g*d:], v[g*d:]
			// runs calls f for the prefix and each run of visible tree keys:
			// cache rows [from, to), whose scores go to columns [at, at+to-from)
			// of the packed rows. It returns how many keys the query sees.
			runs := func(f func(from, to, at int)) int {
				if past > 0 {
					f(0, past, 0)
				}
				at := past
				for j := 0; j <= qi; {
					if int(end[j]) < qi {
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
				kernels.MatMulStridedF32(sc[at:], rowLen, qs, d, group, kg[from*stride:], stride, to-from, d)
			})
			for i := range group {
				row := sc[i*rowLen : i*rowLen+seen]
				mx := float32(math.Inf(-1))
				for _, s := range row {
					if s > mx {
						mx = s
					}
				}
				kernels.Scale(row, 1/kernels.ExpSum(row, mx))
			}
			yg := y[h0*d : (h0+group)*d]
			clear(yg)
			runs(func(from, to, at int) {
				kernels.AxpyRows(yg, d, group, d, sc[at:], rowLen, to-from, vg[from*stride:], stride)
			})
		}
	})
}
