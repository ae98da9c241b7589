package metal

import (
	"fmt"
	"runtime"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Attention (attention.metal): the visible keys of each query are cut into
// chunks of ATTN_CHUNK. With enough (head, query) pairs to fill the GPU
// (prefill, large trees), attention_tree runs one threadgroup per pair,
// which walks the chunks. Otherwise (decode, small trees over a cache of
// more than one chunk) attention_split runs one threadgroup per (head,
// query, chunk) into a scratch buffer that attention_reduce merges. Both
// give the same bits, so the choice, made here from the shapes, never
// changes a result.

// attnSplitBelow is the number of (head, query) pairs under which the
// split kernels run (when the cache spans more than one chunk); a variable
// so that tests can force either path.
var attnSplitBelow = 512

// attnScratchMax bounds the split kernels' scratch; larger shapes walk the
// chunks in one threadgroup instead.
const attnScratchMax = 32 << 20

func (e *encoder) attention(op graph.AttentionOp) error {
	q, k, v, kvLen, end, out := e.step.In[0], e.step.In[1], e.step.In[2], e.step.In[3], e.step.In[4], e.step.Out
	n, h, d := q.Shape[0], q.Shape[1], q.Shape[2]
	kvh, c := k.Shape[0], k.Shape[1]
	if d > attnMaxHeadDim {
		return fmt.Errorf("head dim %d > %d", d, attnMaxHeadDim)
	}
	if h%kvh != 0 {
		return fmt.Errorf("%d query heads for %d KV heads", h, kvh)
	}
	chunks := (c + attnChunk - 1) / attnChunk // a query sees at most the whole cache
	args := AttentionArgs{N: i32(n), H: i32(h), KVH: i32(kvh), D: i32(d), C: i32(c), Scale: op.Scale,
		P: i32(chunks), Vec4: e.vec4(d, q, k, v, out), Window: i32(op.Window), SoftCap: op.SoftCap}
	shared := []int{sharedBytes(attnSimdgroups * (d + 2)), sharedBytes(attnChunk + 32)}
	scratchBytes := n * h * chunks * (d + 2) * 4
	if chunks <= 1 || n*h >= attnSplitBelow || scratchBytes > attnScratchMax {
		return e.launch(kernelName("attention", "tree", k.DType), args, [3]int{h, n, 1}, threads1D(32*attnSimdgroups),
			shared, rd(q), rd(k), rd(v), rd(kvLen), rd(end), wr(out))
	}
	buf, err := e.b.Alloc(scratchBytes)
	if err != nil {
		return err
	}
	part := graph.Operand{Buf: buf, DType: graph.F32, Shape: graph.Shape{n * h * chunks * (d + 2)}}
	if err := e.launch(kernelName("attention", "split", k.DType), args, [3]int{h, n, chunks}, threads1D(32*attnSimdgroups),
		shared, rd(q), rd(k), rd(v), rd(kvLen), rd(end), wr(part)); err != nil {
		e.b.Free(buf)
		return err
	}
	// The scratch lives as long as the plan's dispatches that use it.
	// (The cleanup must not reach the dispatch, hence b and not e.)
	b := e.b
	runtime.AddCleanup(e.ds[len(e.ds)-1], func(buf graph.Buffer) { b.Free(buf) }, buf)
	return e.launch(kernelName("attention", "reduce", graph.F32), args, [3]int{h, n, 1}, threads1D(32*attnSimdgroups),
		nil, rd(part), wr(out))
}
