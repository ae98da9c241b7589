package train

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/hostmath"
)

// batch is R training rows, each a position t of a sequence, unrolled over
// T head steps. Step-major layout: row (i, r) of a [T·R, ·] matrix is
// i·R + r.
type batch struct {
	R, T  int
	ctx   []float32 // [R, H] the LLM's final-norm hidden state h_t
	in    []int32   // [T, R] the token step i reads: x_{t+1+i}
	label []int32   // [T, R] the token step i predicts, x_{t+2+i}, or -1
	soft  []float32 // [T·R, V] the LLM's distribution over x_{t+2+i}, or nil
}

// result is what a forward pass measured.
type result struct {
	CE      float64   // Σ_i mean CE of step i
	KL      float64   // Σ_i mean KL(p_LLM ‖ q) of step i (0 without soft targets)
	Loss    float64   // CE + klWeight·KL, what the gradient is of
	CESum   []float64 // [T] summed CE per step
	Correct []int     // [T] top-1 hits per step
	Count   []int     // [T] labels per step
}

func (r *result) add(o result) {
	if r.CESum == nil {
		r.CESum, r.Correct, r.Count = make([]float64, len(o.Count)), make([]int, len(o.Count)), make([]int, len(o.Count))
	}
	for i := range o.Count {
		r.CESum[i] += o.CESum[i]
		r.Correct[i] += o.Correct[i]
		r.Count[i] += o.Count[i]
	}
}

// hostHead computes the head's teacher-forced loss and its gradient on the host.
type hostHead struct {
	p       *Params
	emb     []float32 // [V, H] the LLM's input embedding table (frozen)
	threads int
	w       work
	// done, when closed, makes every matrix product a no-op: a step of a
	// large head takes seconds, and Ctrl-C must stop it within one product.
	// The caller then discards the pass (its result is garbage).
	done <-chan struct{}
}

// stopped reports whether done is closed.
func (m *hostHead) stopped() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// work holds a pass's activations and scratch, grown as needed.
type work struct {
	e, a, s    []float32   // [N, H] embeddings, RNN pre-activations, states
	x0         []float32   // [N, 2H] [h; s]
	xs, pre    [][]float32 // [K+1][N, E] block inputs; [K][N, E] pre-activations
	z          []float32   // [N, V] logits, then their gradient
	wu         []float32   // [H, 2H] [rnn_w | rnn_u]
	cat        []float32   // [R, 2H] [e_i | s_{i-1}]
	dx, dx0    []float32   // [N, E], [N, 2H]
	da, tmp    []float32   // [N, H], scratch
	ta, tb, tw []float32   // transposes
	rowLoss    []float64   // per row: CE, KL
	rowKL      []float64
	rowHit     []bool
	scale      []float32 // [T] 1/count
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// forward runs the head over b and, if g is not nil, writes the gradient of
// result.Loss with respect to every parameter into g (overwriting it).
func (m *hostHead) forward(b *batch, klWeight float32, g *Params) result {
	c := m.p.Config
	H, V, T, R := c.HiddenSize, c.VocabSize, b.T, b.R
	N := T * R
	if len(b.ctx) != R*H || len(b.in) != N || len(b.label) != N || (b.soft != nil && len(b.soft) != N*V) {
		panic(fmt.Sprintf("train: batch of R=%d T=%d: ctx %d, in %d, label %d, soft %d", R, T, len(b.ctx), len(b.in), len(b.label), len(b.soft)))
	}
	m.recur(b)
	m.blocks(b)
	// Logits and the loss; z becomes dLoss/dz.
	w := &m.w
	w.z = grow(w.z, N*V)
	m.matmul(w.z, V, w.xs[len(m.p.BlkW)], N, m.p.Vocab.Data)
	res := m.loss(b, klWeight, g != nil)
	if g == nil {
		return res
	}
	dx0 := m.backBlocks(b, g)
	if !c.RNN {
		return res // a running sum of frozen embeddings has no parameters
	}
	m.backRecur(b, dx0, g)
	return res
}

// recur runs the head's recurrence over b's steps into w.e (embeddings),
// w.a (pre-activations) and w.s (states): s_i = silu(rnn_w·e_i +
// rnn_u·s_{i-1} + b), s_{-1} = 0; without an RNN, s_i = e_i + s_{i-1}.
func (m *hostHead) recur(b *batch) {
	p, c := m.p, m.p.Config
	H, T, R := c.HiddenSize, b.T, b.R
	N := T * R
	w := &m.w
	w.e, w.a, w.s = grow(w.e, N*H), grow(w.a, N*H), grow(w.s, N*H)
	for n, t := range b.in {
		copy(w.e[n*H:(n+1)*H], m.emb[int(t)*H:(int(t)+1)*H])
	}
	if !c.RNN {
		for i := range T {
			for j := range R * H {
				v := w.e[i*R*H+j]
				if i > 0 {
					v += w.s[(i-1)*R*H+j]
				}
				w.s[i*R*H+j] = v
			}
		}
		return
	}
	w.wu = grow(w.wu, H*2*H)
	for o := range H {
		copy(w.wu[o*2*H:], p.RnnW.Data[o*H:(o+1)*H])
		copy(w.wu[o*2*H+H:], p.RnnU.Data[o*H:(o+1)*H])
	}
	w.cat = grow(w.cat, R*2*H)
	clear(w.cat)
	for i := range T {
		for r := range R {
			copy(w.cat[r*2*H:], w.e[(i*R+r)*H:(i*R+r+1)*H])
			if i > 0 {
				copy(w.cat[r*2*H+H:], w.s[((i-1)*R+r)*H:((i-1)*R+r+1)*H])
			}
		}
		a := w.a[i*R*H : (i+1)*R*H]
		m.matmul(a, H, w.cat, R, w.wu) // a = [e | s]·[W | U]ᵀ
		for r := range R {
			row := a[r*H : (r+1)*H]
			hostmath.Axpy(row, 1, p.RnnB.Data)
			for j, v := range row {
				w.s[(i*R+r)*H+j] = silu(v)
			}
		}
	}
}

// blocks makes each row's input x0 = [h; s] (w.x0), projects it to E when
// the head has an input projection (w.xs[0]), and runs the residual blocks
// x = x + silu(W·x + b) (pre-activations in w.pre, outputs in w.xs[1:]).
func (m *hostHead) blocks(b *batch) {
	p, c := m.p, m.p.Config
	H, E, T, R := c.HiddenSize, c.ExitDim, b.T, b.R
	N := T * R
	K := len(p.BlkW)
	w := &m.w
	w.x0 = grow(w.x0, N*2*H)
	for i := range T {
		for r := range R {
			n := i*R + r
			copy(w.x0[n*2*H:], b.ctx[r*H:(r+1)*H])
			copy(w.x0[n*2*H+H:(n+1)*2*H], w.s[n*H:(n+1)*H])
		}
	}
	for len(w.xs) < K+1 {
		w.xs = append(w.xs, nil)
	}
	for len(w.pre) < K {
		w.pre = append(w.pre, nil)
	}
	if p.InW != nil {
		w.xs[0] = grow(w.xs[0], N*E)
		m.matmul(w.xs[0], E, w.x0, N, p.InW.Data)
		addBias(w.xs[0], p.InB.Data)
	} else {
		w.xs[0] = grow(w.xs[0], N*E)
		copy(w.xs[0], w.x0)
	}
	for k := range K {
		w.pre[k] = grow(w.pre[k], N*E)
		w.xs[k+1] = grow(w.xs[k+1], N*E)
		m.matmul(w.pre[k], E, w.xs[k], N, p.BlkW[k].Data)
		addBias(w.pre[k], p.BlkB[k].Data)
		for j, v := range w.pre[k] {
			w.xs[k+1][j] = w.xs[k][j] + silu(v)
		}
	}
}

// backBlocks writes the gradients of the output projection, the residual
// blocks and the input projection into g, from dLoss/dz in w.z, and
// returns dLoss/dx0.
func (m *hostHead) backBlocks(b *batch, g *Params) []float32 {
	p, c := m.p, m.p.Config
	H, E, V, N := c.HiddenSize, c.ExitDim, c.VocabSize, b.T*b.R
	K := len(p.BlkW)
	w := &m.w
	// dVocab = dzᵀ·x_K, dx = dz·Vocab.
	w.ta = transpose(w.ta, w.z, N, V)        // [V, N]
	w.tb = transpose(w.tb, w.xs[K], N, E)    // [E, N]
	m.matmul(g.Vocab.Data, E, w.ta, V, w.tb) // [V, E]
	w.tw = transpose(w.tw, p.Vocab.Data, V, E)
	w.dx = grow(w.dx, N*E)
	m.matmul(w.dx, E, w.z, N, w.tw)
	w.tmp = grow(w.tmp, N*max(E, 2*H))
	for k := K - 1; k >= 0; k-- {
		// dpre = dx ⊙ silu'(pre); dW = dpreᵀ·x_k; db = Σ dpre; dx += dpre·W.
		dpre := w.pre[k] // overwritten: pre is not needed any more
		for j, v := range dpre {
			dpre[j] = w.dx[j] * dsilu(v)
		}
		w.ta = transpose(w.ta, dpre, N, E)
		w.tb = transpose(w.tb, w.xs[k], N, E)
		m.matmul(g.BlkW[k].Data, E, w.ta, E, w.tb)
		colSum(g.BlkB[k].Data, dpre)
		w.tw = transpose(w.tw, p.BlkW[k].Data, E, E)
		tmp := w.tmp[:N*E]
		m.matmul(tmp, E, dpre, N, w.tw)
		hostmath.Axpy(w.dx, 1, tmp)
	}
	if p.InW == nil {
		return w.dx
	}
	w.ta = transpose(w.ta, w.dx, N, E)
	w.tb = transpose(w.tb, w.x0, N, 2*H)
	m.matmul(g.InW.Data, 2*H, w.ta, E, w.tb)
	colSum(g.InB.Data, w.dx)
	w.tw = transpose(w.tw, p.InW.Data, E, 2*H)
	w.dx0 = grow(w.dx0, N*2*H)
	m.matmul(w.dx0, 2*H, w.dx, N, w.tw)
	return w.dx0
}

// backRecur writes the RNN's gradients into g from dLoss/dx0, back through
// time: ds_i = dx0[i][H:] + da_{i+1}·U; da_i = ds_i ⊙ silu'(a_i).
func (m *hostHead) backRecur(b *batch, dx0 []float32, g *Params) {
	p, c := m.p, m.p.Config
	H, T, R := c.HiddenSize, b.T, b.R
	N := T * R
	w := &m.w
	w.da = grow(w.da, N*H)
	w.tw = transpose(w.tw, p.RnnU.Data, H, H)
	tmp := w.tmp[:R*H]
	for i := T - 1; i >= 0; i-- {
		if i < T-1 {
			m.matmul(tmp, H, w.da[(i+1)*R*H:(i+2)*R*H], R, w.tw)
		}
		for r := range R {
			n := i*R + r
			for j := range H {
				ds := dx0[n*2*H+H+j]
				if i < T-1 {
					ds += tmp[r*H+j]
				}
				w.da[n*H+j] = ds * dsilu(w.a[n*H+j])
			}
		}
	}
	// dW = daᵀ·e, dU = da[1:]ᵀ·s[:-1], db = Σ da.
	w.ta = transpose(w.ta, w.da, N, H)
	w.tb = transpose(w.tb, w.e, N, H)
	m.matmul(g.RnnW.Data, H, w.ta, H, w.tb)
	colSum(g.RnnB.Data, w.da)
	if T > 1 {
		w.ta = transpose(w.ta, w.da[R*H:], N-R, H)
		w.tb = transpose(w.tb, w.s[:(N-R)*H], N-R, H)
		m.matmul(g.RnnU.Data, H, w.ta, H, w.tb)
	} else {
		clear(g.RnnU.Data)
	}
}

// loss turns w.z (logits) into the per-step losses and, with grad, into
// dLoss/dz: (softmax(z) − onehot(label))/count_i + klWeight·(softmax(z) −
// p_LLM)/count_i for every row with a label, zero elsewhere.
func (m *hostHead) loss(b *batch, klWeight float32, grad bool) result {
	V, T, R := m.p.Config.VocabSize, b.T, b.R
	N := T * R
	w := &m.w
	res := result{CESum: make([]float64, T), Correct: make([]int, T), Count: make([]int, T)}
	for n, l := range b.label {
		if l >= 0 {
			res.Count[n/R]++
		}
	}
	w.scale = grow(w.scale, T)
	for i := range T {
		w.scale[i] = 0
		if res.Count[i] > 0 {
			w.scale[i] = 1 / float32(res.Count[i])
		}
	}
	if cap(w.rowLoss) < N {
		w.rowLoss, w.rowKL, w.rowHit = make([]float64, N), make([]float64, N), make([]bool, N)
	}
	w.rowLoss, w.rowKL, w.rowHit = w.rowLoss[:N], w.rowKL[:N], w.rowHit[:N]
	m.parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			z := w.z[n*V : (n+1)*V]
			l := b.label[n]
			if l < 0 {
				if grad {
					clear(z)
				}
				w.rowLoss[n], w.rowKL[n], w.rowHit[n] = 0, 0, false
				continue
			}
			mx, arg := z[0], 0
			for j, v := range z {
				if v > mx {
					mx, arg = v, j
				}
			}
			var sum float64
			for _, v := range z {
				sum += math.Exp(float64(v - mx))
			}
			lse := float64(mx) + math.Log(sum)
			w.rowLoss[n] = lse - float64(z[l])
			w.rowHit[n] = arg == int(l)
			var kl float64
			if b.soft != nil {
				q := b.soft[n*V : (n+1)*V]
				for j, pj := range q {
					if pj > 0 {
						kl += float64(pj) * (math.Log(float64(pj)) - (float64(z[j]) - lse))
					}
				}
			}
			w.rowKL[n] = kl
			if !grad {
				continue
			}
			s := w.scale[n/R]
			for j, v := range z {
				pr := float32(math.Exp(float64(v) - lse))
				d := pr
				if b.soft != nil {
					d += klWeight * (pr - b.soft[n*V+j])
				}
				z[j] = d * s
			}
			z[l] -= s
		}
	})
	kls := make([]float64, T)
	for n := range N {
		if b.label[n] < 0 {
			continue
		}
		i := n / R
		res.CESum[i] += w.rowLoss[n]
		kls[i] += w.rowKL[n]
		if w.rowHit[n] {
			res.Correct[i]++
		}
	}
	for i := range T {
		if res.Count[i] > 0 {
			res.CE += res.CESum[i] / float64(res.Count[i])
			res.KL += kls[i] / float64(res.Count[i])
		}
	}
	res.Loss = res.CE + float64(klWeight)*res.KL
	return res
}

// matmul is hostmath.MatMul (y = x·wᵀ, x [m, k], w [n, k]) with the rows
// of x split across the threads.
func (m *hostHead) matmul(y []float32, ldy int, x []float32, rows int, wt []float32) {
	k := len(x) / max(rows, 1)
	n := len(wt) / max(k, 1)
	if m.stopped() {
		return
	}
	if m.threads <= 1 || rows < 2*m.threads || rows*n*k < 1<<18 {
		hostmath.MatMul(y, ldy, x, rows, wt)
		return
	}
	// Large products go in slices of rows, so a stop is seen between them.
	const slice = 16
	m.parallel(rows, func(lo, hi int) {
		for r := lo; r < hi && !m.stopped(); r += slice {
			e := min(r+slice, hi)
			hostmath.MatMul(y[r*ldy:], ldy, x[r*k:e*k], e-r, wt)
		}
	})
}

// parallel calls f over [0, n) in up to m.threads contiguous chunks.
func (m *hostHead) parallel(n int, f func(lo, hi int)) {
	t := max(1, min(m.threads, n))
	if t == 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for j := range t {
		lo, hi := n*j/t, n*(j+1)/t
		wg.Go(func() { f(lo, hi) })
	}
	wg.Wait()
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// dsilu is d silu(x)/dx = σ(x)·(1 + x·(1 − σ(x))).
func dsilu(x float32) float32 {
	s := 1 / (1 + float32(math.Exp(float64(-x))))
	return s * (1 + x*(1-s))
}

func addBias(y, b []float32) {
	for r := 0; r < len(y); r += len(b) {
		hostmath.Axpy(y[r:r+len(b)], 1, b)
	}
}

// colSum sets dst[j] = Σ_r x[r, j].
func colSum(dst, x []float32) {
	clear(dst)
	for r := 0; r < len(x); r += len(dst) {
		hostmath.Axpy(dst, 1, x[r:r+len(dst)])
	}
}

// transpose writes the [cols, rows] transpose of x [rows, cols] into dst
// (grown as needed) and returns it.
func transpose(dst, x []float32, rows, cols int) []float32 {
	dst = grow(dst, rows*cols)
	const blk = 32
	for r0 := 0; r0 < rows; r0 += blk {
		r1 := min(r0+blk, rows)
		for c0 := 0; c0 < cols; c0 += blk {
			c1 := min(c0+blk, cols)
			for r := r0; r < r1; r++ {
				row := x[r*cols : (r+1)*cols]
				for c := c0; c < c1; c++ {
					dst[c*rows+r] = row[c]
				}
			}
		}
	}
	return dst
}

// f32s decodes little-endian float32 bytes.
func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
