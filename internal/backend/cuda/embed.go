package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// embed encodes EmbedOp: out[i,:] = table[ids[i],:].
func (e *encoder) embed() error {
	v, d := e.shape(0)[0], e.shape(0)[1]
	e.add(embedLaunch(e.out, e.in[0], e.in[1], e.dtype(0), e.shape(1).Numel(), d, v))
	return nil
}

// embedLaunch: a block for every 128 elements of each of the n rows
// (embed.cu).
func embedLaunch(out, table, ids devptr, dt graph.DType, n, d, v int) *launch {
	return newLaunch("embed_"+dt.String(), grid2(n, ceilDiv(d, 128)), 128).ptr(out).ptr(table).ptr(ids).i32(n).i32(d).i32(v)
}
