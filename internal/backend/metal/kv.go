package metal

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// KVWrite: rows [N,KVH,D] go to positions kvLen.. of the cache [KVH,C,D]
// (In[0] and the result).
func (e *encoder) kvWrite() error {
	cache, rows, kvLen := e.step.In[0], e.step.In[1], e.step.In[2]
	row := cache.Shape[0] * cache.Shape[2]
	n := rows.Shape[0]
	return e.launch(kernelName("kv", "write", cache.DType), KVArgs{N: i32(n), Row: i32(row), C: i32(cache.Shape[1]), D: i32(cache.Shape[2])},
		groups1D(n*row, 256), threads1D(256), nil, rw(cache), rd(rows), rd(kvLen))
}

// KVCompact: one thread per column (head and element) walks the kept
// positions in order.
func (e *encoder) kvCompact() error {
	cache, kvLen, idx := e.step.In[0], e.step.In[1], e.step.In[2]
	row := cache.Shape[0] * cache.Shape[2]
	return e.launch(kernelName("kv", "compact", cache.DType), KVArgs{N: i32(idx.Shape[0]), Row: i32(row), C: i32(cache.Shape[1]), D: i32(cache.Shape[2])},
		groups1D(row, 256), threads1D(256), nil, rw(cache), rd(kvLen), rd(idx))
}

// RoPEKVWrite: one thread per element of the fused Q·K·V rows (kv_rope);
// it writes the result (the rotated queries) and both caches, which are
// bound as written so that the plan puts barriers before their readers.
func (e *encoder) ropeKVWrite(op graph.RoPEKVWriteOp) error {
	qkv, pos, kc, vc, kvLen, out := e.step.In[0], e.step.In[1], e.step.In[2], e.step.In[3], e.step.In[4], e.step.Out
	m, d := qkv.Shape[0], kc.Shape[2]
	if 2*len(op.InvFreq) > d {
		return fmt.Errorf("%d frequencies for head dim %d", len(op.InvFreq), d)
	}
	if kc.DType != vc.DType {
		return fmt.Errorf("key cache %v and value cache %v", kc.DType, vc.DType)
	}
	variant := "ropeadjacent"
	if op.NeoX {
		variant = "ropeneox"
	}
	freq := graph.AsBytes(append([]float32(nil), op.InvFreq...))
	args := RoPEKVArgs{M: i32(m), H: i32(op.Heads), KVH: i32(op.KVHeads), D: i32(d), P: i32(len(op.InvFreq)), C: i32(kc.Shape[1])}
	return e.launch(kernelName("kv", variant, kc.DType), args, groups1D(qkv.Shape.Numel(), 256), threads1D(256), nil,
		rd(qkv), rd(pos), raw(freq), wr(out), rw(kc), rw(vc), rd(kvLen))
}
