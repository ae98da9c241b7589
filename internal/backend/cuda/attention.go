package cuda

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// attention encodes AttentionOp.
func (e *encoder) attention(op graph.AttentionOp) error {
	q, k := e.shape(0), e.shape(1)
	l, err := attentionLaunch(e.out, e.in[0], e.in[1], e.in[2], e.in[3], e.in[4], e.dtype(1), q[0], q[1], k[0], q[2], k[1], op.Scale)
	if err != nil {
		return err
	}
	e.add(l)
	return nil
}

// attentionMaxD is the largest head dimension attention.cu takes.
const attentionMaxD = 256

// attentionLaunch: q [n, h, d], caches [kvh, c, d].
func attentionLaunch(out, q, k, v, kvLen, end devptr, dt graph.DType, n, h, kvh, d, c int, scale float32) (*launch, error) {
	if d > attentionMaxD {
		return nil, fmt.Errorf("cuda: attention head dim %d > %d", d, attentionMaxD)
	}
	return newLaunch("attention_tree_"+dt.String(), grid2(h, n), 128).
		ptr(out).ptr(q).ptr(k).ptr(v).ptr(kvLen).ptr(end).i32(n).i32(h).i32(kvh).i32(d).i32(c).f32(scale), nil
}
