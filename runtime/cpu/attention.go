package cpu

import (
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/runtime/cpu/kernels"
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
	rowLen := past + n
	stride := kvh * d
	if !b.reference && d >= 16 {
		b.attentionGroups(y, q, k, v, end, n, heads, kvh, d, past, scale)
		return nil
	}
	b.pool.parallel(n*heads, 1, max(1, 1<<16/max(1, rowLen*d)), func(w, lo, hi int) {
		scores := b.scratch(w, rowLen)
		for t := lo; t < hi; t++ {
			qi, h := t/heads, t%heads
			g := h / group
			qv := q[t*d : (t+1)*d]
			kg, vg := k[g*d:], v[g*d:] // row r of head g starts at r*stride
			last := past + qi          // the last row this query can see
			sc := scores[:last+1]
			// Scores of the whole prefix, then of the tree: key row past+j is
			// visible iff j <= qi <= end[j] (an ancestor); others weigh 0.
			mx := b.scores(sc[:past], qv, kg, stride, 0, scale)
			for j := 0; j <= qi; j++ {
				if int(end[j]) >= qi {
					if v := b.scores(sc[past+j:past+j+1], qv, kg, stride, past+j, scale); v > mx {
						mx = v
					}
				} else {
					sc[past+j] = float32(math.Inf(-1))
				}
			}
			inv := 1 / b.softmax(sc, mx)
			yv := y[t*d : (t+1)*d]
			clear(yv)
			b.weightedSum(yv, sc, vg, stride, inv)
		}
	})
	return nil
}

// attentionGroups is the fast path for heads of 16 or more dimensions. A
// task is one query and one KV head. The query heads that share the KV head
// (pre-scaled) score the prefix and each run of tree keys they see as one
// strided matrix product (a tile reuses each key row across up to six
// heads), packing the scores of the visible keys together; the softmax runs
// vectorised over them; then the value rows are summed into the outputs
// held in registers, each row loaded once for up to four heads (AxpyRows).
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
			// cache rows [from, to), whose scores go to columns at...
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

// expf is e^x for x <= 0 (scores minus their maximum), within 3e-7
// relative: x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two so r is
// exact), e^r by its degree-6 Taylor polynomial (remainder < 1.2e-7), times
// 2^n. n is rounded by the 1.5·2^23 trick, whose low mantissa bits are then
// n itself: no conversions, no branches. math.Exp costs more than the rest of
// a small head's attention together.
func expf(x float32) float32 {
	if !(x >= -87) {
		return 0
	}
	y := x*1.442695041 + 12582912 // 1.5·2^23: rounds x·log2(e) to an integer
	n := y - 12582912
	r := x - n*0.693145752 - n*1.42860677e-6
	p := (((((r*(1.0/720)+1.0/120)*r+1.0/24)*r+1.0/6)*r+0.5)*r+1)*r + 1
	return p * math.Float32frombits(uint32(int32(math.Float32bits(y))-0x4B400000+127)<<23)
}

// scores sets out[i] = scale · q·k[from+i], where key row r of this head
// starts at r*stride, and returns the largest (-Inf for none).
func (b *Backend) scores(out, q, k []float32, stride, from int, scale float32) float32 {
	d := len(q)
	mx := float32(math.Inf(-1))
	if b.reference || d >= 16 {
		for i := range out {
			r := (from + i) * stride
			var s float32
			if b.reference {
				for j, x := range q {
					s += x * k[r+j]
				}
			} else {
				s = kernels.DotF32(q, k[r:r+d])
			}
			out[i] = s * scale
			if out[i] > mx {
				mx = out[i]
			}
		}
		return mx
	}
	// Head dimensions below a vector's width: a plain loop per key beats a
	// call into a vector kernel, and d = 8 (TinyStories-class models) is
	// unrolled with q held in registers.
	if d == 8 {
		q8 := (*[8]float32)(q)
		q0, q1, q2, q3, q4, q5, q6, q7 := q8[0], q8[1], q8[2], q8[3], q8[4], q8[5], q8[6], q8[7]
		for i := range out {
			kr := (*[8]float32)(k[(from+i)*stride:])
			v := ((q0*kr[0] + q1*kr[1]) + (q2*kr[2] + q3*kr[3]) + ((q4*kr[4] + q5*kr[5]) + (q6*kr[6] + q7*kr[7]))) * scale
			out[i] = v
			if v > mx {
				mx = v
			}
		}
		return mx
	}
	for i := range out {
		r := (from + i) * stride
		kr := k[r : r+d]
		var s float32
		for j, x := range q {
			s += x * kr[j]
		}
		out[i] = s * scale
		if out[i] > mx {
			mx = out[i]
		}
	}
	return mx
}

// softmax replaces x with exp(x - mx) and returns the sum; mx is max x.
func (b *Backend) softmax(x []float32, mx float32) float32 {
	var sum float32
	if b.reference {
		for i, v := range x {
			e := float32(math.Exp(float64(v - mx)))
			x[i] = e
			sum += e
		}
		return sum
	}
	// expf, inlined by hand: the call costs as much as the arithmetic.
	for i, v := range x {
		v -= mx
		if !(v >= -87) {
			x[i] = 0
			continue
		}
		y := v*1.442695041 + 12582912
		n := y - 12582912
		r := v - n*0.693145752 - n*1.42860677e-6
		p := (((((r*(1.0/720)+1.0/120)*r+1.0/24)*r+1.0/6)*r+0.5)*r+1)*r + 1
		e := p * math.Float32frombits(uint32(int32(math.Float32bits(y))-0x4B400000+127)<<23)
		x[i] = e
		sum += e
	}
	return sum
}

// weightedSum adds Σ_r p[r]·inv · v[r] to y, skipping zero weights.
func (b *Backend) weightedSum(y, p, v []float32, stride int, inv float32) {
	d := len(y)
	if d == 8 && !b.reference {
		// Accumulate in registers; see scores.
		var y0, y1, y2, y3, y4, y5, y6, y7 float32
		for r, w := range p {
			if w == 0 {
				continue
			}
			vr := (*[8]float32)(v[r*stride:])
			y0 += w * vr[0]
			y1 += w * vr[1]
			y2 += w * vr[2]
			y3 += w * vr[3]
			y4 += w * vr[4]
			y5 += w * vr[5]
			y6 += w * vr[6]
			y7 += w * vr[7]
		}
		y8 := (*[8]float32)(y)
		y8[0], y8[1], y8[2], y8[3] = y0*inv, y1*inv, y2*inv, y3*inv
		y8[4], y8[5], y8[6], y8[7] = y4*inv, y5*inv, y6*inv, y7*inv
		return
	}
	for r, w := range p {
		if w == 0 {
			continue
		}
		a := w * inv
		vr := v[r*stride : r*stride+d]
		if b.reference || d < 16 {
			for j, x := range vr {
				y[j] += a * x
			}
		} else {
			kernels.Axpy(y, a, vr)
		}
	}
}
