package llama

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// fusedLayer holds a layer's weights joined for the fused ops
// (graph.LinearOp, graph.RoPEKVWriteOp): Q, K and V as one matrix (and
// their biases as one vector), gate and up as one. A part whose weights
// cannot be joined (different types, as in some GGUF quantization mixes)
// has no Data and is built unfused.
type fusedLayer struct {
	QKV, QKVBias, GateUp Weight
	// OResidual and DownResidual are set when the backend adds the
	// residual in the O and down products (LinearOp with Residual).
	OResidual, DownResidual bool
}

// fusesLayers reports whether model code should build fused layers for
// be: a GPU backend that says it runs them as single kernels, unless
// REDRAFTER_FUSED_LAYERS=off.
func fusesLayers(be graph.Backend) bool {
	f, ok := be.(graph.FusedLayers)
	return ok && f.FusesLayers() && !envvar.FusedLayers.Off()
}

// LayersRunAs says how be runs the layers of a model with config c, for
// inspect: the unfused graph, or the fused ops (where a layer's weight
// types allow them; joinLayers decides per layer).
func LayersRunAs(c *Config, be graph.Backend) string {
	switch {
	case !fusesLayers(be):
		return "unfused ops"
	case c.QKNorm && c.PostNorms:
		return "fused gate-up with " + c.glu().String() + "; q, k, v unfused around the head norms; O and down unfused before their post-norms"
	case c.QKNorm:
		return "fused O, gate-up, down; q, k, v unfused around the head norms"
	case c.PostNorms:
		return "fused QKV with RoPE and cache write, gate-up with " + c.glu().String() + "; O and down unfused before their post-norms"
	}
	return "fused QKV with RoPE and cache write, O, gate-up, down"
}

// glu is the MLP's gated activation, as the fused gate·up product takes it.
func (c *Config) glu() graph.GLU {
	if c.GeGLU {
		return graph.GLUGELU
	}
	return graph.GLUSiLU
}

// linearSupported reports whether be runs a LinearOp over w with the
// norm (and bias, or glu) of a joined layer part: a backend may run the
// fused ops on some weight types only, and the parts it cannot run stay
// unfused.
func linearSupported(be graph.Backend, w, bias *Weight, glu graph.GLU) bool {
	op := graph.LinearOp{Norm: true, Bias: bias.Present(), GLU: glu}
	if q := w.Quant; q != nil {
		op.Bits, op.GroupSize = q.Bits, q.GroupSize
	}
	return be.Supports(op, linearTypes(op, w))
}

// residualSupported reports whether be adds the residual in a LinearOp
// over w.
func residualSupported(be graph.Backend, w *Weight) bool {
	op := graph.LinearOp{Residual: true}
	if q := w.Quant; q != nil {
		op.Bits, op.GroupSize = q.Bits, q.GroupSize
	}
	return be.Supports(op, linearTypes(op, w))
}

// linearTypes are the source types of op over w (op's Bits are set from w).
func linearTypes(op graph.LinearOp, w *Weight) []graph.DType {
	in := []graph.DType{graph.F32}
	if op.Norm {
		in = append(in, graph.F32)
	}
	if q := w.Quant; q != nil {
		in = append(in, graph.U32, q.Scales.DType, q.Biases.DType)
	} else {
		in = append(in, w.DType)
	}
	if op.Bias {
		in = append(in, graph.F32)
	}
	if op.Residual {
		in = append(in, graph.F32)
	}
	return in
}

// joinLayers joins every layer's weights for the fused ops that be runs.
func (m *Model) joinLayers(be graph.Backend) []fusedLayer {
	out := make([]fusedLayer, len(m.Layers))
	for i := range m.Layers {
		l := &m.Layers[i]
		// Qwen3's and Gemma 3's per-head norms of q and k come between
		// the projection and RoPE, which RoPEKVWrite fuses with the cache
		// write, and the graph has no column slice to take q and k out of
		// a joined product: those layers keep q, k and v apart (the norm,
		// three products, the head norms, RoPE and KVWrite), and fuse the
		// rest.
		if !m.Config.QKNorm {
			out[i].QKV = joinRows(fmt.Sprintf("blk.%d.attn_qkv", i), &l.Q, &l.K, &l.V)
		}
		if m.Config.QKVBias && out[i].QKV.Present() {
			out[i].QKVBias = joinRows(fmt.Sprintf("blk.%d.attn_qkv.bias", i), &l.QBias, &l.KBias, &l.VBias)
			if !out[i].QKVBias.Present() {
				out[i].QKV = Weight{}
			}
		}
		out[i].GateUp = joinRows(fmt.Sprintf("blk.%d.ffn_gate_up", i), &l.Gate, &l.Up)
		f := &out[i]
		if f.QKV.Present() && !linearSupported(be, &f.QKV, &f.QKVBias, graph.NoGLU) {
			f.QKV, f.QKVBias = Weight{}, Weight{}
		}
		if f.GateUp.Present() && !linearSupported(be, &f.GateUp, &Weight{}, m.Config.glu()) {
			f.GateUp = Weight{}
		}
		// Gemma normalises the attention's and the MLP's outputs before
		// the residual add, so the add cannot be folded into the product.
		if !m.Config.PostNorms {
			f.OResidual, f.DownResidual = residualSupported(be, &l.O), residualSupported(be, &l.Down)
		}
	}
	return out
}

// joinRows stacks weights of one type along their first dimension (rows of
// a [N,K] matrix, or a vector) into a new, owned weight. It returns an
// absent Weight when they differ in type, quantization or row length, or
// are ggml blocks (no backend runs fused ops over them yet).
func joinRows(name string, ws ...*Weight) Weight {
	first := ws[0]
	for _, w := range ws {
		if !w.Present() || w.Blocks != 0 || w.DType != first.DType || len(w.Shape) != len(first.Shape) ||
			(len(w.Shape) == 2 && w.Shape[1] != first.Shape[1]) || (w.Quant == nil) != (first.Quant == nil) {
			return Weight{}
		}
		if q, q0 := w.Quant, first.Quant; q != nil && (q.Bits != q0.Bits || q.GroupSize != q0.GroupSize ||
			q.Symmetric != q0.Symmetric || q.Scales.DType != q0.Scales.DType || q.Biases.DType != q0.Biases.DType) {
			return Weight{}
		}
	}
	join := func(name string, part func(w *Weight) *Weight) Weight {
		shape := append(graph.Shape(nil), part(first).Shape...)
		shape[0] = 0
		size := 0
		for _, w := range ws {
			shape[0] += part(w).Shape[0]
			size += len(part(w).Data)
		}
		data := make([]byte, 0, size)
		for _, w := range ws {
			data = append(data, part(w).Data...)
		}
		return Weight{Name: name, DType: part(first).DType, Shape: shape, Data: data, Owned: true}
	}
	j := join(name, func(w *Weight) *Weight { return w })
	if q := first.Quant; q != nil {
		j.Quant = &Quant{Bits: q.Bits, GroupSize: q.GroupSize, Symmetric: q.Symmetric,
			Scales: join(name+".scales", func(w *Weight) *Weight { return &w.Quant.Scales }),
			Biases: join(name+".biases", func(w *Weight) *Weight { return &w.Quant.Biases })}
	}
	return j
}

// segment is the part of a pass's rows that one sequence owns: rows lo..hi-1
// attend over its caches of the current layer.
type segment struct {
	lo, hi     int
	k, v       *graph.Array // the layer's caches
	kvLen, end *graph.Array // [1], [hi-lo]
}

// addLayer adds transformer block i over x [n, dim] to g and returns the
// new residual stream. caches gives, for layer i, each sequence's rows and
// caches: one segment for a State's pass, one per request in a joint pass.
// Fused layers (a GPU backend) take six ops; unfused ones seventeen, each
// with its PyTorch equivalent in the comments. Qwen3's head norms add two
// ops, and keep its q, k and v unfused on a GPU too (joinLayers); Gemma's
// post-norms add two more and keep O and down unfused (gate·up is one
// product ending in GeGLU, as Llama's ends in SwiGLU).
func (r *Runner) addLayer(g *graph.Graph, x, pos *graph.Array, i int, segs []segment) *graph.Array {
	c := &r.Model.Config
	l := &r.Model.Layers[i]
	n := x.Shape()[0]
	invFreq := r.invFreq
	if c.localRoPE(i) {
		invFreq = r.localInvFreq // Gemma 3's sliding layers: rotary_emb_local
	}
	attention := func(q *graph.Array, s segment) *graph.Array { // sdpa(q, k, v, tree mask) [n, heads*hd]
		a := graph.AttentionWith(graph.AttentionOp{Scale: r.scale, Window: c.Window(i), SoftCap: c.AttnSoftCap}, q, s.k, s.v, s.kvLen, s.end)
		return graph.Reshape(a, 1, (s.hi-s.lo)*c.Heads*c.HeadDim)
	}
	var a *graph.Array
	if f := r.fused; f != nil && f[i].QKV.Present() {
		// qkv = [q_proj; k_proj; v_proj](input_layernorm(x)), then RoPE and
		// cache.update(k, v) in one op.
		qkv := graph.Linear(x, r.weight(g, &f[i].QKV), graph.Fusion{Norm: r.weight(g, &l.AttnNorm), Eps: c.NormEps,
			Bias: r.optWeight(g, &f[i].QKVBias)})
		if r.ropeGainQKV.Present() {
			qkv = graph.Mul(qkv, r.weight(g, &r.ropeGainQKV)) // longrope: cos·f, sin·f (rope.go)
		}
		parts := make([]*graph.Array, len(segs))
		for j, s := range segs {
			q := graph.RoPEKVWrite(slice(qkv, s.lo, s.hi, n), slice(pos, s.lo, s.hi, n), s.k, s.v, s.kvLen,
				c.Heads, c.KVHeads, invFreq, c.RopeNeoX)
			parts[j] = attention(q, s)
		}
		a = graph.Reshape(concatAll(parts), n, c.Heads*c.HeadDim)
	} else {
		h := graph.RMSNorm(x, r.weight(g, &l.AttnNorm), c.NormEps) // h = input_layernorm(x)
		q := graph.MatMul(h, r.weight(g, &l.Q))                    // q = q_proj(h)            [n, heads*hd]
		k := graph.MatMul(h, r.weight(g, &l.K))                    // k = k_proj(h)            [n, kvHeads*hd]
		v := graph.MatMul(h, r.weight(g, &l.V))                    // v = v_proj(h)            [n, kvHeads*hd]
		if c.QKVBias {
			q = graph.Add(q, r.weight(g, &l.QBias))
			k = graph.Add(k, r.weight(g, &l.KBias))
			v = graph.Add(v, r.weight(g, &l.VBias))
		}
		q = graph.Reshape(q, n, c.Heads, c.HeadDim)
		k = graph.Reshape(k, n, c.KVHeads, c.HeadDim)
		if c.QKNorm {
			q = headNorm(q, r.weight(g, &l.QNorm), c.NormEps) // q = q_norm(q)  (Qwen3)
			k = headNorm(k, r.weight(g, &l.KNorm), c.NormEps) // k = k_norm(k)
		}
		if r.ropeGain.Present() {
			q = graph.Mul(q, r.weight(g, &r.ropeGain)) // longrope: cos·f, sin·f (rope.go)
			k = graph.Mul(k, r.weight(g, &r.ropeGain))
		}
		q = graph.RoPE(q, pos, invFreq, c.RopeNeoX)
		k = graph.RoPE(k, pos, invFreq, c.RopeNeoX)
		v = graph.Reshape(v, n, c.KVHeads, c.HeadDim)
		parts := make([]*graph.Array, len(segs))
		for j, s := range segs {
			s.k = graph.KVWrite(s.k, slice(k, s.lo, s.hi, n), s.kvLen) // cache.update(k, v)
			s.v = graph.KVWrite(s.v, slice(v, s.lo, s.hi, n), s.kvLen)
			parts[j] = attention(slice(q, s.lo, s.hi, n), s)
		}
		a = graph.Reshape(concatAll(parts), n, c.Heads*c.HeadDim)
	}
	if f := r.fused; f != nil && f[i].OResidual {
		x = graph.Linear(a, r.weight(g, &l.O), graph.Fusion{Residual: x}) // x = x + o_proj(a)
	} else if c.PostNorms {
		o := graph.RMSNorm(graph.MatMul(a, r.weight(g, &l.O)), r.weight(g, &l.PostAttnNorm), c.NormEps)
		x = graph.Add(x, o) // x = x + post_attention_layernorm(o_proj(a))  (Gemma)
	} else {
		x = graph.Add(x, graph.MatMul(a, r.weight(g, &l.O)))
	}
	if f := r.fused; f != nil && f[i].GateUp.Present() {
		// x = x + down(silu(gate(h)) * up(h)), h = post_attention_layernorm(x)
		// (Gemma: gelu_pytorch_tanh for silu, pre_feedforward_layernorm,
		// and post_feedforward_layernorm of down's output)
		gu := graph.Linear(x, r.weight(g, &f[i].GateUp), graph.Fusion{Norm: r.weight(g, &l.FFNNorm), Eps: c.NormEps, GLU: c.glu()})
		if f[i].DownResidual {
			return graph.Linear(gu, r.weight(g, &l.Down), graph.Fusion{Residual: x})
		}
		return graph.Add(x, r.postFFN(g, graph.MatMul(gu, r.weight(g, &l.Down)), l))
	}
	h := graph.RMSNorm(x, r.weight(g, &l.FFNNorm), c.NormEps) // h = post_attention_layernorm(x) (Gemma: pre_feedforward_layernorm)
	gate := graph.MatMul(h, r.weight(g, &l.Gate))
	up := graph.MatMul(h, r.weight(g, &l.Up))
	act := graph.SwiGLU // silu(gate(h)) * up(h)
	if c.GeGLU {
		act = graph.GeGLU // gelu_pytorch_tanh(gate(h)) * up(h)  (Gemma)
	}
	return graph.Add(x, r.postFFN(g, graph.MatMul(act(gate, up), r.weight(g, &l.Down)), l)) // x = x + down(act)
}

// postFFN is Gemma's post_feedforward_layernorm of the MLP's output, or
// the output itself for models without post-norms.
func (r *Runner) postFFN(g *graph.Graph, mlp *graph.Array, l *Layer) *graph.Array {
	if c := &r.Model.Config; c.PostNorms {
		return graph.RMSNorm(mlp, r.weight(g, &l.PostFFNNorm), c.NormEps)
	}
	return mlp
}

// headNorm is RMSNorm over each head of x [n, heads, headDim] with one
// gain w [headDim] for every head: the rows of the norm are the heads.
func headNorm(x, w *graph.Array, eps float32) *graph.Array {
	s := x.Shape()
	return graph.Reshape(graph.RMSNorm(graph.Reshape(x, s[0]*s[1], s[2]), w, eps), s...)
}

// slice is rows lo..hi-1 of a, or a itself when they are all n of them.
func slice(a *graph.Array, lo, hi, n int) *graph.Array {
	if lo == 0 && hi == n {
		return a
	}
	return graph.Slice(a, lo, hi)
}
