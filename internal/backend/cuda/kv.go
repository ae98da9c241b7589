package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// kvWrite and kvCompact encode the KV cache's ops; the cache is [KVH, C, D].
func (e *encoder) kvWrite() error {
	c := e.shape(0)
	e.add(kvWriteLaunch(e.in[0], e.in[1], e.in[2], e.dtype(0), e.shape(1)[0], c[0]*c[2], c[1], c[2]))
	return nil
}

func (e *encoder) kvCompact() error {
	c := e.shape(0)
	e.add(kvCompactLaunch(e.in[0], e.in[1], e.in[2], e.dtype(0), e.shape(2).Numel(), c[0]*c[2], c[1], c[2]))
	return nil
}

// kvWriteLaunch writes n rows of rowlen = KVH·d into a cache [KVH, c, d].
func kvWriteLaunch(cache, rows, kvLen devptr, dt graph.DType, n, rowlen, c, d int) *launch {
	return newLaunch("kv_write_"+dt.String(), grid1(ceilDiv(n*rowlen, 256)), 256).ptr(cache).ptr(rows).ptr(kvLen).i32(n).i32(rowlen).i32(c).i32(d)
}

// kvCompactLaunch keeps n positions of a cache [KVH, c, d] (rowlen = KVH·d).
func kvCompactLaunch(cache, kvLen, idx devptr, dt graph.DType, n, rowlen, c, d int) *launch {
	return newLaunch("kv_compact_"+dt.String(), grid1(ceilDiv(rowlen, 256)), 256).ptr(cache).ptr(kvLen).ptr(idx).i32(n).i32(rowlen).i32(c).i32(d)
}
