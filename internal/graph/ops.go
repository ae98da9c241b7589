package graph

import "fmt"

// Op is one typed operation. Backends switch on the concrete type; the set is
// closed so that every backend can be checked for covering all of it.
type Op interface {
	fmt.Stringer
	isOp()
}

// EmbedOp gathers rows of an embedding table: out[i] = table[ids[i]];
// Embed builds it.
// Sources: table [V,D] (f32, f16 or bf16), ids [N] i32. Result [N,D] f32.
// PyTorch: F.embedding(ids, table).
type EmbedOp struct{}

// MatMulOp multiplies by a transposed weight: out = x·wᵀ; MatMul builds it.
// Sources: x [M,K] f32, w [N,K] (f32, f16 or bf16). Result [M,N] f32.
// PyTorch: F.linear(x, w).
type MatMulOp struct{}

// RMSNormOp normalises each row: out = x / sqrt(mean(x²) + Eps) * w;
// RMSNorm builds it.
// Sources: x [M,D] f32, w [D] f32. Result [M,D] f32.
type RMSNormOp struct{ Eps float32 }

// RoPEOp (built by RoPE) rotates pairs of each head's first 2·P
// dimensions, P = len(InvFreq), by angle pos·InvFreq[j]; the rest of the
// head is copied. NeoX pairs (x[j], x[j+P]) as HF checkpoints do (with a
// partial rotary, transformers' rotate_half over the rotated dimensions
// only, Phi-3's q_rot); otherwise adjacent pairs (x[2j], x[2j+1]) as
// llama.cpp's permuted weights do.
// Sources: x [M,H,D] f32, pos [M] i32. Result [M,H,D] f32.
type RoPEOp struct {
	InvFreq []float32 // inverse frequencies, rope scaling already applied
	NeoX    bool
}

// AttentionOp (built by Attention) is scaled dot-product attention of N new
// queries over a KV cache that already holds the new tokens' keys and values
// at rows kvLen..kvLen+N-1.
// Query q sees every cache row before kvLen, and new row k iff
// k <= q <= end[k] (the new tokens are a tree in DFS pre-order; see the
// package comment). Grouped-query attention: query head h reads KV head
// h/(H/KVH).
// Sources: q [N,H,D] f32, k [KVH,C,D] and v [KVH,C,D] (both f32 or both
// f16), kvLen [1] i32, end [N] i32. Result [N,H,D] f32. The caches are
// head-major: one KV head's rows are contiguous, so that attention over a
// long cache streams them (position-major, [C,KVH,D], they would sit KVH·D
// apart, which maps them to a fraction of a CPU cache's sets).
// PyTorch: F.scaled_dot_product_attention(q, k, v, mask, scale=Scale).
//
// Window, when positive, is sliding-window attention (Mistral, Gemma): a
// query at position p sees only the keys at positions p-Window+1 … p. The
// positions are those of the cache rows (row r holds position r: the
// cache is full-length and compacted after each verification, so rows
// before kvLen are positions 0..kvLen-1) and, for the new tokens, kvLen
// plus their depth in the tree. A query's visible keys, numbered in order
// (the cache rows, then its ancestors), have their positions as numbers,
// so the window keeps the last Window of them. Window 0 is no window.
//
// SoftCap, when positive, caps each scaled score s as SoftCap·tanh(s/SoftCap)
// before the mask and the softmax (Gemma 2's attn_logit_softcapping).
type AttentionOp struct {
	Scale   float32
	Window  int
	SoftCap float32
}

// KVWriteOp (built by KVWrite) copies new rows into a cache at rows
// kvLen..kvLen+N-1 and returns the cache (same storage), so that readers of
// the result run after the write.
// Sources: cache [KVH,C,D] (a Var, f32 or f16: rows are rounded to the
// nearest half), rows [N,KVH,D] f32 (row i's head h goes to cache[h,
// kvLen+i]), kvLen [1] i32.
type KVWriteOp struct{}

// KVCompactOp (built by KVCompact) keeps the accepted path of a verified
// tree: for i in order it moves cache position kvLen+idx[i] to kvLen+i, in
// every KV head. idx must be strictly increasing with idx[i] >= i, which
// makes the forward in-place copy safe.
// Sources: cache [KVH,C,D] (a Var), kvLen [1] i32, idx [n] i32. Returns the cache.
type KVCompactOp struct{}

// SiLUOp is x·sigmoid(x), elementwise; SiLU builds it.
type SiLUOp struct{}

// SwiGLUOp is SiLU(gate)·up, elementwise; SwiGLU builds it.
// Sources: gate, up of one shape.
type SwiGLUOp struct{}

// GeGLUOp is GELU(gate)·up, elementwise, with GELU's tanh approximation
// (PyTorch's gelu(x, approximate="tanh"), Gemma's gelu_pytorch_tanh):
// GELU(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); GeGLU builds it.
// Sources: gate, up of one shape.
type GeGLUOp struct{}

// SoftCapOp is Cap·tanh(x/Cap), elementwise (Gemma 2's
// final_logit_softcapping); SoftCap builds it.
type SoftCapOp struct{ Cap float32 }

// AddOp (built by Add) is elementwise a+b. b has a's shape, or the shape of
// a's trailing dimensions, in which case it is broadcast over the leading
// ones (a bias).
type AddOp struct{}

// MulOp is elementwise a·b with AddOp's broadcasting; Mul builds it.
type MulOp struct{}

// ConcatOp joins two arrays along the last dimension; Concat builds it.
// Sources: a [M,Da], b [M,Db]. Result [M,Da+Db].
type ConcatOp struct{}

// LogSoftmaxOp is the log-softmax over the last dimension, in f32;
// LogSoftmax builds it.
type LogSoftmaxOp struct{}

// ArgmaxOp (built by Argmax) is the index of the largest value over the
// last dimension; ties go to the lowest index.
// Source [M,V] f32. Result [M] i32.
type ArgmaxOp struct{}

// TopKOp (built by TopK) gives the indices of the K largest values of each
// row, largest first; ties go to the lowest index.
// Source [M,V] f32. Result [M,K] i32.
type TopKOp struct{ K int }

// GatherRowsOp selects rows: out[i] = x[idx[i]]; GatherRows builds it.
// Sources: x [M,...] f32 or i32, idx [n] i32. Result [n,...].
type GatherRowsOp struct{}

// TakeAlongOp (built by TakeAlong) selects one value per index within each
// row: out[m,j] = x[m, idx[m,j]].
// Sources: x [M,V] f32, idx [M,K] i32. Result [M,K] f32.
type TakeAlongOp struct{}

// RNNStepOp (built by RNNStep) is the draft head's recurrent step, fused:
// out = SiLU(e·wᵀ + s·uᵀ + b), computed as (e·wᵀ + s·uᵀ) + b, the order of
// the unfused MatMul/Add/SiLU graph, so backends can match it exactly.
// Sources: e [M,K] f32, s [M,K] f32, w [N,K] and u [N,K] (f32, f16 or bf16,
// both the same), b [N] f32. Result [M,N] f32.
// PyTorch: F.silu(F.linear(e, w) + F.linear(s, u, b)).
type RNNStepOp struct{}

// WarpLogSoftmaxOp (built by WarpLogSoftmax) is the ReDrafter head's warp
// (the reference's compute_logits) per row: y = x - max(x); every y below
// the K-th largest y (counting repeats; none when the row has at most K
// values) becomes Masked; then the log-softmax over the kept values:
// out = y - log(Σ_kept exp(y)), or Masked - log(Σ_kept exp(y)) where masked
// (a masked value adds nothing to the sum). A row holding NaN or ±Inf comes
// out all NaN. The sum's precision is the backend's (CPU: float64).
// Source [M,V] f32. Result [M,V] f32.
type WarpLogSoftmaxOp struct {
	K      int
	Masked float32
}

// BeamTopOp (built by BeamTop) is one selection of a beam search: the Width
// best (beam b, token t) pairs by score[b] + lp[row(b), t] (an f32 sum),
// best first, ties to the lower flat index b·V+t.
// Sources: beams [3,B] i32, the previous selection in this op's layout, of
// which only row 2 (each beam's score, as float32 bits) is read; lp [R,V]
// f32 with R = B (beam b reads row b) or R = 1 (every beam reads row 0).
// Result [3,Width] i32: row 0 the chosen beam's row of lp, row 1 the token,
// row 2 the new score's float32 bits. If lp holds NaN or ±Inf, every score
// of the result is NaN (and the rest undefined).
type BeamTopOp struct{ Width int }

// SliceOp (built by Slice) views rows Lo..Hi-1 of an array's first
// dimension. Like ReshapeOp it shares the source's storage.
type SliceOp struct{ Lo, Hi int }

// ReshapeOp (built by Reshape) reinterprets an array with a new shape of the
// same size. It is a view: the result shares the source's storage.
type ReshapeOp struct{ Shape Shape }

func (EmbedOp) isOp()          {}
func (MatMulOp) isOp()         {}
func (RMSNormOp) isOp()        {}
func (RoPEOp) isOp()           {}
func (AttentionOp) isOp()      {}
func (KVWriteOp) isOp()        {}
func (KVCompactOp) isOp()      {}
func (SiLUOp) isOp()           {}
func (SwiGLUOp) isOp()         {}
func (GeGLUOp) isOp()          {}
func (SoftCapOp) isOp()        {}
func (AddOp) isOp()            {}
func (MulOp) isOp()            {}
func (ConcatOp) isOp()         {}
func (LogSoftmaxOp) isOp()     {}
func (ArgmaxOp) isOp()         {}
func (TopKOp) isOp()           {}
func (GatherRowsOp) isOp()     {}
func (TakeAlongOp) isOp()      {}
func (RNNStepOp) isOp()        {}
func (ReshapeOp) isOp()        {}
func (WarpLogSoftmaxOp) isOp() {}
func (BeamTopOp) isOp()        {}
func (SliceOp) isOp()          {}

func (EmbedOp) String() string     { return "Embed" }
func (MatMulOp) String() string    { return "MatMul" }
func (o RMSNormOp) String() string { return fmt.Sprintf("RMSNorm{eps=%g}", o.Eps) }
func (o RoPEOp) String() string {
	return fmt.Sprintf("RoPE{dims=%d,neox=%v}", 2*len(o.InvFreq), o.NeoX)
}
func (o AttentionOp) String() string {
	s := fmt.Sprintf("Attention{scale=%g", o.Scale)
	if o.Window > 0 {
		s += fmt.Sprintf(",window=%d", o.Window)
	}
	if o.SoftCap > 0 {
		s += fmt.Sprintf(",softcap=%g", o.SoftCap)
	}
	return s + "}"
}
func (KVWriteOp) String() string    { return "KVWrite" }
func (KVCompactOp) String() string  { return "KVCompact" }
func (SiLUOp) String() string       { return "SiLU" }
func (SwiGLUOp) String() string     { return "SwiGLU" }
func (GeGLUOp) String() string      { return "GeGLU" }
func (o SoftCapOp) String() string  { return fmt.Sprintf("SoftCap{cap=%g}", o.Cap) }
func (AddOp) String() string        { return "Add" }
func (MulOp) String() string        { return "Mul" }
func (ConcatOp) String() string     { return "Concat" }
func (LogSoftmaxOp) String() string { return "LogSoftmax" }
func (ArgmaxOp) String() string     { return "Argmax" }
func (o TopKOp) String() string     { return fmt.Sprintf("TopK{k=%d}", o.K) }
func (GatherRowsOp) String() string { return "GatherRows" }
func (TakeAlongOp) String() string  { return "TakeAlong" }
func (RNNStepOp) String() string    { return "RNNStep" }
func (o ReshapeOp) String() string  { return "Reshape" + o.Shape.String() }
func (o WarpLogSoftmaxOp) String() string {
	return fmt.Sprintf("WarpLogSoftmax{k=%d,masked=%g}", o.K, o.Masked)
}
func (o BeamTopOp) String() string { return fmt.Sprintf("BeamTop{width=%d}", o.Width) }
func (o SliceOp) String() string   { return fmt.Sprintf("Slice[%d:%d]", o.Lo, o.Hi) }

// AllOps lists one value of every op type; backends test that they cover it.
func AllOps() []Op {
	return []Op{EmbedOp{}, MatMulOp{}, RMSNormOp{}, RoPEOp{}, AttentionOp{}, KVWriteOp{}, KVCompactOp{},
		SiLUOp{}, SwiGLUOp{}, GeGLUOp{}, SoftCapOp{Cap: 30}, AddOp{}, MulOp{}, ConcatOp{}, LogSoftmaxOp{}, ArgmaxOp{}, TopKOp{}, GatherRowsOp{},
		TakeAlongOp{}, RNNStepOp{}, ReshapeOp{}, DequantizeOp{Bits: 4, GroupSize: 64}, QMatMulOp{Bits: 4, GroupSize: 64},
		QEmbedOp{Bits: 4, GroupSize: 64}, WarpLogSoftmaxOp{K: 50, Masked: -50000}, BeamTopOp{Width: 1}, SliceOp{Lo: 0, Hi: 1},
		BeamChainsOp{Depth: 1}, AcceptChainsOp{Width: 1},
		LinearOp{Norm: true, Eps: 1e-5}, RoPEKVWriteOp{Heads: 1, KVHeads: 1}}
}

func isFloatWeight(d DType) bool { return d == F32 || d == F16 || d == BF16 }

func mustf(ok bool, format string, args ...any) {
	if !ok {
		panic("graph: " + fmt.Sprintf(format, args...))
	}
}

// Embed gathers rows of table by ids: an EmbedOp, or a QEmbedOp if table is
// Quantized, a BlockEmbedOp if it is Blocks.
func Embed(table, ids *Array) *Array {
	if d, src, ok := quantizedSources(table); ok {
		return qEmbed(table, ids, d, src)
	}
	if d, blocks, ok := blockSources(table); ok {
		return blockEmbed(table, ids, d, blocks)
	}
	mustf(len(table.shape) == 2 && isFloatWeight(table.dtype), "Embed: table %v", table)
	mustf(len(ids.shape) == 1 && ids.dtype == I32, "Embed: ids %v", ids)
	return node(EmbedOp{}, F32, Shape{ids.shape[0], table.shape[1]}, table, ids)
}

// MatMul is x·wᵀ for x [M,K] and w [N,K]: a MatMulOp, or a QMatMulOp if w
// is Quantized, a BlockMatMulOp if it is Blocks.
func MatMul(x, w *Array) *Array {
	if d, src, ok := quantizedSources(w); ok {
		return qMatMul(x, w, d, src)
	}
	if d, blocks, ok := blockSources(w); ok {
		return blockMatMul(x, w, d, blocks)
	}
	mustf(len(x.shape) == 2 && x.dtype == F32, "MatMul: x %v", x)
	mustf(len(w.shape) == 2 && isFloatWeight(w.dtype), "MatMul: w %v", w)
	mustf(x.shape[1] == w.shape[1], "MatMul: x %v and w %v disagree on K", x.shape, w.shape)
	return node(MatMulOp{}, F32, Shape{x.shape[0], w.shape[0]}, x, w)
}

// RMSNorm normalises each row of x [M,D] and scales by w [D]; see RMSNormOp.
func RMSNorm(x, w *Array, eps float32) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "RMSNorm: x %v", x)
	mustf(len(w.shape) == 1 && w.shape[0] == x.shape[1] && w.dtype == F32, "RMSNorm: w %v for x %v", w, x)
	return node(RMSNormOp{Eps: eps}, F32, x.shape, x, w)
}

// RoPE applies rotary position embeddings to x [M,H,D] at positions pos
// [M]; see RoPEOp.
func RoPE(x, pos *Array, invFreq []float32, neox bool) *Array {
	mustf(len(x.shape) == 3 && x.dtype == F32, "RoPE: x %v", x)
	mustf(len(pos.shape) == 1 && pos.shape[0] == x.shape[0] && pos.dtype == I32, "RoPE: pos %v for x %v", pos, x)
	mustf(len(invFreq) > 0 && 2*len(invFreq) <= x.shape[2], "RoPE: %d frequencies for head dim %d", len(invFreq), x.shape[2])
	return node(RoPEOp{InvFreq: invFreq, NeoX: neox}, F32, x.shape, x, pos)
}

// Attention is tree attention of q over a cache; see AttentionOp.
func Attention(q, k, v, kvLen, end *Array, scale float32) *Array {
	return AttentionWith(AttentionOp{Scale: scale}, q, k, v, kvLen, end)
}

// AttentionWith is Attention with every option of op (the sliding window,
// the soft-cap).
func AttentionWith(op AttentionOp, q, k, v, kvLen, end *Array) *Array {
	mustf(op.Window >= 0, "Attention: window %d", op.Window)
	mustf(op.SoftCap >= 0, "Attention: soft-cap %g", op.SoftCap)
	mustf(len(q.shape) == 3 && q.dtype == F32, "Attention: q %v", q)
	mustf(len(k.shape) == 3 && k.shape.Equal(v.shape) && (k.dtype == F32 || k.dtype == F16) && v.dtype == k.dtype, "Attention: k %v v %v", k, v)
	mustf(k.shape[2] == q.shape[2] && q.shape[1]%k.shape[0] == 0, "Attention: q %v vs cache %v", q.shape, k.shape)
	mustf(kvLen.dtype == I32 && kvLen.shape.Numel() == 1, "Attention: kvLen %v", kvLen)
	mustf(end.dtype == I32 && len(end.shape) == 1 && end.shape[0] == q.shape[0], "Attention: end %v for q %v", end, q)
	return node(op, F32, q.shape, q, k, v, kvLen, end)
}

// KVWrite writes rows [N,KVH,D] into cache at kvLen and returns the cache;
// see KVWriteOp.
func KVWrite(cache, rows, kvLen *Array) *Array {
	mustf(cache.kind == kindVar, "KVWrite: cache %v is not a Var", cache)
	mustf(len(rows.shape) == 3 && len(cache.shape) == 3 && rows.shape[1] == cache.shape[0] && rows.shape[2] == cache.shape[2] &&
		rows.dtype == F32 && (cache.dtype == F32 || cache.dtype == F16), "KVWrite: rows %v for cache %v", rows, cache)
	mustf(kvLen.dtype == I32 && kvLen.shape.Numel() == 1, "KVWrite: kvLen %v", kvLen)
	return node(KVWriteOp{}, cache.dtype, cache.shape, cache, rows, kvLen)
}

// KVCompact keeps cache rows kvLen+idx[i] at kvLen+i and returns the cache;
// see KVCompactOp.
func KVCompact(cache, kvLen, idx *Array) *Array {
	mustf(cache.kind == kindVar, "KVCompact: cache %v is not a Var", cache)
	mustf(kvLen.dtype == I32 && kvLen.shape.Numel() == 1, "KVCompact: kvLen %v", kvLen)
	mustf(idx.dtype == I32 && len(idx.shape) == 1, "KVCompact: idx %v", idx)
	return node(KVCompactOp{}, cache.dtype, cache.shape, cache, kvLen, idx)
}

// SiLU is x·sigmoid(x); see SiLUOp.
func SiLU(x *Array) *Array {
	mustf(x.dtype == F32, "SiLU: x %v", x)
	return node(SiLUOp{}, F32, x.shape, x)
}

// SwiGLU is SiLU(gate)·up; see SwiGLUOp.
func SwiGLU(gate, up *Array) *Array {
	mustf(gate.dtype == F32 && up.dtype == F32 && gate.shape.Equal(up.shape), "SwiGLU: gate %v up %v", gate, up)
	return node(SwiGLUOp{}, F32, gate.shape, gate, up)
}

// GeGLU is GELU(gate)·up with GELU's tanh approximation; see GeGLUOp.
func GeGLU(gate, up *Array) *Array {
	mustf(gate.dtype == F32 && up.dtype == F32 && gate.shape.Equal(up.shape), "GeGLU: gate %v up %v", gate, up)
	return node(GeGLUOp{}, F32, gate.shape, gate, up)
}

// SoftCap is cap·tanh(x/cap); see SoftCapOp.
func SoftCap(x *Array, cap float32) *Array {
	mustf(x.dtype == F32 && cap > 0, "SoftCap: x %v cap %g", x, cap)
	return node(SoftCapOp{Cap: cap}, F32, x.shape, x)
}

func checkBroadcast(name string, a, b *Array) {
	mustf(a.dtype == F32 && b.dtype == F32, "%s: a %v b %v", name, a, b)
	n := len(b.shape)
	mustf(n <= len(a.shape) && a.shape[len(a.shape)-n:].Equal(b.shape), "%s: b %v does not broadcast to a %v", name, b.shape, a.shape)
}

// Add is a+b, with b broadcast over a's leading dimensions; see AddOp.
func Add(a, b *Array) *Array {
	checkBroadcast("Add", a, b)
	return node(AddOp{}, F32, a.shape, a, b)
}

// Mul is a·b, with b broadcast over a's leading dimensions; see MulOp.
func Mul(a, b *Array) *Array {
	checkBroadcast("Mul", a, b)
	return node(MulOp{}, F32, a.shape, a, b)
}

// Concat joins a [M,Da] and b [M,Db] into [M,Da+Db]; see ConcatOp.
func Concat(a, b *Array) *Array {
	mustf(len(a.shape) == 2 && len(b.shape) == 2 && a.shape[0] == b.shape[0] && a.dtype == F32 && b.dtype == F32,
		"Concat: a %v b %v", a, b)
	return node(ConcatOp{}, F32, Shape{a.shape[0], a.shape[1] + b.shape[1]}, a, b)
}

// LogSoftmax is the log-softmax over the last dimension; see LogSoftmaxOp.
func LogSoftmax(x *Array) *Array {
	mustf(x.dtype == F32, "LogSoftmax: x %v", x)
	return node(LogSoftmaxOp{}, F32, x.shape, x)
}

// Argmax is the index of the largest value of each row of x [M,V]; see
// ArgmaxOp.
func Argmax(x *Array) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "Argmax: x %v", x)
	return node(ArgmaxOp{}, I32, Shape{x.shape[0]}, x)
}

// TopK gives the indices of the k largest values of each row of x [M,V]; see
// TopKOp.
func TopK(x *Array, k int) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32 && k >= 1 && k <= x.shape[1], "TopK{k=%d}: x %v", k, x)
	return node(TopKOp{K: k}, I32, Shape{x.shape[0], k}, x)
}

// GatherRows selects rows of x by idx; see GatherRowsOp.
func GatherRows(x, idx *Array) *Array {
	mustf(len(x.shape) >= 1 && (x.dtype == F32 || x.dtype == I32), "GatherRows: x %v", x)
	mustf(len(idx.shape) == 1 && idx.dtype == I32, "GatherRows: idx %v", idx)
	shape := append(Shape{idx.shape[0]}, x.shape[1:]...)
	return node(GatherRowsOp{}, x.dtype, shape, x, idx)
}

// TakeAlong gives out[m,j] = x[m, idx[m,j]]; see TakeAlongOp.
func TakeAlong(x, idx *Array) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "TakeAlong: x %v", x)
	mustf(len(idx.shape) == 2 && idx.shape[0] == x.shape[0] && idx.dtype == I32, "TakeAlong: idx %v for x %v", idx, x)
	return node(TakeAlongOp{}, F32, idx.shape, x, idx)
}

// RNNStep is SiLU(e·wᵀ + s·uᵀ + b), one RNNStepOp node when w and u are
// float weights of one dtype; quantized weights get the unfused graph.
func RNNStep(e, s, w, u, b *Array) *Array {
	_, _, wq := quantizedSources(w)
	_, _, uq := quantizedSources(u)
	if wq || uq || w.dtype != u.dtype {
		return SiLU(Add(Add(MatMul(e, w), MatMul(s, u)), b))
	}
	mustf(len(e.shape) == 2 && e.dtype == F32 && e.shape.Equal(s.shape) && s.dtype == F32, "RNNStep: e %v s %v", e, s)
	mustf(len(w.shape) == 2 && isFloatWeight(w.dtype) && w.shape.Equal(u.shape) && w.shape[1] == e.shape[1],
		"RNNStep: w %v u %v for e %v", w, u, e)
	mustf(len(b.shape) == 1 && b.shape[0] == w.shape[0] && b.dtype == F32, "RNNStep: b %v for w %v", b, w)
	return node(RNNStepOp{}, F32, Shape{e.shape[0], w.shape[0]}, e, s, w, u, b)
}

// WarpLogSoftmax masks each row of x [M,V] below its k-th largest value
// and takes the log-softmax of the rest; see WarpLogSoftmaxOp.
func WarpLogSoftmax(x *Array, k int, masked float32) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32 && k >= 1, "WarpLogSoftmax{k=%d}: x %v", k, x)
	return node(WarpLogSoftmaxOp{K: k, Masked: masked}, F32, x.shape, x)
}

// BeamTop selects the width best continuations of beams [3,B] from their
// log-probabilities lp [R,V] (R = B or 1); see BeamTopOp.
func BeamTop(beams, lp *Array, width int) *Array {
	mustf(len(beams.shape) == 2 && beams.shape[0] == 3 && beams.dtype == I32, "BeamTop: beams %v", beams)
	mustf(len(lp.shape) == 2 && lp.dtype == F32 && (lp.shape[0] == 1 || lp.shape[0] == beams.shape[1]), "BeamTop: lp %v for beams %v", lp, beams)
	mustf(width >= 1 && width <= beams.shape[1]*lp.shape[1], "BeamTop{width=%d}: of %d×%d", width, beams.shape[1], lp.shape[1])
	return node(BeamTopOp{Width: width}, I32, Shape{3, width}, beams, lp)
}

// Slice views rows lo..hi-1 of x's first dimension; see SliceOp.
func Slice(x *Array, lo, hi int) *Array {
	mustf(len(x.shape) >= 1 && 0 <= lo && lo < hi && hi <= x.shape[0], "Slice[%d:%d]: x %v", lo, hi, x)
	s := append(Shape{hi - lo}, x.shape[1:]...)
	return node(SliceOp{Lo: lo, Hi: hi}, x.dtype, s, x)
}

// Reshape views x with a new shape of the same size; see ReshapeOp.
func Reshape(x *Array, shape ...int) *Array {
	s := cloneShape(shape)
	mustf(s.Numel() == x.shape.Numel(), "Reshape: %v to %v", x.shape, s)
	return node(ReshapeOp{Shape: s}, x.dtype, s, x)
}

// WrittenSources lists the sources, by index, that op writes in place
// besides its result. A GPU backend orders its kernels by what each reads
// and writes (barriers, graph edges): a step writes its result and these.
func WrittenSources(op Op) []int {
	switch op.(type) {
	case KVWriteOp, KVCompactOp:
		return []int{0} // the cache, which the result also is
	case RoPEKVWriteOp:
		return []int{2, 3} // the key and value caches
	}
	return nil
}
