package metal

// GatherRows: one thread per output element, 4-byte elements.
func (e *encoder) gatherRows() error {
	x, idx, out := e.step.In[0], e.step.In[1], e.step.Out
	m := x.Shape[0]
	row := x.Shape.Numel() / m
	n := idx.Shape[0]
	return e.launch(kernelName("gather", "rows", x.DType), GatherArgs{N: i32(n), M: i32(m), Row: i32(row)},
		groups1D(n*row, 256), threads1D(256), nil, rd(x), rd(idx), wr(out))
}

// TakeAlong: one thread per output element.
func (e *encoder) takeAlong() error {
	x, idx, out := e.step.In[0], e.step.In[1], e.step.Out
	m, v, k := x.Shape[0], x.Shape[1], idx.Shape[1]
	return e.launch(kernelName("gather", "take", x.DType), RowArgs{M: i32(m), V: i32(v), K: i32(k)},
		groups1D(m*k, 256), threads1D(256), nil, rd(x), rd(idx), wr(out))
}
