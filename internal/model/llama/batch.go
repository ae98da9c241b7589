package llama

// Batch is the new tokens of one forward pass, laid out as a tree in DFS
// pre-order (a chain for prefill and decode).
type Batch struct {
	Tokens []int32
	Depth  []int32 // depth of each token in the tree; position = Len() + depth
	End    []int32 // DFS interval end of each token (see graph.AttentionOp)
	Rows   []int32 // which tokens' logits and hidden states to return
}

// Chain returns the batch of a plain causal sequence, asking for the
// outputs of the last token only, or of every token when all is true.
func Chain(tokens []int32, all bool) Batch {
	n := len(tokens)
	b := Batch{Tokens: tokens, Depth: make([]int32, n), End: make([]int32, n)}
	for i := range n {
		b.Depth[i] = int32(i)
		b.End[i] = int32(n - 1)
	}
	if all {
		b.Rows = b.Depth
	} else {
		b.Rows = []int32{int32(n - 1)}
	}
	return b
}
