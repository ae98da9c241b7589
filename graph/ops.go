package graph

import "fmt"

// Op is one typed operation. Backends switch on the concrete type; the set is
// closed so that every backend can be checked for covering all of it.
type Op interface {
	fmt.Stringer
	isOp()
}

// Embed gathers rows of an embedding table: out[i] = table[ids[i]].
// Sources: table [V,D] (f32, f16 or bf16), ids [N] i32. Result [N,D] f32.
// PyTorch: F.embedding(ids, table).
type Embed struct{}

// MatMul multiplies by a transposed weight: out = x·wᵀ.
// Sources: x [M,K] f32, w [N,K] (f32, f16 or bf16). Result [M,N] f32.
// PyTorch: F.linear(x, w).
type MatMul struct{}

// RMSNorm normalises each row: out = x / sqrt(mean(x²) + Eps) * w.
// Sources: x [M,D] f32, w [D] f32. Result [M,D] f32.
type RMSNorm struct{ Eps float32 }

// RoPE rotates pairs of each head's first 2·len(InvFreq) dimensions by
// angle pos·InvFreq[j]. NeoX pairs (x[j], x[j+d/2]) as HF checkpoints do;
// otherwise adjacent pairs (x[2j], x[2j+1]) as llama.cpp's permuted weights do.
// Sources: x [M,H,D] f32, pos [M] i32. Result [M,H,D] f32.
type RoPE struct {
	InvFreq []float32 // inverse frequencies, rope scaling already applied
	NeoX    bool
}

// Attention is scaled dot-product attention of N new queries over a KV cache
// that already holds the new tokens' keys and values at rows kvLen..kvLen+N-1.
// Query q sees every cache row before kvLen, and new row k iff
// k <= q <= end[k] (the new tokens are a tree in DFS pre-order; see the
// package comment). Grouped-query attention: query head h reads KV head
// h/(H/KVH).
// Sources: q [N,H,D] f32, k [C,KVH,D] and v [C,KVH,D] (both f32 or both
// f16), kvLen [1] i32, end [N] i32. Result [N,H,D] f32.
// PyTorch: F.scaled_dot_product_attention(q, k, v, mask, scale=Scale).
type Attention struct{ Scale float32 }

// KVWrite copies new rows into a cache at rows kvLen..kvLen+N-1 and returns
// the cache (same storage), so that readers of the result run after the write.
// Sources: cache [C,KVH,D] (a Var, f32 or f16: rows are rounded to the
// nearest half), rows [N,KVH,D] f32, kvLen [1] i32.
type KVWrite struct{}

// KVCompact keeps the accepted path of a verified tree: for i in order it
// moves cache row kvLen+idx[i] to row kvLen+i. idx must be strictly
// increasing with idx[i] >= i, which makes the forward in-place copy safe.
// Sources: cache [C,KVH,D] (a Var), kvLen [1] i32, idx [n] i32. Returns the cache.
type KVCompact struct{}

// SiLU is x·sigmoid(x), elementwise.
type SiLU struct{}

// SwiGLU is SiLU(gate)·up, elementwise. Sources: gate, up of one shape.
type SwiGLU struct{}

// Add is elementwise a+b. b has a's shape, or the shape of a's trailing
// dimensions, in which case it is broadcast over the leading ones (a bias).
type Add struct{}

// Mul is elementwise a·b with Add's broadcasting.
type Mul struct{}

// Concat joins two arrays along the last dimension.
// Sources: a [M,Da], b [M,Db]. Result [M,Da+Db].
type Concat struct{}

// LogSoftmax over the last dimension, in f32.
type LogSoftmax struct{}

// Argmax over the last dimension; ties go to the lowest index.
// Source [M,V] f32. Result [M] i32.
type Argmax struct{}

// TopK gives the indices of the K largest values of each row, largest first;
// ties go to the lowest index. Source [M,V] f32. Result [M,K] i32.
type TopK struct{ K int }

// GatherRows selects rows: out[i] = x[idx[i]].
// Sources: x [M,...] f32 or i32, idx [n] i32. Result [n,...].
type GatherRows struct{}

// TakeAlong selects one value per index within each row: out[m,j] = x[m, idx[m,j]].
// Sources: x [M,V] f32, idx [M,K] i32. Result [M,K] f32.
type TakeAlong struct{}

// RNNStep is the draft head's recurrent step, fused:
// out = SiLU(e·wᵀ + s·uᵀ + b), computed as (e·wᵀ + s·uᵀ) + b, the order of
// the unfused Linear/Add/SiLU graph, so backends can match it exactly.
// Sources: e [M,K] f32, s [M,K] f32, w [N,K] and u [N,K] (f32, f16 or bf16,
// both the same), b [N] f32. Result [M,N] f32.
// PyTorch: F.silu(F.linear(e, w) + F.linear(s, u, b)).
type RNNStep struct{}

// Reshape reinterprets an array with a new shape of the same size. It is a
// view: the result shares the source's storage.
type Reshape struct{ Shape Shape }

func (Embed) isOp()      {}
func (MatMul) isOp()     {}
func (RMSNorm) isOp()    {}
func (RoPE) isOp()       {}
func (Attention) isOp()  {}
func (KVWrite) isOp()    {}
func (KVCompact) isOp()  {}
func (SiLU) isOp()       {}
func (SwiGLU) isOp()     {}
func (Add) isOp()        {}
func (Mul) isOp()        {}
func (Concat) isOp()     {}
func (LogSoftmax) isOp() {}
func (Argmax) isOp()     {}
func (TopK) isOp()       {}
func (GatherRows) isOp() {}
func (TakeAlong) isOp()  {}
func (RNNStep) isOp()    {}
func (Reshape) isOp()    {}

func (Embed) String() string       { return "Embed" }
func (MatMul) String() string      { return "MatMul" }
func (o RMSNorm) String() string   { return fmt.Sprintf("RMSNorm{eps=%g}", o.Eps) }
func (o RoPE) String() string      { return fmt.Sprintf("RoPE{dims=%d,neox=%v}", 2*len(o.InvFreq), o.NeoX) }
func (o Attention) String() string { return fmt.Sprintf("Attention{scale=%g}", o.Scale) }
func (KVWrite) String() string     { return "KVWrite" }
func (KVCompact) String() string   { return "KVCompact" }
func (SiLU) String() string        { return "SiLU" }
func (SwiGLU) String() string      { return "SwiGLU" }
func (Add) String() string         { return "Add" }
func (Mul) String() string         { return "Mul" }
func (Concat) String() string      { return "Concat" }
func (LogSoftmax) String() string  { return "LogSoftmax" }
func (Argmax) String() string      { return "Argmax" }
func (o TopK) String() string      { return fmt.Sprintf("TopK{k=%d}", o.K) }
func (GatherRows) String() string  { return "GatherRows" }
func (TakeAlong) String() string   { return "TakeAlong" }
func (RNNStep) String() string     { return "RNNStep" }
func (o Reshape) String() string   { return "Reshape" + o.Shape.String() }

// AllOps lists one value of every op type; backends test that they cover it.
func AllOps() []Op {
	return []Op{Embed{}, MatMul{}, RMSNorm{}, RoPE{}, Attention{}, KVWrite{}, KVCompact{},
		SiLU{}, SwiGLU{}, Add{}, Mul{}, Concat{}, LogSoftmax{}, Argmax{}, TopK{}, GatherRows{},
		TakeAlong{}, RNNStep{}, Reshape{}, Dequantize{Bits: 4, GroupSize: 64}, QMatMul{Bits: 4, GroupSize: 64},
		QEmbed{Bits: 4, GroupSize: 64}}
}

func isFloatWeight(d DType) bool { return d == F32 || d == F16 || d == BF16 }

func mustf(ok bool, format string, args ...any) {
	if !ok {
		panic("graph: " + fmt.Sprintf(format, args...))
	}
}

// EmbedRows gathers rows of table by ids.
func EmbedRows(table, ids *Array) *Array {
	if d, src, ok := quantizedSources(table); ok {
		return qEmbedRows(table, ids, d, src)
	}
	mustf(len(table.shape) == 2 && isFloatWeight(table.dtype), "Embed: table %v", table)
	mustf(len(ids.shape) == 1 && ids.dtype == I32, "Embed: ids %v", ids)
	return node(Embed{}, F32, Shape{ids.shape[0], table.shape[1]}, table, ids)
}

// Linear is x·wᵀ for x [M,K] and w [N,K].
func Linear(x, w *Array) *Array {
	if d, src, ok := quantizedSources(w); ok {
		return qLinear(x, w, d, src)
	}
	mustf(len(x.shape) == 2 && x.dtype == F32, "MatMul: x %v", x)
	mustf(len(w.shape) == 2 && isFloatWeight(w.dtype), "MatMul: w %v", w)
	mustf(x.shape[1] == w.shape[1], "MatMul: x %v and w %v disagree on K", x.shape, w.shape)
	return node(MatMul{}, F32, Shape{x.shape[0], w.shape[0]}, x, w)
}

// RMSNormRows normalises each row of x [M,D] and scales by w [D].
func RMSNormRows(x, w *Array, eps float32) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "RMSNorm: x %v", x)
	mustf(len(w.shape) == 1 && w.shape[0] == x.shape[1] && w.dtype == F32, "RMSNorm: w %v for x %v", w, x)
	return node(RMSNorm{Eps: eps}, F32, x.shape, x, w)
}

// Rotary applies rotary position embeddings to x [M,H,D] at positions pos [M].
func Rotary(x, pos *Array, invFreq []float32, neox bool) *Array {
	mustf(len(x.shape) == 3 && x.dtype == F32, "RoPE: x %v", x)
	mustf(len(pos.shape) == 1 && pos.shape[0] == x.shape[0] && pos.dtype == I32, "RoPE: pos %v for x %v", pos, x)
	mustf(len(invFreq) > 0 && 2*len(invFreq) <= x.shape[2], "RoPE: %d frequencies for head dim %d", len(invFreq), x.shape[2])
	return node(RoPE{InvFreq: invFreq, NeoX: neox}, F32, x.shape, x, pos)
}

// Attend is tree attention of q over a cache; see Attention.
func Attend(q, k, v, kvLen, end *Array, scale float32) *Array {
	mustf(len(q.shape) == 3 && q.dtype == F32, "Attention: q %v", q)
	mustf(len(k.shape) == 3 && k.shape.Equal(v.shape) && (k.dtype == F32 || k.dtype == F16) && v.dtype == k.dtype, "Attention: k %v v %v", k, v)
	mustf(k.shape[2] == q.shape[2] && q.shape[1]%k.shape[1] == 0, "Attention: q %v vs cache %v", q.shape, k.shape)
	mustf(kvLen.dtype == I32 && kvLen.shape.Numel() == 1, "Attention: kvLen %v", kvLen)
	mustf(end.dtype == I32 && len(end.shape) == 1 && end.shape[0] == q.shape[0], "Attention: end %v for q %v", end, q)
	return node(Attention{Scale: scale}, F32, q.shape, q, k, v, kvLen, end)
}

// WriteKV writes rows [N,KVH,D] into cache at kvLen and returns the cache.
func WriteKV(cache, rows, kvLen *Array) *Array {
	mustf(cache.kind == kindVar, "KVWrite: cache %v is not a Var", cache)
	mustf(len(rows.shape) == 3 && rows.shape[1] == cache.shape[1] && rows.shape[2] == cache.shape[2] &&
		rows.dtype == F32 && (cache.dtype == F32 || cache.dtype == F16), "KVWrite: rows %v for cache %v", rows, cache)
	mustf(kvLen.dtype == I32 && kvLen.shape.Numel() == 1, "KVWrite: kvLen %v", kvLen)
	return node(KVWrite{}, cache.dtype, cache.shape, cache, rows, kvLen)
}

// CompactKV keeps cache rows kvLen+idx[i] at kvLen+i and returns the cache.
func CompactKV(cache, kvLen, idx *Array) *Array {
	mustf(cache.kind == kindVar, "KVCompact: cache %v is not a Var", cache)
	mustf(kvLen.dtype == I32 && kvLen.shape.Numel() == 1, "KVCompact: kvLen %v", kvLen)
	mustf(idx.dtype == I32 && len(idx.shape) == 1, "KVCompact: idx %v", idx)
	return node(KVCompact{}, cache.dtype, cache.shape, cache, kvLen, idx)
}

// Silu is x·sigmoid(x).
func Silu(x *Array) *Array {
	mustf(x.dtype == F32, "SiLU: x %v", x)
	return node(SiLU{}, F32, x.shape, x)
}

// SwiGLUOf is SiLU(gate)·up.
func SwiGLUOf(gate, up *Array) *Array {
	mustf(gate.dtype == F32 && up.dtype == F32 && gate.shape.Equal(up.shape), "SwiGLU: gate %v up %v", gate, up)
	return node(SwiGLU{}, F32, gate.shape, gate, up)
}

func checkBroadcast(name string, a, b *Array) {
	mustf(a.dtype == F32 && b.dtype == F32, "%s: a %v b %v", name, a, b)
	n := len(b.shape)
	mustf(n <= len(a.shape) && a.shape[len(a.shape)-n:].Equal(b.shape), "%s: b %v does not broadcast to a %v", name, b.shape, a.shape)
}

// AddOf is a+b, with b broadcast over a's leading dimensions.
func AddOf(a, b *Array) *Array {
	checkBroadcast("Add", a, b)
	return node(Add{}, F32, a.shape, a, b)
}

// MulOf is a·b, with b broadcast over a's leading dimensions.
func MulOf(a, b *Array) *Array {
	checkBroadcast("Mul", a, b)
	return node(Mul{}, F32, a.shape, a, b)
}

// ConcatOf joins a [M,Da] and b [M,Db] into [M,Da+Db].
func ConcatOf(a, b *Array) *Array {
	mustf(len(a.shape) == 2 && len(b.shape) == 2 && a.shape[0] == b.shape[0] && a.dtype == F32 && b.dtype == F32,
		"Concat: a %v b %v", a, b)
	return node(Concat{}, F32, Shape{a.shape[0], a.shape[1] + b.shape[1]}, a, b)
}

// LogSoftmaxOf is the log-softmax over the last dimension.
func LogSoftmaxOf(x *Array) *Array {
	mustf(x.dtype == F32, "LogSoftmax: x %v", x)
	return node(LogSoftmax{}, F32, x.shape, x)
}

// ArgmaxOf is the index of the largest value of each row of x [M,V].
func ArgmaxOf(x *Array) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "Argmax: x %v", x)
	return node(Argmax{}, I32, Shape{x.shape[0]}, x)
}

// TopKOf gives the indices of the k largest values of each row of x [M,V].
func TopKOf(x *Array, k int) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32 && k >= 1 && k <= x.shape[1], "TopK{k=%d}: x %v", k, x)
	return node(TopK{K: k}, I32, Shape{x.shape[0], k}, x)
}

// Rows selects rows of x by idx.
func Rows(x, idx *Array) *Array {
	mustf(len(x.shape) >= 1 && (x.dtype == F32 || x.dtype == I32), "GatherRows: x %v", x)
	mustf(len(idx.shape) == 1 && idx.dtype == I32, "GatherRows: idx %v", idx)
	shape := append(Shape{idx.shape[0]}, x.shape[1:]...)
	return node(GatherRows{}, x.dtype, shape, x, idx)
}

// TakeAlongRows gives out[m,j] = x[m, idx[m,j]].
func TakeAlongRows(x, idx *Array) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "TakeAlong: x %v", x)
	mustf(len(idx.shape) == 2 && idx.shape[0] == x.shape[0] && idx.dtype == I32, "TakeAlong: idx %v for x %v", idx, x)
	return node(TakeAlong{}, F32, idx.shape, x, idx)
}

// RNNStepOf is SiLU(e·wᵀ + s·uᵀ + b), one RNNStep node when w and u are
// float weights of one dtype; quantized weights get the unfused graph.
func RNNStepOf(e, s, w, u, b *Array) *Array {
	_, _, wq := quantizedSources(w)
	_, _, uq := quantizedSources(u)
	if wq || uq || w.dtype != u.dtype {
		return Silu(AddOf(AddOf(Linear(e, w), Linear(s, u)), b))
	}
	mustf(len(e.shape) == 2 && e.dtype == F32 && e.shape.Equal(s.shape) && s.dtype == F32, "RNNStep: e %v s %v", e, s)
	mustf(len(w.shape) == 2 && isFloatWeight(w.dtype) && w.shape.Equal(u.shape) && w.shape[1] == e.shape[1],
		"RNNStep: w %v u %v for e %v", w, u, e)
	mustf(len(b.shape) == 1 && b.shape[0] == w.shape[0] && b.dtype == F32, "RNNStep: b %v for w %v", b, w)
	return node(RNNStep{}, F32, Shape{e.shape[0], w.shape[0]}, e, s, w, u, b)
}

// ReshapeTo views x with a new shape of the same size.
func ReshapeTo(x *Array, shape ...int) *Array {
	s := cloneShape(shape)
	mustf(s.Numel() == x.shape.Numel(), "Reshape: %v to %v", x.shape, s)
	return node(Reshape{Shape: s}, x.dtype, s, x)
}
