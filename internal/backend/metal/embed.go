package metal

// Embed: one thread per output element.
func (e *encoder) embed() error {
	table, ids, out := e.step.In[0], e.step.In[1], e.step.Out
	v, d := table.Shape[0], table.Shape[1]
	n := ids.Shape[0]
	return e.launch(kernelName("embed", "rows", table.DType), EmbedArgs{N: i32(n), D: i32(d), V: i32(v)},
		groups1D(n*d, 256), threads1D(256), nil, rd(table), rd(ids), wr(out))
}
