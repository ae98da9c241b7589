package cpu

import (
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/runtime/graph"
)

// attention is tree attention over a cache (see graph.Attention). Each
// (query, head) pair is independent; the fast path splits them across
// workers. Keys are visited in cache order, so a token's output does not
// depend on how many other tokens share its forward pass.
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
	y := f32(out)
	group := heads / kvh
	work := func(lo, hi int) {
		scores := make([]float32, past+n)
		for t := lo; t < hi; t++ {
			qi, h := t/heads, t%heads
			g := h / group
			qv := q[t*d : (t+1)*d]
			// Visible keys: the whole prefix, then tree ancestors k of qi
			// (k <= qi <= end[k]), in cache order.
			cnt := 0
			mx := float32(math.Inf(-1))
			for r := 0; r < past+qi+1; r++ {
				if r >= past {
					kk := r - past
					if int(end[kk]) < qi {
						continue
					}
				}
				s := b.dot(qv, k[(r*kvh+g)*d:(r*kvh+g+1)*d]) * scale
				scores[cnt] = s
				cnt++
				mx = max(mx, s)
			}
			var sum float32
			for i := range cnt {
				e := float32(math.Exp(float64(scores[i] - mx)))
				scores[i] = e
				sum += e
			}
			yv := y[t*d : (t+1)*d]
			clear(yv)
			inv := 1 / sum
			cnt = 0
			for r := 0; r < past+qi+1; r++ {
				if r >= past && int(end[r-past]) < qi {
					continue
				}
				b.axpy(yv, scores[cnt]*inv, v[(r*kvh+g)*d:(r*kvh+g+1)*d])
				cnt++
			}
		}
	}
	b.pool.parallel(n*heads, 1, max(1, 4096/max(1, (past+n)*d)), work)
	return nil
}

func (b *Backend) dot(x, y []float32) float32 {
	if b.reference {
		var s float32
		for i, v := range x {
			s += v * y[i]
		}
		return s
	}
	return dotF32(x, y)
}

func (b *Backend) axpy(y []float32, a float32, x []float32) {
	if b.reference {
		for i, v := range x {
			y[i] += a * v
		}
		return
	}
	axpy(y, a, x)
}
