package graph

import (
	"fmt"
	"strings"
)

// Fused ops: what a transformer layer does around its matrix products,
// folded into them, so that a GPU runs a decode layer in six kernels rather
// than seventeen (each near its launch floor at batch 1). Each is defined
// by the unfused ops it replaces: a backend may compose it from them (the
// CPU does), and the CPU reference backend always does, so tests compare a
// GPU's fused kernel against that composition.

// LinearOp is a layer's matrix product with its neighbours folded in,
// built by Linear:
//
//	h   = RMSNorm(x, g, Eps)          if Norm, else x
//	y   = h·wᵀ (+ b if Bias)          MatMulOp, or QMatMulOp when Bits > 0
//	y   = SiLU(y[:, :N])·y[:, N:]     if GLU is GLUSiLU: w holds N gate rows, then N up rows
//	y   = GELU(y[:, :N])·y[:, N:]     if GLU is GLUGELU (GELU with the tanh approximation)
//	out = r + y                       if Residual
//
// each step rounded to f32 as the unfused op (SwiGLUOp, GeGLUOp) does.
// Sources, in order: x [M,K] f32; g [K] f32 if Norm; w [N',K] (f32, f16 or
// bf16), or w, scales and biases as for Dequantize when Bits > 0; b [N']
// f32 if Bias; r [M,N] f32 if Residual (N' = 2N with a GLU, else N).
// Result [M,N] f32. As for MatMulOp, a row's result does not depend on the
// rows batched with it.
type LinearOp struct {
	Norm     bool
	Eps      float32 // the norm's epsilon
	Bias     bool
	GLU      GLU
	Residual bool
	// Bits and GroupSize describe a quantized w (QMatMulOp's); 0 for a
	// float one.
	Bits, GroupSize int
}

// GLU is the gated activation a LinearOp may end in: the product's first
// half of columns (the gate) through an activation, times the second half
// (up). Llama's MLP is SwiGLU, Gemma's GeGLU.
type GLU uint8

const (
	NoGLU   GLU = iota
	GLUSiLU     // SiLU(gate)·up, as SwiGLUOp
	GLUGELU     // GELU(gate)·up, as GeGLUOp
)

func (g GLU) String() string {
	switch g {
	case NoGLU:
		return "none"
	case GLUSiLU:
		return "SwiGLU"
	case GLUGELU:
		return "GeGLU"
	}
	return fmt.Sprintf("GLU(%d)", uint8(g))
}

// LinearSources gives the index of each of a LinearOp's sources in a
// step's inputs; -1 for one the op does not have. Weight is the first of
// the weight's sources (codes, scales, biases when quantized).
type LinearSources struct{ X, Norm, Weight, Bias, Residual int }

// Sources returns where each source of o sits among its inputs.
func (o LinearOp) Sources() LinearSources {
	s := LinearSources{X: 0, Norm: -1, Bias: -1, Residual: -1}
	i := 1
	if o.Norm {
		s.Norm, i = i, i+1
	}
	s.Weight = i
	if o.Bits > 0 {
		i += 3
	} else {
		i++
	}
	if o.Bias {
		s.Bias, i = i, i+1
	}
	if o.Residual {
		s.Residual = i
	}
	return s
}

// Fusion says what Linear folds into its product. A nil array leaves that
// part out.
type Fusion struct {
	Norm     *Array  // [K] f32: normalise x with this weight first
	Eps      float32 // the norm's epsilon
	Bias     *Array  // [N'] f32: added to the product
	GLU      GLU     // if set, w is N gate rows then N up rows: out = act(gate)·up
	Residual *Array  // [M,N] f32: added last
}

// Linear is x·wᵀ with f folded in (LinearOp). w may be Quantized.
func Linear(x, w *Array, f Fusion) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "Linear: x %v", x)
	op := LinearOp{Norm: f.Norm != nil, Eps: f.Eps, Bias: f.Bias != nil, GLU: f.GLU, Residual: f.Residual != nil}
	src := []*Array{x}
	k := x.shape[1]
	if f.Norm != nil {
		mustf(len(f.Norm.shape) == 1 && f.Norm.shape[0] == k && f.Norm.dtype == F32, "Linear: norm %v for x %v", f.Norm, x)
		src = append(src, f.Norm)
	}
	var n int
	if d, ws, ok := quantizedSources(w); ok {
		op.Bits, op.GroupSize = d.Bits, d.GroupSize
		n = w.shape[0]
		mustf(w.shape[1] == k, "Linear: x %v and w %v disagree on K", x.shape, w.shape)
		src = append(src, ws...)
	} else {
		mustf(len(w.shape) == 2 && isFloatWeight(w.dtype), "Linear: w %v", w)
		mustf(w.shape[1] == k, "Linear: x %v and w %v disagree on K", x.shape, w.shape)
		n = w.shape[0]
		src = append(src, w)
	}
	if f.Bias != nil {
		mustf(len(f.Bias.shape) == 1 && f.Bias.shape[0] == n && f.Bias.dtype == F32, "Linear: bias %v for %d columns", f.Bias, n)
		src = append(src, f.Bias)
	}
	mustf(f.GLU <= GLUGELU, "Linear: GLU %d", f.GLU)
	if f.GLU != NoGLU {
		mustf(n%2 == 0, "Linear: a GLU over %d rows of w, not gate and up halves", n)
		n /= 2
	}
	if f.Residual != nil {
		mustf(f.Residual.shape.Equal(Shape{x.shape[0], n}) && f.Residual.dtype == F32, "Linear: residual %v, want [%d,%d] f32", f.Residual, x.shape[0], n)
		src = append(src, f.Residual)
	}
	return node(op, F32, Shape{x.shape[0], n}, src...)
}

// RoPEKVWriteOp (built by RoPEKVWrite) takes the fused Q, K, V product of
// a layer and does what follows it before attention: it rotates the query
// heads (the result), rotates the key heads and writes them into the key
// cache, and writes the value heads into the value cache, at rows
// kvLen..kvLen+M-1, as RoPEOp and KVWriteOp do (same rounding).
// Sources: qkv [M,(Heads+2·KVHeads)·D] f32 (each row the Heads query
// heads, then the KV heads' keys, then their values), pos [M] i32, the key
// and value caches [KVHeads,C,D] (Vars, both f32 or both f16), kvLen [1]
// i32. Result [M,Heads,D] f32. It writes both caches in place
// (WrittenSources); readers of the caches must read the result too, or come
// later in the graph by another dependency, to be ordered after it.
type RoPEKVWriteOp struct {
	Heads, KVHeads int
	InvFreq        []float32 // as RoPEOp's
	NeoX           bool
}

// RoPE is the rotation the op applies to queries and keys.
func (o RoPEKVWriteOp) RoPE() RoPEOp { return RoPEOp{InvFreq: o.InvFreq, NeoX: o.NeoX} }

// RoPEKVWrite rotates and stores a layer's fused Q, K, V rows (see
// RoPEKVWriteOp) and returns the rotated queries [M,heads,D].
func RoPEKVWrite(qkv, pos, kcache, vcache, kvLen *Array, heads, kvHeads int, invFreq []float32, neox bool) *Array {
	mustf(len(qkv.shape) == 2 && qkv.dtype == F32, "RoPEKVWrite: qkv %v", qkv)
	mustf(len(kcache.shape) == 3 && kcache.shape.Equal(vcache.shape) && kcache.dtype == vcache.dtype, "RoPEKVWrite: caches %v and %v", kcache, vcache)
	mustf(kcache.kind == kindVar && vcache.kind == kindVar, "RoPEKVWrite: caches %v and %v must be Vars", kcache, vcache)
	mustf(kcache.shape[0] == kvHeads && heads > 0 && kvHeads > 0 && heads%kvHeads == 0, "RoPEKVWrite: %d heads over %d KV heads, cache %v", heads, kvHeads, kcache)
	m, d := qkv.shape[0], kcache.shape[2]
	mustf(qkv.shape[1] == (heads+2*kvHeads)*d, "RoPEKVWrite: qkv %v for %d+2·%d heads of %d", qkv, heads, kvHeads, d)
	mustf(2*len(invFreq) <= d, "RoPEKVWrite: %d frequencies for heads of %d", len(invFreq), d)
	mustf(pos.shape.Equal(Shape{m}) && pos.dtype == I32, "RoPEKVWrite: pos %v for %d rows", pos, m)
	mustf(kvLen.shape.Equal(Shape{1}) && kvLen.dtype == I32, "RoPEKVWrite: kvLen %v", kvLen)
	op := RoPEKVWriteOp{Heads: heads, KVHeads: kvHeads, InvFreq: invFreq, NeoX: neox}
	return node(op, F32, Shape{m, heads, d}, qkv, pos, kcache, vcache, kvLen)
}

func (LinearOp) isOp()      {}
func (RoPEKVWriteOp) isOp() {}

func (o LinearOp) String() string {
	var parts []string
	if o.Norm {
		parts = append(parts, fmt.Sprintf("norm(eps=%g)", o.Eps))
	}
	if o.Bits > 0 {
		parts = append(parts, fmt.Sprintf("bits=%d,group=%d", o.Bits, o.GroupSize))
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{o.Bias, "bias"}, {o.GLU == GLUSiLU, "swiglu"}, {o.GLU == GLUGELU, "geglu"}, {o.Residual, "residual"}} {
		if f.on {
			parts = append(parts, f.name)
		}
	}
	return "Linear{" + strings.Join(parts, ",") + "}"
}

func (o RoPEKVWriteOp) String() string {
	return fmt.Sprintf("RoPEKVWrite{heads=%d,kv=%d,dims=%d,neox=%v}", o.Heads, o.KVHeads, 2*len(o.InvFreq), o.NeoX)
}

// FusedLayers is implemented by a backend that runs LinearOp and
// RoPEKVWriteOp as single kernels: model code builds its layers from them
// for such a backend. A backend whose cost is bytes rather than launches
// (the CPU) leaves it unimplemented, or returns false.
type FusedLayers interface {
	FusesLayers() bool
}
