package cpu

import (
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/graph"
	"github.com/seed9b8f47b1/redrafter/quant"
)

// embed gathers table rows; ids out of range are an error, not a crash.
func (b *Backend) embed(out, table, ids graph.Operand) error {
	v, d := table.Shape[0], table.Shape[1]
	y := f32(out)
	for i, id := range i32(ids) {
		if id < 0 || int(id) >= v {
			return fmt.Errorf("token id %d outside the vocabulary of %d", id, v)
		}
		row := y[i*d : (i+1)*d]
		switch table.DType {
		case graph.F32:
			copy(row, f32(table)[int(id)*d:])
		case graph.F16:
			for j, h := range u16(table)[int(id)*d : int(id+1)*d] {
				row[j] = quant.F16ToF32(h)
			}
		case graph.BF16:
			for j, h := range u16(table)[int(id)*d : int(id+1)*d] {
				row[j] = quant.BF16ToF32(h)
			}
		}
	}
	return nil
}

// rmsnorm: out = x / sqrt(mean(x²) + eps) * w, per row of length d.
func (b *Backend) rmsnorm(y, x, w []float32, d int, eps float32) {
	for r := 0; r < len(x); r += d {
		xr := x[r : r+d]
		var ss float32
		for _, v := range xr {
			ss += v * v
		}
		scale := float32(1 / math.Sqrt(float64(ss/float32(d)+eps)))
		yr := y[r : r+d]
		for i, v := range xr {
			yr[i] = v * scale * w[i]
		}
	}
}

// rope rotates each head of each row by its position.
func rope(y, x []float32, pos []int32, shape graph.Shape, op graph.RoPEOp) error {
	heads, d := shape[1], shape[2]
	half := len(op.InvFreq)
	if &y[0] != &x[0] {
		copy(y, x)
	}
	cos := make([]float32, half)
	sin := make([]float32, half)
	for m, p := range pos {
		if p < 0 {
			return fmt.Errorf("negative position %d", p)
		}
		for j, f := range op.InvFreq {
			s, c := math.Sincos(float64(p) * float64(f))
			cos[j], sin[j] = float32(c), float32(s)
		}
		for h := range heads {
			v := y[(m*heads+h)*d : (m*heads+h+1)*d]
			for j := range half {
				i0, i1 := 2*j, 2*j+1
				if op.NeoX {
					i0, i1 = j, j+half
				}
				a, b := v[i0], v[i1]
				v[i0] = a*cos[j] - b*sin[j]
				v[i1] = a*sin[j] + b*cos[j]
			}
		}
	}
	return nil
}

// sigmoid is 1/(1+e^-x) with math.Exp, for the reference backend.
func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

func (b *Backend) silu(y, x []float32) {
	if !b.reference {
		kernels.SiLU(y, x)
		return
	}
	for i, v := range x {
		y[i] = v * sigmoid(v)
	}
}

func (b *Backend) swiglu(y, gate, up []float32) {
	if !b.reference {
		kernels.SwiGLU(y, gate, up[:len(gate)])
		return
	}
	for i, g := range gate {
		y[i] = g * sigmoid(g) * up[i]
	}
}

// broadcast applies f elementwise, repeating b over a's leading dimensions.
func broadcast(y, a, b []float32, f func(a, b float32) float32) {
	n := len(b)
	for i, v := range a {
		y[i] = f(v, b[i%n])
	}
}

func concat(y, a, b []float32, rows int) {
	da, db := len(a)/rows, len(b)/rows
	for r := range rows {
		copy(y[r*(da+db):], a[r*da:(r+1)*da])
		copy(y[r*(da+db)+da:], b[r*db:(r+1)*db])
	}
}

// logSoftmax over rows of length v: x - max - log(Σ exp(x - max)), with the
// sum in float64 so that long vocabularies lose nothing.
func logSoftmax(y, x []float32, v int) {
	for r := 0; r < len(x); r += v {
		xr, yr := x[r:r+v], y[r:r+v]
		mx := xr[0]
		for _, e := range xr {
			mx = max(mx, e)
		}
		var s float64
		for _, e := range xr {
			s += math.Exp(float64(e - mx))
		}
		lse := mx + float32(math.Log(s))
		for i, e := range xr {
			yr[i] = e - lse
		}
	}
}

// argmax per row; ties go to the lowest index.
func argmax(y []int32, x []float32, v int) {
	for r := range y {
		xr := x[r*v : (r+1)*v]
		best := 0
		for i, e := range xr {
			if e > xr[best] {
				best = i
			}
		}
		y[r] = int32(best)
	}
}

// topK keeps, per row, the k largest values' indices in descending order
// (ties: lowest index first) by insertion into a short sorted list, which is
// O(V·k) worst case and O(V) for the usual k ≪ V.
func topK(y []int32, x []float32, v, k int) {
	for r := 0; r < len(x)/v; r++ {
		xr := x[r*v : (r+1)*v]
		idx := y[r*k : (r+1)*k]
		n := 0
		for i, e := range xr {
			if n == k && !(e > xr[idx[k-1]]) {
				continue
			}
			j := min(n, k-1)
			for j > 0 && e > xr[idx[j-1]] {
				idx[j] = idx[j-1]
				j--
			}
			idx[j] = int32(i)
			if n < k {
				n++
			}
		}
	}
}

func gatherRows(out, x, idx graph.Operand) error {
	rows := x.Shape[0]
	rowBytes := x.Bytes() / rows
	src, dst := bytesOf(x), bytesOf(out)
	for i, r := range i32(idx) {
		if r < 0 || int(r) >= rows {
			return fmt.Errorf("row %d outside [0,%d)", r, rows)
		}
		copy(dst[i*rowBytes:(i+1)*rowBytes], src[int(r)*rowBytes:])
	}
	return nil
}

func takeAlong(y, x []float32, idx []int32, v, k int) error {
	for i, j := range idx {
		if j < 0 || int(j) >= v {
			return fmt.Errorf("index %d outside [0,%d)", j, v)
		}
		y[i] = x[(i/k)*v+int(j)]
	}
	return nil
}

// kvWrite copies rows into the cache at kvLen (an f16 cache gets them
// rounded to the nearest half).
func kvWrite(cache, rows, kvLen graph.Operand) error {
	c, row := cache.Shape[0], cache.Shape[1]*cache.Shape[2]
	n := rows.Shape[0]
	at := int(i32(kvLen)[0])
	if at < 0 || at+n > c {
		return fmt.Errorf("cache of %d positions cannot take %d more after %d", c, n, at)
	}
	if cache.DType == graph.F16 {
		kernels.ConvertF32ToF16(u16(cache)[at*row:(at+n)*row], f32(rows))
		return nil
	}
	copy(f32(cache)[at*row:(at+n)*row], f32(rows))
	return nil
}

// kvCompact moves rows kvLen+idx[i] to kvLen+i, in increasing i (rows of
// bytes: any cache dtype).
func kvCompact(cache, kvLen, idx graph.Operand) error {
	c, row := cache.Shape[0], cache.Shape[1]*cache.Shape[2]*cache.DType.Size()
	at := int(i32(kvLen)[0])
	data := bytesOf(cache)
	prev := int32(-1)
	for i, j := range i32(idx) {
		if j <= prev || int(j) < i || at+int(j) >= c || at < 0 {
			return fmt.Errorf("compaction index %d at %d is not increasing within the cache", j, i)
		}
		prev = j
		if int(j) != i {
			copy(data[(at+i)*row:(at+i+1)*row], data[(at+int(j))*row:(at+int(j)+1)*row])
		}
	}
	return nil
}
