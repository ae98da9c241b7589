package metal

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/graph"
)

// Attention: one threadgroup per (head, query); see attention.metal.
func (e *encoder) attention(op graph.AttentionOp) error {
	q, k, v, kvLen, end, out := e.step.In[0], e.step.In[1], e.step.In[2], e.step.In[3], e.step.In[4], e.step.Out
	n, h, d := q.Shape[0], q.Shape[1], q.Shape[2]
	c, kvh := k.Shape[0], k.Shape[1]
	if d > attnMaxHeadDim {
		return fmt.Errorf("head dim %d > %d", d, attnMaxHeadDim)
	}
	if h%kvh != 0 {
		return fmt.Errorf("%d query heads for %d KV heads", h, kvh)
	}
	args := AttentionArgs{N: i32(n), H: i32(h), KVH: i32(kvh), D: i32(d), C: i32(c), Scale: op.Scale}
	return e.launch(kernelName("attention", "tree", e.step.In[1].DType), args, [3]int{h, n, 1}, threads1D(32*attnSimdgroups),
		[]int{sharedBytes(attnSimdgroups * (d + 2))}, rd(q), rd(k), rd(v), rd(kvLen), rd(end), wr(out))
}
