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
	dot, axpy := b.dot, b.axpy
	if d <= 16 && !b.reference {
		// Below a vector's width the call costs more than the arithmetic.
		dot, axpy = dotSmall, axpySmall
	}
	rowLen := past + n
	b.pool.parallel(n*heads, 1, max(1, 8192/max(1, rowLen*d)), func(w, lo, hi int) {
		scores := b.scratch(w, rowLen)
		for t := lo; t < hi; t++ {
			qi, h := t/heads, t%heads
			g := h / group
			qv := q[t*d : (t+1)*d]
			// Visible keys: the whole prefix, then the tree ancestors k of
			// qi (k <= qi <= end[k]), in cache order. Invisible keys score
			// -Inf and weigh exactly 0.
			mx := float32(math.Inf(-1))
			for r := range past + qi + 1 {
				if r >= past && int(end[r-past]) < qi {
					scores[r] = float32(math.Inf(-1))
					continue
				}
				s := dot(qv, k[(r*kvh+g)*d:(r*kvh+g+1)*d]) * scale
				scores[r] = s
				mx = max(mx, s)
			}
			var sum float32
			for r := range past + qi + 1 {
				e := expf(scores[r] - mx)
				scores[r] = e
				sum += e
			}
			yv := y[t*d : (t+1)*d]
			clear(yv)
			inv := 1 / sum
			for r := range past + qi + 1 {
				if p := scores[r]; p != 0 {
					axpy(yv, p*inv, v[(r*kvh+g)*d:(r*kvh+g+1)*d])
				}
			}
		}
	})
	return nil
}

func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

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

func dotSmall(x, y []float32) float32 {
	y = y[:len(x)]
	var s float32
	for i, v := range x {
		s += v * y[i]
	}
	return s
}

func axpySmall(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}
