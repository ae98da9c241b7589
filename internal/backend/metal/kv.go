package metal

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
